"""``imagesmith plan``: every build target, or the CI fan-out that builds them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from imagesmith import __version__
from imagesmith.cli.common import load_matrix, today
from imagesmith.cli.options import ALLOW_ROOT_OPTION, MATRIX_OPTION
from imagesmith.errors import UserError
from imagesmith.model import compat
from imagesmith.model import plan as plan_mod
from imagesmith.model.buildreport import BuildReport
from imagesmith.table import print_table
from imagesmith.units import gb


@click.command("plan")
@MATRIX_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json", "gitlab-ci", "github-matrix"]), default="table",
              show_default=True, help="gitlab-ci: a GitLab child pipeline (one build job per target needing its parent's, "
                                      "verify jobs on GPU runners, one publish job); github-matrix: JSON for fromJSON (targets by depth).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write plan.json here.")
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today. CI formats pin it for every job.")
@click.option("--layers", "show_layers", is_flag=True, help="Each target's CUDA layer (shared by how many cells) and own bytes.")
@click.option("--build-report", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="With --layers: measured bytes from this build report (build/report.json) instead of estimates.")
@click.option("--stage", "stage_repo", default=None, metavar="REGISTRY/REPO",
              help="gitlab-ci: the staging repository the build jobs push to and the verify jobs pull from.")
@click.option("--build-tag", "build_tags", multiple=True, help="gitlab-ci: runner tag of the build jobs (repeat; default self-hosted, linux, docker).")
@click.option("--gpu-tag", "gpu_tags", multiple=True, help="gitlab-ci: runner tag of the verify jobs (repeat; default self-hosted, linux, gpu).")
@click.option("--tier", type=click.Choice(["quick", "standard", "soak"]), default=None,
              help="gitlab-ci: the verify jobs' tier; default: the matrix's verify.tier.")
@ALLOW_ROOT_OPTION
def plan_cmd(matrix_file: Path, fmt: str, out: Path | None, date: str | None, show_layers: bool, build_report: Path | None,
             stage_repo: str | None, build_tags: tuple[str, ...], gpu_tags: tuple[str, ...], tier: str | None,
             allow_roots: tuple[Path, ...]) -> None:
    """Every build target with its parent, resolved versions and tags (or the CI fan-out that builds them)."""
    m = load_matrix(matrix_file, allow_roots)
    p = plan_mod.expand(m, date or today())
    if out:
        plan_mod.write(p, out)
    if fmt in ("gitlab-ci", "github-matrix"):
        click.echo(_ci_document(p, m, matrix_file, fmt, stage_repo, build_tags, gpu_tags, tier or m.verify.tier, allow_roots), nl=False)
        return
    if show_layers:
        print_layers(p, _read_build(build_report) if build_report else None, fmt)
        return
    if fmt == "json":
        click.echo(json.dumps(plan_mod.to_json(p), indent=2, sort_keys=True))
        return
    several = len({t.platform for t in p.targets}) > 1  # a platform column only where there is a choice
    print_table(
        f"{len(p.targets)} targets from {matrix_file}",
        ["target", "parent", "torch", "vision", "cuda", "cudnn", "nccl", "py", "os", *(["platform"] if several else []),
         "base image", "torch index", "tag", "floating"],
        [[t.id, t.parent or "-", t.versions.torch, t.versions.torchvision or "-", t.versions.cuda,
          t.versions.cudnn or "-", t.versions.nccl or "-", t.versions.python, t.versions.os,
          *([t.platform.docker] if several else []), t.base_image, t.pip.torch_index_url, t.tag, " ".join(t.floating) or "-"]
         for t in p.targets],
    )


def _read_build(path: Path) -> BuildReport:
    from imagesmith import pipeline

    return pipeline.read_build(path)


def print_layers(p: plan_mod.Plan, report: BuildReport | None, fmt: str) -> None:
    from imagesmith.model import footprint

    kb = compat.load()
    rows, est = footprint.rows(p, kb, report), footprint.estimate(p, kb)
    if fmt == "json":
        click.echo(json.dumps({"targets": [r.__dict__ for r in rows], "cuda_wheels": est.__dict__}, indent=2, sort_keys=True))
        return
    def column(n: int | None) -> str:
        return gb(n, unit="") if n else "-"

    print_table("layers: the CUDA layer (shared by cells) and each target's own bytes",
                ["target", "CUDA layer", "shared by cells", "CUDA GB", "own GB", "figures"],
                [[r.target, r.cuda, r.cells or "-", column(r.cuda_bytes), column(r.own_bytes),
                  "measured" if r.measured else "estimate (wheel sizes)"] for r in rows])
    click.echo(f"CUDA wheels a registry stores for {est.cells} CUDA cells: {gb(est.today_bytes)} with one copy per cell, "
               f"{gb(est.shared_bytes)} with {est.sets} shared layer(s)"
               + (f"; no wheel set recorded for {', '.join(est.unknown)}" if est.unknown else ""))


def _release_name(m: Any) -> str:
    """The release repository (host/path) when the matrix names a registry; else empty."""
    return str(m.image.name) if m.image.registry else ""


def _ci_document(p: Any, m: Any, matrix_file: Path, fmt: str, stage_repo: str | None, build_tags: tuple[str, ...],
                 gpu_tags: tuple[str, ...], tier: str, allow_roots: tuple[Path, ...] = ()) -> str:
    from imagesmith.render import ci
    from imagesmith.stages.building import staging

    if fmt == "github-matrix":
        return json.dumps(ci.github_matrix(p, _release_name(m)), separators=(",", ":"), sort_keys=True) + "\n"
    if not stage_repo:
        raise UserError("--format gitlab-ci needs --stage REGISTRY/REPO: the staging repository the jobs hand images over by")
    staging.parse_repository(stage_repo, m.image.name)
    o = ci.Options(str(matrix_file), stage_repo, _release_name(m), tier=tier, allow_roots=tuple(map(str, allow_roots)))
    o = dataclasses.replace(o, build_tags=build_tags or o.build_tags, gpu_tags=gpu_tags or o.gpu_tags)
    return ci.gitlab_document(p, o, __version__)

