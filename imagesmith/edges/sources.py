"""Package sources for builds: local folders and private indexes, served on
loopback for the duration of a build.

* ``file://`` indexes and wheelhouse folders are served over HTTP on
  127.0.0.1, so a build (``network: host``) reaches them without copying
  gigabytes of wheels into every build context.
* An index with credentials is reached through an authenticating proxy: the
  build sees ``http://127.0.0.1:PORT/auth/N/...`` and never the credential,
  which therefore cannot land in any layer, history entry, label or log.
* The CA bundle of a TLS-intercepting proxy (``sources.ca_bundle``, as the
  matrix loader read it), for a build that installs Python where the image
  keeps it: the build fetches it, uses it and deletes it in one step, so no
  layer holds it.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import posixpath
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from imagesmith.edges.registry import Credentials, from_file
from imagesmith.errors import UserError
from imagesmith.model.matrix.records import Credential, Sources

PORT_BASE, PORT_SPAN = 20000, 20000
# The loopback port is part of every build argument that names a served source, so of docker's layer cache key:
# a build on another port rebuilds from the first such step. Where several builds with the same sources run at
# once on one host (CI runners sharing it), each runner pins a port of its own here, so its cache keeps hitting.
PORT_ENV = "IMAGESMITH_SOURCES_PORT"


def pinned_port(environ: Mapping[str, str]) -> int | None:
    """The port ``IMAGESMITH_SOURCES_PORT`` pins, if set."""
    value = environ.get(PORT_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 1024 <= int(value) <= 65535:
        raise UserError(f"{PORT_ENV}={value!r}: give a TCP port from 1024 to 65535 for the package sources' loopback "
                        "server (a free one, the same for every build that should share the layer cache), or unset it")
    return int(value)


def is_local(url: str) -> bool:
    return url.startswith("file://") or url.startswith("/")


def local_path(url: str) -> Path:
    return Path(urllib.parse.urlparse(url).path if url.startswith("file://") else url)


def read_secret(cred: Credential, environ: Mapping[str, str] | None = None) -> Credentials:
    """The credential for one index host, from a ``user:password`` file or the environment."""
    if cred.file:
        found = from_file(cred.file)
        assert found is not None
        return found
    env = os.environ if environ is None else environ
    password = env.get(cred.password_env or "", "")
    if not password:
        raise UserError(f"sources.credentials: {cred.password_env} is not set; export it (the password or token for {cred.host})")
    return Credentials(env.get(cred.username_env or "", "") or "__token__", password, f"environment ({cred.password_env})")


@dataclass
class Routes:
    """URL prefix -> local folder, and prefix -> (upstream origin, secret)."""

    folders: dict[str, Path] = field(default_factory=dict)
    upstreams: dict[str, tuple[str, Credentials]] = field(default_factory=dict)
    ca: tuple[str, bytes] | None = None  # prefix -> the CA bundle's bytes


class SourceServer:
    """Serves local folders and authenticated upstreams on 127.0.0.1."""

    def __init__(self, sources: Sources, environ: Mapping[str, str] | None = None, ca_bundle: Path | None = None) -> None:
        self.sources = sources
        self.secrets = {c.host: read_secret(c, environ) for c in sources.credentials}
        self.pinned = pinned_port(os.environ if environ is None else environ)
        self.routes = Routes()
        self.ca_bundle = ca_bundle or sources.ca_bundle
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self.port = 0

    # -- what the build sees -----------------------------------------------------
    @property
    def needed(self) -> bool:
        urls = [self.sources.index_url or "", self.sources.torch_index_url or "", *self.sources.extra_index_urls, *self.sources.find_links]
        return bool(self.secrets) or any(is_local(u) for u in urls if u) or self.sources.ca_on_loopback

    def ca_url(self) -> str:
        """Where a build fetches the CA bundle: the path names its digest, so a changed bundle is a changed step."""
        digest = hashlib.sha256(self.sources.ca_bundle_data).hexdigest()
        self.routes.ca = (f"ca/{digest[:16]}", self.sources.ca_bundle_data)
        return f"http://127.0.0.1:{self.port}/{self.routes.ca[0]}/ca.pem"

    def rewrite(self, url: str) -> str:
        """The URL a build uses for ``url`` (unchanged unless served here)."""
        if not url:
            return url
        if is_local(url):
            return self._serve_folder(local_path(url), url.startswith("/") and not url.endswith("/simple"))
        secret = self._secret_for(url)
        return self._proxy(url, secret) if secret else url

    def _serve_folder(self, path: Path, is_links: bool) -> str:
        if not path.exists():
            raise UserError(f"sources: {path} does not exist")
        root = path if is_links else path.parent  # an index's file links climb one level (../files)
        prefix = f"local/{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"
        self.routes.folders[prefix] = root
        tail = "" if is_links else "/" + path.name
        return f"http://127.0.0.1:{self.port}/{prefix}{tail}/"

    def _secret_for(self, url: str) -> Credentials | None:
        return self.secrets.get(urllib.parse.urlparse(url).hostname or "")

    def _proxy(self, url: str, secret: Credentials) -> str:
        parsed = urllib.parse.urlparse(url)
        origin = f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}"
        prefix = f"auth/{hashlib.sha256(origin.encode()).hexdigest()[:8]}"
        self.routes.upstreams[prefix] = (origin, secret)
        return f"http://127.0.0.1:{self.port}/{prefix}{parsed.path}"

    def redactions(self) -> list[str]:
        return [r for c in self.secrets.values() for r in c.secrets()]

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "SourceServer":
        """Bind a port stable for these sources (so docker's layer cache keeps
        hitting across runs): the one IMAGESMITH_SOURCES_PORT pins, else one
        derived from the sources; any free port when another process holds it."""
        handler = _handler(self)
        for port in (self._stable_port(), 0):
            try:
                self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
                break
            except OSError:
                continue
        assert self._httpd is not None
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         name="imagesmith-sources", daemon=True).start()
        return self

    def _stable_port(self) -> int:
        if self.pinned is not None:
            return self.pinned
        digest = hashlib.sha256(repr(self.sources).encode()).digest()
        return PORT_BASE + int.from_bytes(digest[:4], "big") % PORT_SPAN

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "SourceServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        if self.ca_bundle:
            ctx.load_verify_locations(cafile=str(self.ca_bundle))
        return ctx


def _handler(server: SourceServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet: pip's own log says enough
            return

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            prefix, _, rest = self.path.lstrip("/").partition("/")
            route = f"{prefix}/{rest.split('/', 1)[0]}"
            if server.routes.ca is not None and self.path.lstrip("/") == f"{server.routes.ca[0]}/ca.pem":
                self._send_ca(server.routes.ca[1])
            elif route in server.routes.upstreams:
                self._proxy(route, rest.split("/", 1)[1] if "/" in rest else "")
            elif route in server.routes.folders:
                super().do_GET()
            else:
                self.send_error(404, "not served by imagesmith")

        def translate_path(self, path: str) -> str:
            prefix, _, rest = path.lstrip("/").partition("/")
            key, _, tail = rest.partition("/")
            root = server.routes.folders.get(f"{prefix}/{key}")
            if root is None:
                return "/nonexistent"
            clean = posixpath.normpath(urllib.parse.unquote(tail.split("?", 1)[0]))
            target = (root / clean).resolve()
            return str(target) if target == root or root in target.parents else "/nonexistent"

        def _proxy(self, route: str, tail: str) -> None:
            origin, secret = server.routes.upstreams[route]
            request = urllib.request.Request(f"{origin}/{tail}", headers={"Authorization": secret.basic_header()})
            try:
                with urllib.request.urlopen(request, context=server.ssl_context(), timeout=120) as resp:
                    self._relay(resp.status, resp.headers.get("Content-Type", ""), resp.read(), origin, route)
            except urllib.error.HTTPError as exc:
                self.send_error(exc.code, f"upstream answered {exc.code}")
            except (urllib.error.URLError, OSError) as exc:
                self.send_error(502, f"upstream unreachable: {type(exc).__name__}")

        def _send_ca(self, data: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-pem-file")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _relay(self, status: int, ctype: str, body: bytes, origin: str, route: str) -> None:
            if "html" in ctype or "json" in ctype:  # absolute and root-relative links go through us too
                body = body.replace(origin.encode(), f"http://127.0.0.1:{server.port}/{route}".encode())
                for quote in (b'"', b"'"):
                    body = body.replace(b"href=" + quote + b"/", b"href=" + quote + f"/{route}/".encode())
                body = body.replace(b'"url": "/', f'"url": "/{route}/'.encode())
            self.send_response(status)
            self.send_header("Content-Type", ctype or "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
