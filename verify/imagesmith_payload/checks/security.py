"""Security inside the image: non-root, no open Jupyter, sshd refuses passwords and root."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Set, Tuple

from ..context import Context
from ..environment import user
from ..parsers import judge_sshd, parse_sshd_t, sshd_effective
from ..probe import MAX_PROBES, listening_sockets, open_jupyter
from ..registry import check
from ..results import Result, failed, outcome, passed, skipped, warned
from ..services import Source, command_argv, config_disables_auth, file_source, judge, referenced_paths, scan, sources_of, verdict

SSHD_CONFIG = "/etc/ssh/sshd_config"
JUPYTER_CONFIG_GLOBS = tuple(f"{folder}/jupyter_*_config.{ext}" for ext in ("py", "json") for folder in (
    "~/.jupyter", "/etc/jupyter", "/usr/local/etc/jupyter", os.path.join(sys.prefix, "etc", "jupyter")))
MAX_FILES, MAX_BYTES, MAX_DEPTH = 24, 256 * 1024, 3  # scripts and config files security.config reads


@check("security.user", "runs as a non-root user", needs="nothing")
def non_root(ctx: Context) -> Result:
    who = user()
    label = f"uid {who['uid']} ({who['name'] or 'no passwd entry'})"
    if who["uid"] != 0:
        return passed(f"runs as {label}", who["uid"])
    fix = "add a non-root USER to the Dockerfile"
    if ctx.config.expect_non_root:
        return failed(f"runs as root ({label}) but a non-root user is required (verify --require-non-root, or an "
                      f"image imagesmith built) and {declared_user(ctx)}; {fix}", 0)
    if ctx.config.expect_non_root is False:
        return passed(f"runs as root ({label}); allowed by security.expect_non_root=false", 0)
    return warned(f"runs as root ({label}); {fix}", 0)


def declared_user(ctx: Context) -> str:
    """What the image's USER says, in words (the payload knows it only from the host's config)."""
    image = ctx.config.image
    if image is None:
        return "the image's USER is not known here"
    if image.user.split(":")[0] in ("", "root", "0"):
        return f"the image declares {'USER ' + image.user if image.user else 'no USER'} (root)"
    return f"the image declares USER {image.user}, yet the payload ran as root"


# --------------------------------------------------------------------- jupyter
def open_configs() -> List[str]:
    paths = {p for pattern in JUPYTER_CONFIG_GLOBS for p in glob.glob(os.path.expanduser(pattern))}
    return sorted(p for p in paths if _disables_auth(p))


def _disables_auth(path: str) -> bool:
    text = _read(path)
    return text is not None and config_disables_auth(path, text)


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
def sshd_settings() -> Tuple[Dict[str, str], str]:
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


# ------------------------------------------------------- the image's own command
@check("security.config", "the image's own command starts no service without auth", needs="nothing")
def image_config(ctx: Context) -> Result:
    """ENTRYPOINT + CMD, ENV and the scripts and config files they name (read here,
    inside the image) judged for Jupyter without a token, sshd with passwords or root."""
    image = ctx.config.image
    if image is None:
        return skipped("no image configuration given (verify --local runs no image)")
    argv = command_argv(image.entrypoint, image.cmd)
    sources = sources_of(argv, image.env)
    read = read_named_files(sources, argv)
    findings = judge(scan(sources + read, image.env), image.env)
    data = {"user": image.user or "(none: root)", "command": [a[:200] for a in argv[:40]],
            "exposed_ports": list(image.exposed_ports), "env": sorted(image.env), "files_read": [s.where for s in read]}
    if findings:
        return outcome(verdict(findings), "; ".join(m for _, m in findings), len(findings), data=data)
    shown = " ".join(argv)[:120] or "none"
    ports = ", ".join(image.exposed_ports) or "none"
    return passed(f"command {shown!r}, exposed ports {ports}, {len(read)} scripts/configs read: "
                  "nothing starts a service without auth", 0, data=data)


def read_named_files(sources: List[Source], argv: List[str]) -> List[Source]:
    """Text files the command names (its program found on PATH, absolute paths in
    arguments and in the scripts read), followed MAX_DEPTH deep."""
    first = shutil.which(argv[0]) if argv and not argv[0].startswith("/") else None
    todo = ([first] if first else []) + referenced_paths(sources)
    seen: Set[str] = set()
    out: List[Source] = []
    for _ in range(MAX_DEPTH):
        batch = [p for p in dict.fromkeys(todo) if p not in seen][:MAX_FILES - len(out)]
        seen.update(batch)
        found = [file_source(p, t) for p, t in ((p, _text_file(p)) for p in batch) if t is not None]
        out += found
        todo = referenced_paths(found)
    return out


def _text_file(path: str) -> Optional[str]:
    """A small text file's content; None for binaries, folders, devices, big or unreadable files."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES)
    except OSError:
        return None
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")
