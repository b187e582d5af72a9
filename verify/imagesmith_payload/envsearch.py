"""Where torch is when this python3 has none: the environments images put it in, and what puts each on PATH.

Looked for where images put environments: venvs (a folder with ``pyvenv.cfg`` and ``bin/python*``), conda
environments (``conda-meta``; their ``envs/*`` too), under /opt, /usr/local, /srv, /app, /workspace, /home, /root
and the top folder. What puts an environment's ``bin`` on PATH is read from the image's ENV PATH, its ENTRYPOINT's
scripts, ``$BASH_ENV``, the login shells' files (/etc/profile, /etc/profile.d/*.sh, the user's ~/.profile,
~/.bash_profile, ~/.bash_login) and the interactive shells' (/etc/bash.bashrc, ~/.bashrc); the image's login shell is
then asked which python3 it finds (``login.sh``, the same launcher ``imagesmith verify --login-shell`` uses).

Bounded: a deadline for the walk and a cap on the folders it lists, files read through :func:`read_small` (a
regular file only, never a FIFO or a device, at most ``MAX_BYTES``), and the login shell killed with its process
group after ``SHELL_TIMEOUT_S``. Standard library only; never raises.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

ROOTS = ("/opt", "/usr/local", "/srv", "/app", "/workspace", "/home", "/root", "/")
MAX_DEPTH = 4  # /home/user/miniconda3/envs/ml
MAX_DIRS = 3000  # folders listed, in all
WALK_S = 3.0
MAX_BYTES = 64 * 1024
MAX_SOURCES = 64  # profile files read
SHELL_TIMEOUT_S = 5.0
SKIP = {"proc", "sys", "dev", "lib", "lib64", "include", "share", "site-packages", "dist-packages", "node_modules",
        "__pycache__", ".cache", "man", "doc", "src", "etc", "var", "tmp", "pkgs", "usr", "bin", "sbin", "boot", "run"}
LOGIN = "login shells"
INTERACTIVE = "interactive bash shells"
BASH = "bash, through $BASH_ENV"
ENTRYPOINT = "the ENTRYPOINT"


def read_small(path: str, limit: int = MAX_BYTES) -> Optional[str]:
    """A regular file's first ``limit`` bytes as text; None for anything else (a FIFO is opened without
    blocking and refused, as are devices, folders and unreadable files)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


# -- the environments --------------------------------------------------------------------------------------


def walk(roots: Sequence[str] = ROOTS, deadline: float = 0.0, max_dirs: int = MAX_DIRS) -> Iterator[Tuple[str, str]]:
    """(prefix, kind) of every venv and conda environment under ``roots`` (breadth first, bounded)."""
    deadline = deadline or time.monotonic() + WALK_S
    queue = [(root, 0) for root in roots]
    seen, listed = set(), 0
    while queue and listed < max_dirs and time.monotonic() < deadline:
        folder, depth = queue.pop(0)
        real = os.path.realpath(folder)
        if real in seen:
            continue
        seen.add(real)
        kind = env_kind(folder)
        if kind:
            yield folder, kind
            if kind == "conda" and os.path.isdir(os.path.join(folder, "envs")):
                queue.append((os.path.join(folder, "envs"), depth))
            continue
        if depth >= MAX_DEPTH or (folder == "/" and depth > 0):
            continue
        listed += 1
        for name in _children(folder):
            if name not in SKIP and not (folder == "/" and depth == 0 and os.path.join("/", name) in roots):
                queue.append((os.path.join(folder, name), depth + 1 if folder != "/" else MAX_DEPTH - 1))


def _children(folder: str) -> List[str]:
    try:
        with os.scandir(folder) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))[:200]
    except OSError:
        return []


def env_kind(folder: str) -> Optional[str]:
    if os.path.isdir(os.path.join(folder, "conda-meta")) and _python_in(folder):
        return "conda"
    if os.path.isfile(os.path.join(folder, "pyvenv.cfg")) and _python_in(folder):
        return "venv"
    return None


