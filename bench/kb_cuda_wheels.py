"""Derive a torch variant's CUDA wheel set for the knowledge base.

    python bench/kb_cuda_wheels.py TORCH.whl|METADATA WHEEL_DIR [WHEEL_DIR ...]

Reads torch's Requires-Dist (Linux x86_64 markers), follows the requirements
of the wheels found in WHEEL_DIRs (extras included), picks the newest version
each specifier allows, and prints the Python-independent ones (py3-none /
py2.py3-none wheels: nvidia-*, cuda-toolkit) as the `wheels:` rows of
imagesmith/model/compat/data/compat.yaml, with each wheel file's size in bytes.
Wheels tied to one Python (triton, cuda-bindings) stay out: they belong in
the cell's venv.
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ENV = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64", "python_version": "3.11"}


def metadata(path: Path) -> list[str]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            text = zf.read(name).decode()
    else:
        text = path.read_text()
    return Parser().parsestr(text).get_all("Requires-Dist") or []


def cuda_wheel(wheel: Path) -> bool:
    """Python-independent binary wheels (py3-none-<platform>), and metapackages
    that only pull such wheels (cuda-toolkit: no files outside its .dist-info)."""
    _, _, _, tags = parse_wheel_filename(wheel.name)
    if not all(t.abi == "none" and t.interpreter in ("py3", "py2") for t in tags):
        return False
    if any(t.platform != "any" for t in tags):
        return True
    with zipfile.ZipFile(wheel) as zf:
        return all(n.split("/", 1)[0].endswith(".dist-info") for n in zf.namelist())


def wanted(lines: list[str], extras: set[str]) -> list[Requirement]:
    out = []
    for line in lines:
        req = Requirement(line)
        markers_ok = req.marker is None or any(req.marker.evaluate(ENV | {"extra": e}) for e in (extras or {""}))
        if markers_ok:
            out.append(req)
    return out


def resolve(torch: Path, dirs: list[Path]) -> dict[str, Path]:
    wheels: dict[str, list[Path]] = {}
    for d in dirs:
        for w in d.glob("*.whl"):
            wheels.setdefault(canonicalize_name(parse_wheel_filename(w.name)[0]), []).append(w)
    picked: dict[str, Path] = {}
    queue = wanted(metadata(torch), set())
    while queue:
        req = queue.pop(0)
        name = canonicalize_name(req.name)
        options = [w for w in wheels.get(name, []) if req.specifier.contains(parse_wheel_filename(w.name)[1], prereleases=True)]
        if not options:
            continue  # not available here (pure-Python dependencies of torch live in the venv anyway)
        best = max(options, key=lambda w: Version(str(parse_wheel_filename(w.name)[1])))
        if name not in picked and cuda_wheel(best):
            picked[name] = best
            queue += wanted(metadata(best), set(req.extras))
        elif name in picked and req.extras:
            queue += wanted(metadata(picked[name]), set(req.extras))
    return picked


def main() -> None:
    torch, dirs = Path(sys.argv[1]), [Path(d) for d in sys.argv[2:]]
    for name, wheel in sorted(resolve(torch, dirs).items()):
        version = parse_wheel_filename(wheel.name)[1]
        print(f'          - [{name}, "{version}", {wheel.stat().st_size}]')


if __name__ == "__main__":
    main()
