"""verify/facts.py, run as the build runs it (a child python): what the image holds, measured."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

VERIFY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))
sys.path.insert(0, VERIFY)

from imagesmith_payload.parsers import os_tag, parse_dpkg_status, parse_os_release  # noqa: E402


def facts(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, os.path.join(VERIFY, "facts.py"), *args],
                          capture_output=True, text=True, timeout=120, check=True)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    data: dict[str, Any] = json.loads(lines[0])
    return data


def expected_os() -> str:
    try:
        with open("/etc/os-release") as fh:
            fields = parse_os_release(fh.read())
    except OSError:
        return "unknown"
    return os_tag(fields) if fields else "unknown"


def test_basic_facts_are_this_interpreter_and_this_machine() -> None:
    got = facts()
    assert (got["python"], got["os"], got["uid"]) == (platform.python_version(), expected_os(), os.getuid())
    assert got["packages"]["pytest"] == metadata.version("pytest")
    assert "schema" not in got and "distributions" not in got


def test_torch_is_a_fact_or_a_named_import_failure() -> None:
    got = facts()
    if importlib.util.find_spec("torch") is None:
        assert got["torch_error"] == "ModuleNotFoundError: No module named 'torch'"
        assert "torch" not in got
    else:
        import torch
        assert (got["torch"], got["cuda"]) == (torch.__version__, torch.version.cuda)


def test_inventory_lists_distributions_dpkg_and_os_release_without_torch() -> None:
    got = facts("--inventory")
    assert got["schema"] == "imagesmith.inventory/1"
    names = [(d["name"].lower(), d["version"]) for d in got["distributions"]]
    assert names == sorted(names) and ("pytest", metadata.version("pytest")) in names
    try:
        with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as fh:
            dpkg = parse_dpkg_status(fh.read())
    except OSError:
        dpkg = []
    assert got["dpkg"] == dpkg
    assert got["os"] == expected_os()
    assert "torch" not in got and "torch_error" not in got