def _python_in(prefix: str) -> Optional[str]:
    for name in ("python3", "python"):
        path = os.path.join(prefix, "bin", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def torch_in(prefix: str) -> Optional[str]:
    """The torch version installed in ``prefix``'s site-packages (its dist-info), or None."""
    for site in sorted(glob.glob(os.path.join(prefix, "lib*", "python3*", "site-packages"))):
        for info in sorted(glob.glob(os.path.join(site, "torch-*.dist-info"))):
            text = read_small(os.path.join(info, "METADATA"), 4096) or ""
            found = re.search(r"^Version:\s*(\S+)", text, re.MULTILINE)
            return found.group(1) if found else os.path.basename(info)[len("torch-"):-len(".dist-info")]
    return None


def environments(roots: Sequence[str] = ROOTS) -> List[Dict[str, Any]]:
    """Every environment under ``roots`` that holds torch: prefix, kind, torch version, its python."""
    out = []
    for prefix, kind in walk(roots):
        version = torch_in(prefix)
        if version:
            out.append({"prefix": prefix, "kind": kind, "torch": version, "python": _python_in(prefix)})
    return out[:8]


# -- what puts them on PATH ----------------------------------------------------------------------------------


def sources(env: Mapping[str, str], entrypoint: Sequence[str], home: str, etc: str = "/etc") -> List[Tuple[str, str]]:
    """(file, scope) of what may put a folder on PATH, for the scopes in this module's docstring."""
    found: List[Tuple[str, str]] = [(w, ENTRYPOINT) for w in entrypoint if w.startswith("/")]
    if env.get("BASH_ENV", "").startswith("/"):
        found.append((env["BASH_ENV"], BASH))
    found += [(f"{etc}/profile", LOGIN)] + [(p, LOGIN) for p in sorted(glob.glob(f"{etc}/profile.d/*.sh"))]
    found += [(os.path.join(home, n), LOGIN) for n in (".profile", ".bash_profile", ".bash_login")] if home else []
    found += [(f"{etc}/bash.bashrc", INTERACTIVE)] + ([(os.path.join(home, ".bashrc"), INTERACTIVE)] if home else [])
    return found[:MAX_SOURCES]


def mentions(text: str, prefix: str, kind: str) -> bool:
    """Does this script put ``prefix`` on PATH (names it, or activates the conda environment of that name)?"""
    if re.search(re.escape(prefix.rstrip("/")) + r"(?:/bin\b|/?(?:[\s:\"';]|$))", text, re.MULTILINE):
        return True
    name = os.path.basename(prefix.rstrip("/"))
    return kind == "conda" and "/envs/" in prefix and bool(re.search(rf"activate\s+[\"']?{re.escape(name)}\b", text))


def put_on_path(found: Dict[str, Any], env: Mapping[str, str], entrypoint: Sequence[str], home: str,
                etc: str = "/etc") -> List[Dict[str, str]]:
    """Which of the image's files, and its ENV PATH, put this environment's bin on PATH, and for whom."""
    bin_dir, by = os.path.join(found["prefix"], "bin"), []
    path = [p.rstrip("/") for p in env.get("PATH", "").split(":")]
    if bin_dir in path:
        first = shutil.which("python3", path=env.get("PATH", "")) or "no python3"
        by.append({"by": "ENV PATH", "scope": f"every command, but {first} comes first"})
    for file, scope in sources(env, entrypoint, home, etc):
        text = read_small(file)
        if text is not None and mentions(text, found["prefix"], found["kind"]):
            by.append({"by": file, "scope": scope})
    return by


def login_python(launcher: str, timeout_s: float = SHELL_TIMEOUT_S) -> Optional[str]:
    """The python3 the image's login shell finds (``sh login.sh sh -c 'command -v python3'``); None when it finds
    none, or did not answer within ``timeout_s`` (then killed with its process group)."""
    if not os.path.isfile(launcher) or not os.path.exists("/bin/sh"):
        return None
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(["/bin/sh", launcher, "sh", "-c", "command -v python3"], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return None
        out.seek(0)
        lines = out.read(MAX_BYTES).decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1].strip() if lines and lines[-1].startswith("/") else None


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


# -- the sentence ---------------------------------------------------------------------------------------------


def where(found: Dict[str, Any]) -> str:
    """``torch 2.13.0 is installed in /opt/venv, put on PATH only by /etc/profile.d/venv.sh (login shells)``."""
    head = f"torch {found['torch']} is installed in {found['prefix']}" + (" (conda)" if found["kind"] == "conda" else "")
    by = found.get("on_path") or []
    if not by:
        return f"{head}, but nothing puts {found['prefix']}/bin on PATH"
    return f"{head}, put on PATH only by " + " and ".join(f"{b['by']} ({b['scope']})" for b in by)


def search(env: Mapping[str, str], entrypoint: Sequence[str], home: str, launcher: str,
           roots: Sequence[str] = ROOTS, etc: str = "/etc") -> List[Dict[str, Any]]:
    """Every environment holding torch, each with what puts it on PATH, and what the login shell finds."""
    try:
        found = environments(roots)
        shell = login_python(launcher) if found else None
        for item in found:
            item["on_path"] = put_on_path(item, env, entrypoint, home, etc)
            item["login_shell_python"] = shell
            mine = bool(shell) and str(shell).startswith(item["prefix"].rstrip("/") + "/")
            if mine and not any(b["scope"] == LOGIN for b in item["on_path"]):  # measured, though no file read says how
                item["on_path"].append({"by": f"a login shell (it finds {shell})", "scope": LOGIN})
        return found
    except Exception:  # noqa: BLE001 - a search that cannot look says nothing; versions.torch still fails
        return []
