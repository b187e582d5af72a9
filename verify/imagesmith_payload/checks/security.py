"""Security inside the image: non-root, no open Jupyter, sshd refuses passwords and root."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from typing import List, Optional, Tuple

from ..context import Context
from ..environment import user
from ..parsers import (jupyter_config_disables_auth, judge_sshd, parse_listening_ports,
                       parse_sshd_t, sshd_effective)
from ..registry import check
from ..results import Result, failed, outcome, passed, skipped, warned

SSHD_CONFIG = "/etc/ssh/sshd_config"
JUPYTER_CONFIG_GLOBS = ("~/.jupyter/jupyter_*_config.py", "/etc/jupyter/jupyter_*_config.py",
                        "/usr/local/etc/jupyter/jupyter_*_config.py",
                        os.path.join(sys.prefix, "etc", "jupyter", "jupyter_*_config.py"))
MAX_PROBES = 10


@check("security.user", "runs as a non-root user", needs="nothing")
def non_root(ctx: Context) -> Result:
    who = user()
    label = f"uid {who['uid']} ({who['name'] or 'no passwd entry'})"
    if who["uid"] != 0:
        return passed(f"runs as {label}", who["uid"])
    fix = "add a non-root USER to the Dockerfile"
    if ctx.config.expect_non_root:
        return failed(f"runs as root ({label}) but the image declares a non-root user; {fix}", 0)
    if ctx.config.expect_non_root is False:
        return passed(f"runs as root ({label}); allowed by security.expect_non_root=false", 0)
    return warned(f"runs as root ({label}); {fix}", 0)


# --------------------------------------------------------------------- jupyter
def listening_sockets() -> List[Tuple[str, int]]:
    found: List[Tuple[str, int]] = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path, encoding="ascii") as fh:
                found += parse_listening_ports(fh.read())
        except OSError:
            continue
    return sorted(set(found), key=lambda a: a[1])


def open_jupyter(port: int) -> Optional[str]:
    """URL if an authenticated Jupyter endpoint answers 200 without a token."""
    url = f"http://127.0.0.1:{port}/api/kernels"
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            body = resp.read(2048).decode("utf-8", "replace").strip()
            return url if resp.status == 200 and body.startswith("[") else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def open_configs() -> List[str]:
    paths = {p for pattern in JUPYTER_CONFIG_GLOBS for p in glob.glob(os.path.expanduser(pattern))}
    return sorted(p for p in paths if _disables_auth(p))


def _disables_auth(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return jupyter_config_disables_auth(fh.read())
    except OSError:
        return False


@check("security.jupyter", "no Jupyter server reachable without a token", needs="nothing")
def jupyter(ctx: Context) -> Result:
    sockets = listening_sockets()
    exposed = [u for u in (open_jupyter(port) for _, port in sockets[:MAX_PROBES]) if u]
    configs = open_configs()
    data = {"listening": [f"{a}:{p}" for a, p in sockets], "open_configs": configs}
    if exposed:
        return failed(f"Jupyter answers without auth at {', '.join(exposed)}; set a token or "
                      "password", len(exposed), data=data)
    if configs:
        return failed(f"Jupyter config disables auth (empty token, no password): "
                      f"{', '.join(configs)}", len(configs), data=data)
    ports = ", ".join(str(p) for _, p in sockets) or "none"
    return passed(f"no unauthenticated Jupyter (listening TCP ports: {ports})", 0, data=data)


# ------------------------------------------------------------------------ sshd
def sshd_settings() -> Tuple[dict, str]:
    """`sshd -T` when it runs (needs host keys), else the files parsed."""
    binary = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if binary:
        try:
            proc = subprocess.run([binary, "-T"], capture_output=True, text=True, timeout=10)
            if proc.returncode == 0 and proc.stdout.strip():
                return parse_sshd_t(proc.stdout), "sshd -T"
        except (OSError, subprocess.SubprocessError):
            pass
    return sshd_effective(_read, glob.glob), f"{SSHD_CONFIG} (+ Include)"


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


@check("security.sshd", "sshd (if installed) refuses passwords and root", needs="nothing")
def sshd(ctx: Context) -> Result:
    if not os.path.exists(SSHD_CONFIG) and not shutil.which("sshd"):
        return skipped("no sshd in the image")
    settings, source = sshd_settings()
    status, problems = judge_sshd(settings)
    keys = ("passwordauthentication", "permitrootlogin")
    data = {"source": source, "settings": {k: settings.get(k) for k in keys}}
    if problems:
        return outcome(status, f"{'; '.join(problems)} (from {source})", len(problems), data=data)
    return passed(f"PasswordAuthentication no, PermitRootLogin no (from {source})", 0, data=data)
