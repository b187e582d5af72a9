"""Which TCP ports listen here and which answer as Jupyter without a token.

The payload's security.jupyter check uses it, and the host runs it with
``docker exec`` (verify/probe.py) inside a container started with the image's
own command (the standard tier's security.service). Standard library only.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, List, Optional, Sequence, Tuple

from .parsers import parse_listening_ports

MARKER = "@@IMAGESMITH-PROBE@@ "
MAX_PROBES = 10
TIMEOUT_S = 1.0


def listening_sockets() -> List[Tuple[str, int]]:
    found: List[Tuple[str, int]] = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path, encoding="ascii") as fh:
                found += parse_listening_ports(fh.read())
        except (OSError, ValueError):
            continue
    return sorted(set(found), key=lambda a: a[1])


def _get(url: str) -> Optional[Tuple[int, str, str]]:
    """(status, final URL, start of the body) or None when nothing answers HTTP."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.geturl(), resp.read(2048).decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as exc:
        return exc.code, url, ""
    except (urllib.error.URLError, OSError, ValueError):
        return None


def open_jupyter(port: int) -> Optional[str]:
    """The URL of a Jupyter API that answers without a token on `port`, else None.
    The server's base URL is taken from where its front page redirects."""
    root = f"http://127.0.0.1:{port}"
    front = _get(root + "/")
    bases = ["/"]
    if front and front[1].startswith(root):
        path = urllib.parse.urlparse(front[1]).path
        for marker in ("/lab", "/tree", "/login"):
            if marker in path:
                bases.append(path[:path.index(marker) + 1])
    for base in dict.fromkeys(bases):
        answer = _get(f"{root}{base}api/kernels")
        if answer and answer[0] == 200 and answer[2].startswith("["):
            return f"{root}{base}api/kernels"
    return None


def probe(ports: Sequence[int] = ()) -> Dict[str, List[str]]:
    sockets = listening_sockets()
    candidates = list(dict.fromkeys([p for _, p in sockets] + list(ports)))[:MAX_PROBES]
    return {"listening": [f"{a}:{p}" for a, p in sockets],
            "open": [u for u in (open_jupyter(p) for p in candidates) if u]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`probe.py [PORT ...]`: one marker line of JSON on stdout."""
    ports = [int(a) for a in (argv if argv is not None else sys.argv[1:]) if a.isdigit()]
    sys.stdout.write("\n" + MARKER + json.dumps(probe(ports)) + "\n")
    sys.stdout.flush()
    return 0
