"""Mutation fuzzing of matrix loading, planning and rendering: no input may
end in anything but success or a UserError (exit 1).

    .venv/bin/python tests/corpus/fuzz.py [--iterations 20000] [--seed 1]

Starts from a valid matrix that uses every section, applies 1-4 random
mutations (a value replaced by a hostile or careless one, a key added or
dropped), writes it as YAML and sometimes flips raw bytes, then loads,
plans and renders it. tests/unit/model/test_corpus.py runs a short hypothesis-
driven version of the same on every ``make test``.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from imagesmith.errors import UserError
from imagesmith.model import compat, matrix, plan
from imagesmith.render import contexts as render

VALID: dict[str, Any] = {
    "version": 1,
    "image": {"registry": "harbor.example.com", "repository": "ml/pytorch", "user": "ml", "uid": 1000,
              "labels": {"org.opencontainers.image.vendor": "Example"}},
    "matrix": {"torch": ["2.9"], "cuda": ["12.8", "cpu"], "python": ["3.11"], "os": ["ubuntu22.04"],
               "exclude": [{"cuda": "cpu", "python": "3.12"}],
               "include": [{"torch": "2.13", "cuda": "cpu", "python": "3.11", "os": "debian12"}]},
    "base_images": {"debian12": "imagesmith/debian:bookworm"},
    "layers": {"base": {"from": "os", "toolchain": True, "apt": ["curl"], "env": {"A": "b"}, "packages": []},
               "cv": {"parent": "base", "packages": ["torchvision", "opencv-python-headless==4.14.0.94"]},
               "project": {"parent": "cv", "requirements": "r.txt", "when": {"cuda": ["12.8"]}, "template": "t.j2",
                           "services": {"jupyter": {"enabled": True, "bind": "0.0.0.0", "port": 8888},
                                        "sshd": {"enabled": True, "port": 2222}}}},
    "tags": {"immutable": "{torch}-{accel}-py{python}-{os}-{layer}-{date}",
             "floating": ["v{torch_minor}-{accel}-py{python}-{os}-{layer}",
                          {"tag": "latest", "when": {"layer": "base", "cuda": "12.8"}}]},
    "verify": {"tier": "quick", "gpus": "all", "timeout": 900, "thresholds": {"gemm.bf16": {"fail_fraction": 0.8}}},
    "sources": {"torch_index_url": "https://download.pytorch.org/whl/{variant}", "index_url": "https://pypi.org/simple",
                "extra_index_urls": [], "find_links": ["@WHEELS@"], "trusted_hosts": ["pypi.example.com"],
                "proxy": {"http": None, "https": None, "no_proxy": None}, "network": "default",
                "credentials": [{"host": "pypi.example.com", "password_env": "PW"}]},
}
ATOMS: list[Any] = [
    "a\nb", "x", "$(id)", "`id`", "a;b", "a b", 'a"b', "~", None, True, 3.10, 0, -1, 10**20, "1e309", "2.9", "cpu", "12.8",
    "/etc/passwd", "../x", "file:///etc", "http://a b", "https://user:p@x/", "--index-url=x", 'numpy==1; os_name=="nt"',
    "{torch}", "{date}", "{nope}", "", [], {}, "\t", "a=b", "ubuntu:latest", "UP/per", "\u2028", "é", "x" * 300, "r.txt",
    "t.j2", "wheels", "/tmp", "0.0.0.0", "::", "[::1]", "8888", "root", "base", "cv", "project", "é\\", "\\", "'", '"', "#x",
    ["a"], {"a": 1}, {"torch": "2.9"}, ["2.9", "2.9"], "3.12", "debian12", "{variant}", "latest", "v{torch}" * 20,
    "link-out", "{{ 7 * 7 }}", "${HOME}", "x\\", "-rf", "a\u202eb",
]
KEYS = ["x", "pythn", "layer", "<<", "env", "labels", "template", "requirements", "cudnn", "when", "services"]


def atom(rng: random.Random) -> Any:
    """One of ATOMS, copied: a mutation edits lists and dicts in place, and an atom it edited must not change what
    later draws see (hypothesis replays a draw sequence and requires it to generate the same data again)."""
    return copy.deepcopy(rng.choice(ATOMS))


def mutate(rng: random.Random, node: Any) -> Any:
    if isinstance(node, dict):
        keys = list(node)
        if keys and rng.random() < 0.6:
            key = rng.choice(keys)
            node[key] = mutate(rng, node[key]) if rng.random() < 0.5 else atom(rng)
        if rng.random() < 0.1:
            node[rng.choice(KEYS)] = atom(rng)
        if keys and rng.random() < 0.1:
            del node[rng.choice(keys)]
        return node
    if isinstance(node, list):
        if node and rng.random() < 0.6:
            i = rng.randrange(len(node))
            node[i] = mutate(rng, node[i]) if rng.random() < 0.5 else atom(rng)
        elif rng.random() < 0.3:
            node.append(atom(rng))
        return node
    return atom(rng)


def mutant(rng: random.Random) -> bytes:
    data = copy.deepcopy(VALID)
    for _ in range(rng.randint(1, 4)):
        data = mutate(rng, data)
    raw = bytearray(yaml.safe_dump(data, allow_unicode=rng.random() < 0.5).encode())
    for _ in range(rng.randint(1, 3) if rng.random() < 0.1 else 0):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def prepare(folder: Path) -> Path:
    (folder / "wheels").mkdir(parents=True, exist_ok=True)
    (folder / "r.txt").write_text("six==1.17.0\nnumpy>=1\n")
    (folder / "t.j2").write_text('{% extends "project.Dockerfile.j2" %}\n{% block builder_files %}\n'
                                 "COPY requirements.txt /tmp/imagesmith/requirements.txt\n{% endblock %}\n")
    if not (folder / "link-out").is_symlink():
        (folder / "link-out").symlink_to("/etc/passwd")
    return folder / "matrix.yaml"


def attempt(path: Path, data: bytes, kb: compat.KnowledgeBase) -> bool:
    """True if it rendered; False for a UserError; anything else propagates (a bug)."""
    path.write_bytes(data.replace(b"@WHEELS@", str(path.parent / "wheels").encode()))
    try:
        m = matrix.load(path, kb)
        render.render_all(plan.expand(m, "20261130", kb), m, kb)
        return True
    except UserError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--folder", type=Path, default=Path("/tmp/imagesmith-fuzz"))
    args = ap.parse_args()
    rng, kb, path = random.Random(args.seed), compat.load(), prepare(args.folder)
    rendered = bugs = 0
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        data = mutant(rng)
        try:
            rendered += attempt(path, data, kb)
        except Exception:  # noqa: BLE001 - a bug: show it and go on counting
            bugs += 1
            print(repr(data[:400]), traceback.format_exc(limit=3), sep="\n", file=sys.stderr)
    print(f"| iterations | rendered | refused (exit 1) | bugs (exit 3) | seconds |\n| ---: | ---: | ---: | ---: | ---: |\n"
          f"| {args.iterations} | {rendered} | {args.iterations - rendered - bugs} | {bugs} | {time.perf_counter() - t0:.0f} |")
    sys.exit(1 if bugs else 0)


if __name__ == "__main__":
    main()
