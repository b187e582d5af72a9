"""What an image really holds, measured from inside it (stdlib + torch).

Prints one JSON object: Python, OS, every installed distribution, and torch
with the CUDA / cuDNN / NCCL versions it reports. Runs on Python >= 3.9 and
without a GPU. imagesmith's build records it and compares it with the plan.

``--inventory`` prints what an SBOM lists instead (no torch import): every
Python distribution with its name as published, the dpkg packages installed
and /etc/os-release.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from imagesmith_payload.judge import cudnn_version_string, nccl_version_string
from imagesmith_payload.parsers import os_tag, parse_dpkg_status, parse_os_release

DPKG_STATUS = "/var/lib/dpkg/status"


def os_release() -> Dict[str, str]:
    try:
        with open("/etc/os-release") as fh:
            return parse_os_release(fh.read())
    except OSError:
        return {}


def os_key() -> str:
    fields = os_release()
    return os_tag(fields) if fields else "unknown"


def torch_facts() -> Dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is a fact
        return {"torch_error": "%s: %s" % (type(exc).__name__, exc)}
    out: Dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "nccl": None}
    try:
        code = torch.backends.cudnn.version()
        out["cudnn"] = cudnn_version_string(int(code)) if code else None
    except Exception as exc:  # noqa: BLE001
        out["cudnn_error"] = str(exc)
    try:
        nccl = torch.cuda.nccl.version() if torch.version.cuda else None
        out["nccl"] = nccl_version_string(nccl) if nccl else None
    except Exception as exc:  # noqa: BLE001
        out["nccl_error"] = str(exc)
    return out


def distributions() -> List[Dict[str, str]]:
    """(name as published, version) of every distribution Python sees, sorted."""
    found = {(d.metadata["Name"], d.version) for d in metadata.distributions() if d.metadata["Name"]}
    return [{"name": n, "version": v} for n, v in sorted(found, key=lambda nv: (nv[0].lower(), nv[1]))]


def dpkg_packages() -> List[Dict[str, str]]:
    try:
        with open(DPKG_STATUS, encoding="utf-8", errors="replace") as fh:
            return parse_dpkg_status(fh.read())
    except OSError:
        return []


def basic_facts() -> Dict[str, Any]:
    return {
        "python": platform.python_version(),
        "os": os_key(),
        "uid": os.getuid(),
        "packages": {d.metadata["Name"].lower().replace("_", "-"): d.version for d in metadata.distributions()},
    }


def main() -> None:
    if "--inventory" in sys.argv[1:]:
        facts = dict(basic_facts(), schema="imagesmith.inventory/1", distributions=distributions(),
                     dpkg=dpkg_packages(), os_release=os_release())
    else:
        facts = basic_facts()
        facts.update(torch_facts())
    json.dump(facts, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
