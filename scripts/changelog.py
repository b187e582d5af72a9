"""The changelog, kept by a habit: every change people will notice adds one fragment to changes/, and a release
folds the fragments into docs/changelog.md under its version (`make changelog`). docs/development.md says how.

A fragment is changes/<topic>.<kind>.md: <topic> lowercase words joined by hyphens, <kind> one of KINDS, its text
one or more Markdown bullets ("- ...") written for people who use imagesmith (what they see, not how it was done).

    python3 scripts/changelog.py --check                 # every fragment well-formed (the tests run this)
    python3 scripts/changelog.py --preview               # the section a release would add, printed
    python3 scripts/changelog.py [--version V] [--date D] # fold the fragments into docs/changelog.md, remove them
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHANGES = ROOT / "changes"
CHANGELOG = ROOT / "docs" / "changelog.md"
KINDS = {"added": "Added", "changed": "Changed", "fixed": "Fixed", "security": "Security", "removed": "Removed"}
NAME = re.compile(rf"^(?P<topic>[a-z0-9]+(?:-[a-z0-9]+)*)\.(?P<kind>{'|'.join(KINDS)})\.md$")
BULLET = re.compile(r"^- \S")


@dataclass(frozen=True)
class Fragment:
    path: Path
    kind: str
    bullets: tuple[str, ...]  # each bullet with its continuation lines


def problems(folder: Path = CHANGES) -> list[str]:
    """What is wrong with the fragments in ``folder``, one line each, naming the file and the fix."""
    out = []
    for path in sorted(folder.glob("*")):
        if path.name == "README.md":
            continue
        if not NAME.match(path.name):
            out.append(f"{path.name}: name it <topic>.<kind>.md, <kind> one of {', '.join(KINDS)}")
            continue
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not lines or not BULLET.match(lines[0]):
            out.append(f"{path.name}: write one or more Markdown bullets, each starting with '- '")
        elif any(not (BULLET.match(line) or line.startswith("  ")) for line in lines):
            out.append(f"{path.name}: a line that is neither a bullet ('- ...') nor its continuation (indented two spaces)")
    return out


def fragments(folder: Path = CHANGES) -> list[Fragment]:
    out = []
    for path in sorted(folder.glob("*.md")):
        found = NAME.match(path.name)
        if found is None:
            continue
        bullets: list[str] = []
        for line in path.read_text(encoding="utf-8").rstrip().splitlines():
            if BULLET.match(line):
                bullets.append(line)
            elif line.strip():
                bullets[-1] += "\n" + line
        out.append(Fragment(path, found["kind"], tuple(bullets)))
    return out


def section(heading: str, found: list[Fragment]) -> str:
    """'## <heading>' ('0.2.0 (2026-12-04)', 'Unreleased') and one '### Added' ... block per kind that has
    fragments, in KINDS' order."""
    lines = [f"## {heading}", ""]
    for kind, title in KINDS.items():
        bullets = [b for f in found if f.kind == kind for b in f.bullets]
        if bullets:
            lines += [f"### {title}", "", *bullets, ""]
    return "\n".join(lines)


def fold(changelog: str, new: str) -> str:
    """The changelog with ``new`` as its newest section: after the page's introduction, before the first '## '."""
    head, sep, rest = changelog.partition("\n## ")
    return f"{head.rstrip()}\n\n{new.rstrip()}\n" + (f"\n## {rest}" if sep else "")


def project_version() -> str:
    """pyproject.toml's [project] version (read as text: tomllib is not in Python 3.10)."""
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    if found is None:
        raise SystemExit("pyproject.toml: no version = \"...\" line; give --version")
    return found.group(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default=None, help="the release's version (default: pyproject.toml's)")
    parser.add_argument("--date", default=dt.date.today().isoformat(), help="the release date, YYYY-MM-DD (default: today)")
    parser.add_argument("--check", action="store_true", help="only check the fragments")
    parser.add_argument("--preview", action="store_true", help="print the section a release would add, change nothing")
    args = parser.parse_args(argv)
    wrong = problems()
    for line in wrong:
        print(f"changes/{line}", file=sys.stderr)
    if wrong or args.check:
        return 1 if wrong else 0
    found = fragments()
    if not found:
        print("changes/ holds no fragment: nothing to fold into the changelog", file=sys.stderr)
        return 1
    new = section(f"{args.version or project_version()} ({args.date})", found)
    if args.preview:
        print(new)
        return 0
    CHANGELOG.write_text(fold(CHANGELOG.read_text(encoding="utf-8"), new), encoding="utf-8")
    for f in found:
        f.path.unlink()
    print(f"{CHANGELOG.relative_to(ROOT)}: {len(found)} fragments folded in; commit it with the removed fragments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
