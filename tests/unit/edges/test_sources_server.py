"""sources.py: local folders and authenticated indexes served on loopback, what the
build sees instead of them, and the credential lookup. Real HTTP on 127.0.0.1 (an
upstream index that demands basic auth is a stdlib server started here)."""

from __future__ import annotations

import base64
import http.server
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagesmith.edges import sources
from imagesmith.edges.registry import Credentials
from imagesmith.errors import UserError
from imagesmith.model.matrix.records import Credential, Sources

USER, PASSWORD = "ci", "s3cr3t:with-colon"


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


@pytest.fixture()
def upstream() -> Iterator[str]:
    """An index on loopback that answers only with the right basic auth."""
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Index(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.headers.get("Authorization") != expected:
                self.send_error(401)
                return
            origin = f"http://{self.headers.get('Host')}"
            body = f'<a href="/files/{self.path.strip("/")}.whl">abs</a> <a href="{origin}/x">full</a>'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("url, local", [
    ("file:///srv/simple", True), ("/opt/wheels", True), ("https://pypi.org/simple", False), ("", False),
])
def test_is_local(url: str, local: bool) -> None:
    assert sources.is_local(url) is local


@pytest.mark.parametrize("url, path", [("file:///srv/my%20index/simple", "/srv/my%20index/simple"), ("/opt/wheels", "/opt/wheels")])
def test_local_path(url: str, path: str) -> None:
    assert sources.local_path(url) == Path(path)


@pytest.mark.parametrize("src, needed", [
    (Sources(index_url="https://pypi.org/simple"), False),
    (Sources(find_links=("/opt/wheels",)), True),
    (Sources(torch_index_url="file:///srv/simple"), True),
    (Sources(extra_index_urls=("https://a/simple",), credentials=(Credential("a", password_env="P"),)), True),
])
def test_a_server_is_needed_for_local_folders_and_credentials(src: Sources, needed: bool) -> None:
    assert sources.SourceServer(src, {"P": "x"}).needed is needed


def test_a_folder_is_served_and_nothing_outside_it(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "secret.txt").write_text("outside")
    with sources.SourceServer(Sources(find_links=(str(wheels),), network="host")) as server:
        url = server.rewrite(str(wheels))
        assert url.startswith(f"http://127.0.0.1:{server.port}/local/") and url.endswith("/")
        assert get(url + "a-1.0-py3-none-any.whl") == (200, b"wheel")
        assert get(url + "../secret.txt")[0] == 404
        assert get(url + "%2e%2e/secret.txt")[0] == 404
        assert get(f"http://127.0.0.1:{server.port}/local/deadbeef/a-1.0-py3-none-any.whl")[0] == 404
        assert get(f"http://127.0.0.1:{server.port}/elsewhere/x")[0] == 404
        assert server.rewrite("https://pypi.org/simple") == "https://pypi.org/simple" and server.rewrite("") == ""


def test_the_ca_bundle_is_served_at_its_digest_only_with_host_network(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    src = Sources(ca_bundle=tmp_path / "ca.pem", ca_bundle_data=pem, network="host")
    assert not sources.SourceServer(Sources(ca_bundle=tmp_path / "ca.pem", ca_bundle_data=pem)).needed  # no loopback: not served
    with sources.SourceServer(src) as server:
        assert server.needed and src.ca_on_loopback
        url = server.ca_url()
        assert url.endswith("/ca.pem") and get(url) == (200, pem)
        assert get(url.replace("/ca.pem", "/other.pem"))[0] == 404
        assert get(f"http://127.0.0.1:{server.port}/ca/0000000000000000/ca.pem")[0] == 404  # another bundle's digest


def test_a_file_index_is_served_with_its_sibling_files(tmp_path: Path) -> None:
    (tmp_path / "simple" / "a").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    (tmp_path / "simple" / "a" / "index.html").write_text('<a href="../../files/a.whl">a</a>')
    (tmp_path / "files" / "a.whl").write_bytes(b"A")
    with sources.SourceServer(Sources(index_url=f"file://{tmp_path}/simple")) as server:
        url = server.rewrite(f"file://{tmp_path}/simple")
        assert url.endswith("/simple/")
        assert get(url + "a/index.html") == (200, b'<a href="../../files/a.whl">a</a>')
        assert get(url + "../files/a.whl") == (200, b"A")


def test_a_missing_folder_is_a_user_error(tmp_path: Path) -> None:
    server = sources.SourceServer(Sources(find_links=(str(tmp_path / "nope"),)))
    with pytest.raises(UserError, match=rf"^sources: {tmp_path / 'nope'} does not exist$"):
        server.rewrite(str(tmp_path / "nope"))


def test_an_authenticated_index_is_proxied_and_the_build_never_sees_the_secret(upstream: str, tmp_path: Path) -> None:
    secret = tmp_path / "cred"
    secret.write_text(f"{USER}:{PASSWORD}\n")
    host = "127.0.0.1"
    src = Sources(index_url=f"{upstream}/simple", credentials=(Credential(host, file=secret),))
    with sources.SourceServer(src) as server:
        url = server.rewrite(f"{upstream}/simple/torch/")
        assert PASSWORD not in url and url.startswith(f"http://127.0.0.1:{server.port}/auth/")
        prefix = url.split("/simple/")[0]
        status, body = get(url)
        assert status == 200
        assert body.decode() == f'<a href="/{prefix.split("/", 3)[3]}/files/simple/torch.whl">abs</a> <a href="{prefix}/x">full</a>'
        assert PASSWORD in server.redactions()


def test_wrong_credentials_are_the_upstreams_answer(upstream: str) -> None:
    src = Sources(index_url=f"{upstream}/simple", credentials=(Credential("127.0.0.1", password_env="TOKEN"),))
    with sources.SourceServer(src, {"TOKEN": "wrong"}) as server:
        assert get(server.rewrite(f"{upstream}/simple/"))[0] == 401


def test_an_unreachable_upstream_is_a_bad_gateway(upstream: str) -> None:
    src = Sources(index_url="http://127.0.0.1:9/simple", credentials=(Credential("127.0.0.1", password_env="TOKEN"),))
    with sources.SourceServer(src, {"TOKEN": "t"}) as server:
        assert get(server.rewrite("http://127.0.0.1:9/simple/"))[0] == 502


@pytest.mark.parametrize("cred, environ, found", [
    (Credential("h", "U", "P"), {"U": "alice", "P": "pw"}, Credentials("alice", "pw", "environment (P)")),
    (Credential("h", None, "P"), {"P": "tok"}, Credentials("__token__", "tok", "environment (P)")),
    (Credential("h", "U", "P"), {"P": "tok", "U": ""}, Credentials("__token__", "tok", "environment (P)")),
])
def test_read_secret_from_the_environment(cred: Credential, environ: dict[str, str], found: Credentials) -> None:
    got = sources.read_secret(cred, environ)
    assert (got.username, got.password, got.source) == (found.username, found.password, found.source)


def test_read_secret_names_the_variable_to_export() -> None:
    with pytest.raises(UserError) as err:
        sources.read_secret(Credential("index.example", "U", "INDEX_TOKEN"), {"INDEX_TOKEN": ""})
    assert str(err.value) == "sources.credentials: INDEX_TOKEN is not set; export it (the password or token for index.example)"


def test_the_port_is_stable_for_the_same_sources() -> None:
    a = sources.SourceServer(Sources(index_url="https://a/simple"), environ={})._stable_port()
    assert a == sources.SourceServer(Sources(index_url="https://a/simple"), environ={})._stable_port()
    assert sources.PORT_BASE <= a < sources.PORT_BASE + sources.PORT_SPAN


def test_a_pinned_port_wins_and_the_server_binds_it() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    environ = {sources.PORT_ENV: f" {free} "}
    server = sources.SourceServer(Sources(find_links=("/opt/wheels",)), environ=environ)
    assert server._stable_port() == free
    with server:
        assert server.port == free
    other = sources.SourceServer(Sources(index_url="https://b/simple"), environ=environ)
    assert other._stable_port() == free  # whatever the sources


@pytest.mark.parametrize("value", ["abc", "80", "70000", "-1", "2.5"])
def test_a_bad_pinned_port_says_what_to_give(value: str) -> None:
    with pytest.raises(UserError) as err:
        sources.SourceServer(Sources(index_url="https://a/simple"), environ={sources.PORT_ENV: value})
    assert str(err.value) == (f"IMAGESMITH_SOURCES_PORT={value!r}: give a TCP port from 1024 to 65535 for the package sources' "
                              "loopback server (a free one, the same for every build that should share the layer cache), or unset it")
