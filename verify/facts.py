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


def os_key():
    info = {}
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                key, _, value = line.strip().partition("=")
                info[key] = value.strip('"')
    except OSError:
        return "unknown"
    version = info.get("VERSION_ID", "")
    return info.get("ID", "") + (version if info.get("ID") == "ubuntu" else version.replace(".", ""))


def cudnn_string(number):
    if not number:
        return None
    if number >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return "%d.%d.%d" % (number // 10000, number % 10000 // 100, number % 100)
    return "%d.%d.%d" % (number // 1000, number % 1000 // 100, number % 100)


def torch_facts():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is a fact
        return {"torch_error": "%s: %s" % (type(exc).__name__, exc)}
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "nccl": None}
    try:
        out["cudnn"] = cudnn_string(torch.backends.cudnn.version())
    except Exception as exc:  # noqa: BLE001
        out["cudnn_error"] = str(exc)
    try:
        nccl = torch.cuda.nccl.version() if torch.version.cuda else None
        out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else (str(nccl) if nccl else None)
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
