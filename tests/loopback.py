"""A test HTTP server on 127.0.0.1 (a free port), always shut down."""

from __future__ import annotations

import contextlib
import http.server
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
