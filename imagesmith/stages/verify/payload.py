"""What the host puts into a container beside the image under test, and the check entries the host writes itself.

Shared by verify (the payload run) and probe (the image's own command, watched), so that neither imports the other."""

from __future__ import annotations

from typing import Any, Mapping

from imagesmith.resources import payload_dir

IN_CONTAINER = "/opt/imagesmith/verify"
STARTED = "imagesmith payload: started"  # verify/run.py's first line on stderr, before any import that could fail
# Checks the host runs itself, beside the payload's: id -> (tier, title).
HOST_CHECKS = {"entrypoint.start": ("quick", "the image's ENTRYPOINT starts and runs the command it is given"),
               "security.service": ("standard", "the image's own command, started, serves no Jupyter without a token")}


def check_entry(check_id: str, title: str, status: str, detail: str, value: Any = None, seconds: float = 0.0,
                data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A report entry the host writes (the payload's CHECK_KEYS)."""
    entry = {"id": check_id, "title": title, "status": status, "value": value, "threshold": None, "unit": "",
             "baseline": None, "percent_of_baseline": None, "detail": " ".join(detail.split())[:2000],
             "optional": False, "duration_s": round(seconds, 2)}
    return entry | ({"data": dict(data)} if data else {})


def payload_files() -> dict[str, bytes]:
    root = payload_dir()
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json", ".sh")}
