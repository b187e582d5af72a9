"""What an image really holds, measured from inside it (stdlib + torch).

Prints one JSON object: Python, OS, every installed distribution, and torch
with the CUDA / cuDNN / NCCL versions it reports. Runs on Python >= 3.9 and
without a GPU. imagesmith's build records it and compares it with the plan.
"""

import json
import os
import platform
import sys
from importlib import metadata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from imagesmith_payload.judge import cudnn_version_string, nccl_version_string  # noqa: E402
from imagesmith_payload.parsers import os_tag, parse_os_release  # noqa: E402


def os_key():
    try:
        with open("/etc/os-release") as fh:
            return os_tag(parse_os_release(fh.read()))
    except OSError:
        return "unknown"


def torch_facts():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is a fact
        return {"torch_error": "%s: %s" % (type(exc).__name__, exc)}
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "nccl": None}
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


def main():
    facts = {
        "python": platform.python_version(),
        "os": os_key(),
        "uid": os.getuid(),
        "packages": {d.metadata["Name"].lower().replace("_", "-"): d.version for d in metadata.distributions()},
    }
    facts.update(torch_facts())
    json.dump(facts, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
