"""A test HTTP server on 127.0.0.1 (a free port), always shut down; free ports for daemons the tests start."""

from __future__ import annotations

import contextlib
import http.server
import random
import socket
import threading
from typing import Iterator


@contextlib.contextmanager
def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve ``handler`` on a free loopback port in a thread; yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def unused_port(run: int = 1) -> int:
    """A port p with p .. p+run-1 free on 127.0.0.1, for a daemon that binds it later: below the kernel's ephemeral
    range (32768 and up), which it hands out to outgoing connections (a push makes hundreds), so no connection takes
    it meanwhile, as one could a port picked by binding port 0."""
    for _ in range(500):
        base = random.randrange(20000, 32000 - run)
        if all(_free(base + i) for i in range(run)):
            return base
    raise RuntimeError(f"no {run} free port(s) in a row from 20000 to 32000 on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
