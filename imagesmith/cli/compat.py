"""``imagesmith compat``: the compatibility knowledge base as a table."""

from __future__ import annotations

import json

import click

from imagesmith.errors import UserError
from imagesmith.model import compat
from imagesmith.table import print_table


@click.command("compat")
@click.option("--torch", "torch_filter", help="A release line (2.9) or exact version (2.9.1).")
@click.option("--cuda", "cuda_filter", help="Only variants for this CUDA version (or cpu).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def compat_cmd(torch_filter: str | None, cuda_filter: str | None, fmt: str) -> None:
    """The compatibility knowledge base as a table."""
    kb = compat.load()
    rows = compat_rows(kb, torch_filter, cuda_filter)
    if torch_filter and not rows:
        raise UserError(f"no torch {torch_filter} in the knowledge base; known: {', '.join(kb.torch_lines())}")
    if fmt == "json":
        keys = ["torch", "python", "variant", "cuda", "cudnn", "nccl", "torchvision", "torchaudio", "arch", "driver_min", "driver_toolkit", "index"]
        click.echo(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return
    print_table("PyTorch compatibility (Linux x86_64 wheels)",
                ["torch", "python", "variant", "cuda", "cudnn", "nccl", "vision", "audio", "arch", "min driver", "toolkit driver", "index"],
                rows)


def compat_rows(kb: compat.KnowledgeBase, torch_filter: str | None, cuda_filter: str | None) -> list[list[str]]:
    rows = []
    for version in kb.torch_versions():
        release = kb.torch[version]
        if torch_filter and not (version == torch_filter or release.line == torch_filter):
            continue
        for variant in release.variants.values():
            if cuda_filter and (variant.cuda or "cpu") != cuda_filter:
                continue
            cuda = kb.cuda.get(variant.cuda or "")
            rows.append([version, f"{release.python[0]}-{release.python[-1]}" if release.python else "-",
                         variant.name, variant.cuda or "cpu", variant.cudnn or "-", variant.nccl or "-",
                         release.torchvision or "-", release.torchaudio or "-", " ".join(variant.arch) or "-",
                         cuda.min_driver if cuda else "-", cuda.toolkit_driver if cuda else "-", variant.index])
    return rows

