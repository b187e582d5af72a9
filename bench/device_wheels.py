#!/usr/bin/env python3
"""The pins of requirements/lock.txt that imagesmith needs at run time on another machine's Python (default 3.12,
Linux x86_64), minus what that machine already has: one NAME==VERSION per line, for `pip download --no-deps`.

    .venv/bin/python bench/device_wheels.py [--python 3.12] [--have torch,pyyaml,...]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# what the GPU hosts of this workplace have in their python3 (the device README's package list)
HAVE = "torch,numpy,pyyaml,click,rich,jinja2,markupsafe,nvidia-ml-py,pygments,markdown-it-py,mdurl,pip,setuptools,typing-extensions"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--python", default="3.12")
    p.add_argument("--have", default=HAVE)
    args = p.parse_args()
    env = {"python_version": args.python, "python_full_version": f"{args.python}.0", "sys_platform": "linux",
           "platform_machine": "x86_64", "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}
    text = (ROOT / "requirements" / "lock.txt").read_text()
    pins: dict[str, str] = {}
    via: dict[str, set[str]] = {}
    current = ""
    for line in text.splitlines():
        got = PIN.match(line)
        if got:
            name, version, marker = canonicalize_name(got[1]), got[2], got[3]
            current = name if marker is None or Marker(marker).evaluate(env) else ""
            if current:
                pins[name] = version
            continue
        parent = re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9_.-]+)\s*$", line)
        if parent and current:
            via.setdefault(current, set()).add(canonicalize_name(parent[1]))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    need = {canonicalize_name(Requirement(r).name) for r in project}
    grew = True
    while grew:  # everything pulled in by what is needed
        more = {name for name, parents in via.items() if parents & need and name in pins} - need
        need |= more
        grew = bool(more)
    have = {canonicalize_name(n) for n in args.have.split(",") if n}
    for name in sorted(need - have):
        if name in pins:
            print(f"{name}=={pins[name]}")


if __name__ == "__main__":
    main()
