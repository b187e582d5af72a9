"""Where the integration tier's disk space goes.

A full disk fails a build deep inside the engine ("no space left on device" at some COPY). The summary names the
free space at the start, the lowest seen after any test (and which test that was) and at the end, for the
temporary folder and the engine's data root, and the peak use (start minus lowest), so a CI log says whether the
suite or the machine ran out. Each pytest process samples after each of its tests; under pytest-xdist every
worker hands its samples to the controller (``workeroutput``), which prints one summary for the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER_KEY = "imagesmith_disk"


def docker_root() -> str | None:
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    root = done.stdout.strip()
    return root if done.returncode == 0 and root and Path(root).is_dir() else None


@dataclass
class DiskWatch:
    paths: dict[str, str] = field(default_factory=dict)  # label -> path, one per file system
    start: dict[str, int] = field(default_factory=dict)
    lowest: dict[str, tuple[int, str]] = field(default_factory=dict)

    def begin(self) -> None:
        """Watch the temporary folder and the engine's data root (once each when they share a file system)."""
        if self.paths:
            return
        seen: set[int] = set()
        for label, path in (("temporary folder", tempfile.gettempdir()), ("engine data root", docker_root())):
            if path and os.stat(path).st_dev not in seen:
                seen.add(os.stat(path).st_dev)
                self.paths[label] = path
        self.start = self.free()

    def free(self) -> dict[str, int]:
        return {label: shutil.disk_usage(path).free for label, path in self.paths.items()}

    def sample(self, nodeid: str) -> None:
        for label, free in self.free().items():
            if label not in self.lowest or free < self.lowest[label][0]:
                self.lowest[label] = (free, nodeid)

    def to_json(self) -> dict[str, Any]:
        return {"paths": self.paths, "start": self.start, "lowest": {k: list(v) for k, v in self.lowest.items()}}

    def merge(self, doc: dict[str, Any]) -> None:
        """A worker's samples: the most free at the start (the earliest state), the least free seen by any."""
        for label, path in doc["paths"].items():
            self.paths.setdefault(label, path)
            self.start[label] = max(self.start.get(label, 0), doc["start"][label])
            if label in doc["lowest"]:
                free, nodeid = doc["lowest"][label]
                if label not in self.lowest or free < self.lowest[label][0]:
                    self.lowest[label] = (free, nodeid)

    def lines(self) -> list[str]:
        end = self.free()
        lines = []
        for label, path in self.paths.items():
            low, nodeid = self.lowest.get(label, (end[label], "no test"))
            lines.append(f"{label} ({path}): free {self.start[label] / 1e9:.1f} GB at the start, lowest {low / 1e9:.1f} GB "
                         f"(after {nodeid}), {end[label] / 1e9:.1f} GB at the end; peak use {max(0, self.start[label] - low) / 1e9:.1f} GB")
        return lines
