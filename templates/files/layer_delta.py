"""imagesmith layer delta: the files a child layer adds to its parent's venv.

  layer_delta.py snapshot BEFORE.json     record installed distributions
  layer_delta.py collect BEFORE.json DIR  copy files of new distributions into DIR

A distribution of the parent that changed version or disappeared is an error:
a child layer must never change what its parent pinned (torch above all).
"""

import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path


def installed():
    return {d.metadata["Name"].lower().replace("_", "-"): d for d in metadata.distributions()}


def snapshot(out):
    versions = {name: d.version for name, d in installed().items()}
    Path(out).write_text(json.dumps(versions, sort_keys=True))


def copy_into(src, root):
    dest = Path(root + os.path.abspath(src))
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dest)
    elif os.path.isfile(src):
        shutil.copy2(src, dest)


def collect(before_file, root):
    before = json.loads(Path(before_file).read_text())
    now = installed()
    changed = sorted(f"{n} {v} -> {now[n].version if n in now else 'removed'}"
                     for n, v in before.items() if n not in now or now[n].version != v)
    if changed:
        sys.exit("imagesmith: this layer would change its parent's packages: " + "; ".join(changed)
                 + ". Pin versions compatible with the parent layer.")
    Path(root).mkdir(parents=True, exist_ok=True)
    added = sorted(n for n in now if n not in before)
    for name in added:
        for f in now[name].files or ():
            copy_into(str(f.locate()), root)
    print("imagesmith: layer adds " + (", ".join(f"{n}=={now[n].version}" for n in added) or "no packages"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["snapshot"] and len(sys.argv) == 3:
        snapshot(sys.argv[2])
    elif sys.argv[1:2] == ["collect"] and len(sys.argv) == 4:
        collect(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
