"""The client for the Registry HTTP API v2 (CNCF distribution, Harbor).

What a release needs: list tags, read a manifest (its digest and config
digest), read an image's labels from its config blob, put a manifest under
another tag, push small blobs and artifact manifests (evidence), and move
blobs between repositories without an engine (cross-repository mounts, else a
chunked copy: promotion, :mod:`imagesmith.stages.release.promote`). Authentication answers
the registry's challenge: Bearer tokens (Harbor, distribution with token
auth) or Basic (htpasswd).

Which credentials a host gets is decided by the run's credential store
(:mod:`imagesmith.edges.credentials`: each credential is bound to its host); a
:class:`Registry` uses only what it is handed. A :class:`Credentials` never
shows its password in a repr, and every error message is passed through
:meth:`Credentials.redact` before it leaves.

What it sends and receives (media types, manifests, image indexes, digests, the registry's error answers) is
:mod:`imagesmith.edges.oci`. ``requests`` is the HTTP client. This module reads the docker config file
(:func:`read_docker_config`, through the strict loader); the credential store
resolves a login in it with the docker SDK's own rules (credential helpers,
Docker Hub aliases), which live in engine.py, the only module importing docker.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import urlencode

import requests

from imagesmith.edges.oci import (  # the client's vocabulary: these are re-exported for its callers
    ACCEPT,
    DOCKER_LIST,
    DOCKER_V2,
    INDEXES,
    MAX_BLOB,
    OCI_INDEX,
    OCI_MANIFEST,
    TRANSIENT_STATUS,
    IndexEntry,
    Manifest,
    PushedManifest,
    RegistryAnswer,
    RegistryHTTPError,
    RegistryUnreachable,
    answer_of,
    as_mapping,
    entries,
    index_document,
    is_loopback,
    manifest_document,
    sha256_digest,
)
from imagesmith.errors import Redactor, RegistryError, UserError
from imagesmith.errors import short as _short
from imagesmith.model import engines
from imagesmith.model.ref import DOCKER_HUB, ImageRef

ENV_USER = "IMAGESMITH_REGISTRY_USER"
ENV_PASSWORD = "IMAGESMITH_REGISTRY_PASSWORD"
CERTS_D = Path("/etc/docker/certs.d")


# -- credentials -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """A user name and password (or Harbor robot secret) and where they came from."""

    username: str
    password: str = field(repr=False)
    source: str = ""

    def auth_config(self) -> dict[str, str]:
        """What the docker SDK takes as ``auth_config``."""
        return {"username": self.username, "password": self.password}

    def basic_header(self) -> str:
        """An HTTP ``Authorization`` value (basic auth)."""
        return "Basic " + _b64(f"{self.username}:{self.password}")

    def secrets(self) -> list[str]:
        """Every form of the secret that may leak into text: the password and
        its base64 forms, longest first."""
        found = [self.password, _b64(f"{self.username}:{self.password}"), _b64(self.password)]
        return Redactor(found, min_length=3).secrets

    def redact(self, text: str) -> str:
        """``text`` with the password (and its base64 forms) replaced by ****."""
        return Redactor(self.secrets())(text)


def split_login(text: str) -> tuple[str, str]:
    """``user:password`` (Harbor robot accounts look like ``robot$ml+ci:SECRET``; the password may contain ':') as
    (user, password): the one parser of a login; a ValueError naming what is missing ("user name" or "password")."""
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ValueError("password" if user else "user name")
    return user, password


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def redact(text: str, credentials: Credentials | None) -> str:
    return credentials.redact(text) if credentials else text


def from_environment(env: Mapping[str, str]) -> Credentials | None:
    user, password = env.get(ENV_USER, ""), env.get(ENV_PASSWORD, "")
    if bool(user) != bool(password):
        missing = ENV_PASSWORD if user else ENV_USER
        raise UserError(f"{ENV_USER if user else ENV_PASSWORD} is set but {missing} is not: set both, or neither")
    return Credentials(user, password, f"environment ({ENV_USER})") if user else None


def from_file(path: Path | None) -> Credentials | None:
    """A file holding ``user:password`` on its first line (Harbor robot accounts look like
    ``robot$ml+ci:SECRET``); the password may contain ':'. For a credential whose host is said
    elsewhere (a matrix's sources.credentials); ``--credentials`` is read by :mod:`imagesmith.edges.credentials`."""
    if path is None:
        return None
    from imagesmith.model import loader

    try:
        lines = loader.strict_text(loader.read_regular(path, cap=loader.KEY_CAP), str(path)).strip().splitlines()
    except loader.LoadError as exc:
        raise UserError(f"credentials file {path}: {exc.why}; it must hold one line user:password") from None
    try:
        user, password = split_login(lines[0].strip() if lines else "")
    except ValueError:
        raise UserError(f"credentials file {path}: expected one line user:password (e.g. robot$ml+ci:SECRET)") from None
    return Credentials(user, password, f"file {path}")


def docker_config_path(env: Mapping[str, str]) -> Path:
    folder = env.get("DOCKER_CONFIG") or str(Path(env.get("HOME") or Path.home()) / ".docker")
    return Path(folder) / "config.json"


def read_docker_config(path: Path, what: str = "", login: str = "") -> Mapping[str, Any]:
    """The docker config (or a Podman auth file, ``what``: its name in messages) as JSON ({} when there is none),
    through the strict loader; ``login``: what rewrites it, said when it cannot be read."""
    from imagesmith.model import loader

    what = what or f"docker config {path}"
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        config = loader.parse_json(loader.read_regular(path, cap=loader.KEY_CAP * 16), str(path))
    except loader.LoadError as exc:
        raise UserError(f"{what} cannot be read ({exc.why}); fix or remove it" + (f", or run {login} again" if login else "")) from None
    if not isinstance(config, Mapping):
        raise UserError(f"{what} is not a JSON object; fix or remove it" + (f", or run {login} again" if login else ""))
    return config


def registry_host(ref: str) -> str:
    """The registry a reference names (Docker's rule: a first component with
    a dot or a port, or localhost, is a host; otherwise Docker Hub)."""
    parsed = ImageRef.maybe(ref)
    return parsed.registry if parsed else DOCKER_HUB


def login_command(host: str, environ: Mapping[str, str] | None = None) -> str:
    """How the operator logs in to ``host`` with the engine this run talks to: ``podman login`` where DOCKER_HOST is
    Podman's socket, else ``docker login`` (the engine edge names its own, having asked the engine)."""
    return engines.guessed((os.environ if environ is None else environ).get("DOCKER_HOST", "")).login_fix(host)


def registry_hint(ref: str, status: int | None, message: str, action: str, hint: str | None = None,
                  login: str | None = None) -> str:
    """A registry failure as one line with what to do about it (``hint`` when the caller knows better; ``login``:
    the engine's own login command, default :func:`login_command`)."""
    host = registry_host(ref)
    hints = {
        401: f"not logged in to {host} or the credentials are wrong: {login or login_command(host)}, or set {ENV_USER}/{ENV_PASSWORD} (a Harbor robot account)",
        403: f"the account may not {action} {ref}: give the Harbor robot account {action} permission on the project",
        404: f"{ref} or its project does not exist on {host}: create the Harbor project first",
    }
    hint = hint or hints.get(status or 0, f"check that {host} is reachable and healthy")
    return f"{action} {ref} failed: {message.strip()} ({hint})"


# -- the client ----------------------------------------------------------------------------


class Registry:
    """One registry host. ``session`` is a seam for tests; ``ca_file`` a CA bundle
    (default: docker's ``/etc/docker/certs.d/<host>/ca.crt`` when present).
    Plain HTTP is used only where docker allows it by default (loopback) or
    when ``insecure`` is set, and only if HTTPS is not spoken there."""

    def __init__(self, host: str, credentials: Credentials | None = None, ca_file: Path | None = None,
                 insecure: bool | None = None, session: requests.Session | None = None, timeout: float = 30.0,
                 certs_d: Path = CERTS_D, anonymous_hint: str = "") -> None:
        self.host = host
        self.credentials = credentials
        self.anonymous_hint = anonymous_hint  # a 401 without credentials: how to declare this host
        self.ca_file = ca_file or self._docker_ca(certs_d)
        self.insecure = is_loopback(host) if insecure is None else insecure
        self.session = session or requests.Session()
        self.timeout = timeout
        self._scheme: str | None = None
        self._tokens: dict[str, str] = {}
        self._basic = False

    def _docker_ca(self, certs_d: Path) -> Path | None:
        ca = certs_d / self.host / "ca.crt"
        return ca if ca.is_file() else None

    @property
    def verify(self) -> bool | str:
        return str(self.ca_file) if self.ca_file else True

    # -- public API ----------------------------------------------------------------
    def tags(self, repo: str) -> list[str]:
        """Every tag of ``repo`` (empty when the repository does not exist yet)."""
        out: list[str] = []
        path: str | None = f"/v2/{repo}/tags/list?n=1000"
        while path:
            resp = self._request("GET", path, repo, missing_ok=True)
            if resp is None:
                return []
            tags = manifest_document(resp.content, f"{self.host}/{repo} tag list").get("tags")
            out += [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
            path = _next_link(resp.headers.get("Link", ""))
        return out

    def manifest(self, repo: str, ref: str) -> Manifest | None:
        """The manifest ``ref`` (tag or digest) names; None if there is none. Fetched by digest, its bytes must hash
        to that digest (a registry cannot hand back another document). An index (multi-arch) resolves to its
        linux/amd64 manifest's config."""
        resp = self._request("GET", f"/v2/{repo}/manifests/{ref}", repo, missing_ok=True, headers={"Accept": ACCEPT})
        if resp is None:
            return None
        body = resp.content
        actual = sha256_digest(body)
        if ref.startswith("sha256:") and actual != ref:
            raise RegistryHTTPError(f"{self.host}/{repo}@{ref}: the registry served a document whose digest is "
                                    f"{actual}; nothing read from it is used")
        doc = manifest_document(body, f"{self.host}/{repo}:{ref}" if not ref.startswith("sha256:") else f"{self.host}/{repo}@{ref}")
        digest = resp.headers.get("Docker-Content-Digest") or actual
        media_type = resp.headers.get("Content-Type", "").split(";")[0] or str(doc.get("mediaType") or "")
        return Manifest(digest, media_type, self._config_digest(repo, doc, media_type), body)

    def _config_digest(self, repo: str, doc: Mapping[str, Any], media_type: str) -> str | None:
        if media_type in INDEXES or "manifests" in doc:
            picked = next((m for m in entries(doc, "manifests") if as_mapping(m.get("platform")).get("architecture") == "amd64"), None)
            inner = self.manifest(repo, picked["digest"]) if picked and isinstance(picked.get("digest"), str) else None
            return inner.config_digest if inner else None
        found = as_mapping(doc.get("config")).get("digest")
        return found if isinstance(found, str) else None

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        """The digest the registry reports for ``ref`` (HEAD, ``Docker-Content-Digest``)."""
        resp = self._request("HEAD", f"/v2/{repo}/manifests/{ref}", repo, missing_ok=True, headers={"Accept": ACCEPT})
        if resp is None:
            return None
        digest = resp.headers.get("Docker-Content-Digest")
        if digest:
            return digest
        found = self.manifest(repo, ref)
        return found.digest if found else None

    def exists(self, repo: str, ref: str) -> bool:
        return self.manifest_digest(repo, ref) is not None

    def config(self, repo: str, digest: str) -> dict[str, Any]:
        resp = self._request("GET", f"/v2/{repo}/blobs/{digest}", repo)
        assert resp is not None
        if len(resp.content) > MAX_BLOB:
            raise RegistryHTTPError(f"{self.host}/{repo}@{digest}: an image config of {len(resp.content):,} bytes, over the {MAX_BLOB:,}-byte limit")
        return manifest_document(resp.content, f"{self.host}/{repo}@{digest} (image config)")

    def labels(self, repo: str, ref: str) -> dict[str, str] | None:
        """The image config's labels for ``ref``; None if ``ref`` does not exist."""
        found = self.manifest(repo, ref)
        if found is None or not found.config_digest:
            return None
        return self.labels_of_config(repo, found.config_digest)

    def labels_of_config(self, repo: str, config_digest: str) -> dict[str, str]:
        config = self.config(repo, config_digest)
        labels = as_mapping(as_mapping(config.get("config")).get("Labels"))
        return {str(k): v for k, v in labels.items() if isinstance(v, str)}

    def index_entry(self, repo: str, digest: str) -> IndexEntry:
        """The index entry of image manifest ``digest``: its media type and size as stored, and the platform its
        config names (read from the registry, never taken from the caller)."""
        found = self.manifest(repo, digest)
        if found is None or found.media_type in INDEXES or not found.config_digest:
            raise RegistryHTTPError(f"{self.host}/{repo}@{digest} is not an image manifest in the registry: "
                                    "push every platform's image before its index")
        config = self.config(repo, found.config_digest)
        return IndexEntry(found.digest, found.media_type, len(found.raw), str(config.get("os") or ""),
                          str(config.get("architecture") or ""), str(config.get("variant") or ""))

    def push_index(self, repo: str, tag: str, digests: Sequence[str]) -> str:
        """Write the OCI image index of ``digests`` (one image manifest per platform, each already in ``repo``)
        under ``tag``, then read it back: the registry must serve exactly those bytes under that digest."""
        data = index_document([self.index_entry(repo, d) for d in digests])
        digest = sha256_digest(data)
        pushed = self.push_manifest(repo, tag, OCI_INDEX, data)
        back = self._request("GET", f"/v2/{repo}/manifests/{tag}", repo, headers={"Accept": ACCEPT})
        assert back is not None
        if pushed.digest != digest or back.content != data:
            raise RegistryHTTPError(f"{self.host}/{repo}:{tag}: the registry serves another document than the index "
                                    f"written ({digest}); nothing else was changed: push again")
        return digest

    def put_manifest(self, repo: str, tag: str, manifest: Manifest) -> str:
        """Store ``manifest`` under ``tag`` (a registry-side retag); return the digest the registry reports."""
        resp = self._request("PUT", f"/v2/{repo}/manifests/{tag}", repo, push=True,
                             headers={"Content-Type": manifest.media_type}, data=manifest.raw)
        assert resp is not None
        return resp.headers.get("Docker-Content-Digest") or manifest.digest

    # -- OCI artifacts and referrers (evidence) ------------------------------------------
    def blob(self, repo: str, digest: str, limit: int = MAX_BLOB) -> bytes:
        """A blob's bytes, checked against ``digest`` (a registry's word is not taken for it)."""
        resp = self._request("GET", f"/v2/{repo}/blobs/{digest}", repo)
        assert resp is not None
        if len(resp.content) > limit:
            raise RegistryHTTPError(f"{self.host}/{repo}@{digest}: {len(resp.content)} bytes, more than the {limit} an evidence blob may have")
        if sha256_digest(resp.content) != digest:
            raise RegistryHTTPError(f"{self.host}/{repo}: blob {digest} has other content (sha256 {sha256_digest(resp.content)}): "
                                    f"the registry's storage was changed")
        return resp.content

    def has_blob(self, repo: str, digest: str) -> bool:
        return self._request("HEAD", f"/v2/{repo}/blobs/{digest}", repo, missing_ok=True) is not None

    def push_blob(self, repo: str, data: bytes) -> tuple[str, bool]:
        """Upload ``data`` unless the repository has it; (digest, whether it was sent)."""
        digest = sha256_digest(data)
        if self.has_blob(repo, digest):
            return digest, False
        location = self.start_upload(repo)
        self._request("PUT", with_query(location, digest=digest), repo, push=True,
                      headers={"Content-Type": "application/octet-stream"}, data=data)
        return digest, True

    def start_upload(self, repo: str) -> str:
        """Open a blob upload session; its Location (a path on this registry)."""
        start = self._request("POST", f"/v2/{repo}/blobs/uploads/", repo, push=True)
        assert start is not None
        return self._location(start, repo)

    def _location(self, resp: requests.Response, repo: str) -> str:
        location = re.sub(r"^https?://[^/]+", "", resp.headers.get("Location", ""))
        if not location:
            raise RegistryHTTPError(f"{self.host}/{repo}: the registry started an upload but named no Location")
        return location

    def push_manifest(self, repo: str, ref: str, media_type: str, data: bytes) -> PushedManifest:
        """PUT a manifest (by digest or tag); the digest and the ``OCI-Subject`` header the
        registry answers with (a registry with the referrers API sends it for a manifest
        with a ``subject``; one without it does not)."""
        resp = self._request("PUT", f"/v2/{repo}/manifests/{ref}", repo, push=True, headers={"Content-Type": media_type}, data=data)
        assert resp is not None
        return PushedManifest(resp.headers.get("Docker-Content-Digest") or sha256_digest(data), resp.headers.get("OCI-Subject"))

    def check_push(self, repo: str) -> None:
        """May these credentials push to ``repo``? Start a blob upload and cancel it (nothing stays);
        a refusal raises with the registry's hint."""
        self.cancel_upload(repo, self.start_upload(repo))

    def cancel_upload(self, repo: str, location: str) -> None:
        self._request("DELETE", location, repo, push=True, missing_ok=True)

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]] | None:
        """The referrers API (OCI distribution 1.1): descriptors of the manifests whose
        ``subject`` is ``digest``; None when the registry has no such API (404)."""
        try:
            resp = self._request("GET", f"/v2/{repo}/referrers/{digest}", repo, missing_ok=True, headers={"Accept": OCI_INDEX})
        except RegistryHTTPError as exc:
            if exc.status in (400, 405, 501):
                return None
            raise
        if resp is None or not resp.headers.get("Content-Type", "").startswith(OCI_INDEX):
            return None
        return entries(manifest_document(resp.content, f"{self.host}/{repo} referrers of {digest}"), "manifests")

    # -- promotion: blobs from one repository to another, no engine ------------------------
    def mount_blob(self, repo: str, digest: str, from_repo: str) -> str | None:
        """Cross-repository blob mount on this registry (``POST ?mount=&from=``): None when
        mounted (201), else the Location of the upload the registry opened instead (202)."""
        scope = f"repository:{repo}:pull,push repository:{from_repo}:pull"
        resp = self._request("POST", with_query(f"/v2/{repo}/blobs/uploads/", mount=digest, **{"from": from_repo}),
                             repo, push=True, scope=scope)
        assert resp is not None
        return None if resp.status_code == 201 else self._location(resp, repo)

    def blob_range(self, repo: str, digest: str, start: int, end: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of a blob (HTTP Range; a registry that ignores Range
        sends the whole blob, which is then cut)."""
        resp = self._request("GET", f"/v2/{repo}/blobs/{digest}", repo, headers={"Range": f"bytes={start}-{end}"})
        assert resp is not None
        return resp.content if resp.status_code == 206 else resp.content[start:end + 1]

    def append_upload(self, repo: str, location: str, data: bytes, offset: int) -> str:
        """PATCH one chunk into an upload session at ``offset``; the session's next Location."""
        headers = {"Content-Type": "application/octet-stream", "Content-Range": f"{offset}-{offset + len(data) - 1}"}
        resp = self._request("PATCH", location, repo, push=True, headers=headers, data=data)
        assert resp is not None
        return self._location(resp, repo)

    def stream_upload(self, repo: str, location: str, chunks: Iterable[bytes]) -> str:
        """PATCH ``chunks`` into an upload session as one streamed body (chunked transfer encoding, as the engine
        pushes); the session's next Location. A body that cannot be sent twice: a registry that asks for
        credentials again meanwhile gets none of it, and :meth:`finish_upload` then fails on the digest."""
        resp = self._request("PATCH", location, repo, push=True, headers={"Content-Type": "application/octet-stream"},
                             data=chunks)
        assert resp is not None
        return self._location(resp, repo)

    def finish_upload(self, repo: str, location: str, digest: str) -> None:
        """Close an upload session: the registry checks the bytes against ``digest``."""
        self._request("PUT", with_query(location, digest=digest), repo, push=True,
                      headers={"Content-Type": "application/octet-stream", "Content-Length": "0"})

    # -- HTTP ------------------------------------------------------------------------
    def url(self, path: str) -> str:
        return f"{self._base()}{path}"

    def _request(self, method: str, path: str, repo: str, missing_ok: bool = False, push: bool = False,
                 headers: Mapping[str, str] | None = None, data: bytes | Iterable[bytes] | None = None,
                 scope: str | None = None) -> requests.Response | None:
        scope = scope or f"repository:{repo}:{'pull,push' if push else 'pull'}"
        resp = self._send(method, path, scope, headers, data)
        if resp.status_code == 401:
            self._answer_challenge(resp, scope, repo)
            resp = self._send(method, path, scope, headers, data)
        if resp.status_code == 404 and missing_ok:
            return None
        if resp.status_code >= 400:
            raise self._error(resp, method, repo, push)
        return resp

    def _send(self, method: str, path: str, scope: str, headers: Mapping[str, str] | None,
              data: bytes | Iterable[bytes] | None) -> requests.Response:
        hdrs = dict(headers or {})
        if scope in self._tokens:
            hdrs["Authorization"] = f"Bearer {self._tokens[scope]}"
        auth = (self.credentials.username, self.credentials.password) if self._basic and self.credentials else None
        try:
            return self.session.request(method, self.url(path), headers=hdrs, data=data, auth=auth,
                                        timeout=self.timeout, verify=self.verify, allow_redirects=True)
        except requests.exceptions.SSLError as exc:
            raise RegistryHTTPError(self._tls_hint(exc)) from None
        except requests.exceptions.RequestException as exc:
            raise RegistryUnreachable(f"cannot reach the registry {self.host}: {_short(exc)}; check that it runs and is reachable") from None

    def _base(self) -> str:
        if self._scheme is None:
            self._scheme = self._probe()
        return f"{self._scheme}://{self.host}"

    def _probe(self) -> str:
        """https, or http where docker allows it (loopback/insecure) and TLS is not spoken."""
        try:
            self.session.get(f"https://{self.host}/v2/", timeout=self.timeout, verify=self.verify)
            return "https"
        except requests.exceptions.SSLError as exc:
            if self.insecure and self._speaks_http():
                return "http"
            raise RegistryHTTPError(self._tls_hint(exc)) from None
        except requests.exceptions.ConnectionError as exc:
            if self.insecure and self._speaks_http():
                return "http"
            raise RegistryUnreachable(f"cannot reach the registry {self.host}: {_short(exc)}; check that it runs and is reachable") from None

    def _speaks_http(self) -> bool:
        try:
            resp = self.session.get(f"http://{self.host}/v2/", timeout=self.timeout)
        except requests.exceptions.RequestException:
            return False
        return "Docker-Distribution-Api-Version" in resp.headers or resp.status_code in (200, 401)

    def _tls_hint(self, exc: Exception) -> str:
        return (f"TLS to the registry {self.host} failed ({_short(exc)}); if it uses a private CA, give it with "
                f"--registry-ca FILE or put it at {CERTS_D}/{self.host}/ca.crt (where docker looks too)")

    # -- authentication --------------------------------------------------------------
    def _answer_challenge(self, resp: requests.Response, scope: str, repo: str) -> None:
        scheme, params = parse_challenge(resp.headers.get("WWW-Authenticate", ""))
        if scheme == "basic":
            self._basic = True
        elif scheme == "bearer":
            self._tokens[scope] = self._token(params, scope, repo)

    def _token(self, params: Mapping[str, str], scope: str, repo: str) -> str:
        if "realm" not in params:
            raise RegistryHTTPError(f"the registry {self.host} asked for a Bearer token but named no realm")
        scopes = scope.split()  # several (a mount: push here, pull there): one scope parameter each
        query = {"service": params.get("service", ""), "scope": scopes[0] if len(scopes) == 1 else scopes}
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        try:
            resp = self.session.get(params["realm"], params=query, auth=auth, timeout=self.timeout, verify=self.verify)
        except requests.exceptions.RequestException as exc:
            raise RegistryUnreachable(f"token service {params['realm']} unreachable: {_short(exc)}") from None
        if resp.status_code >= 400:
            raise self._error(resp, "GET", repo, False)
        body = manifest_document(resp.content, f"token service {params['realm']}")
        token = body.get("token") or body.get("access_token")
        return token if isinstance(token, str) else ""

    def _error(self, resp: requests.Response, method: str, repo: str, push: bool) -> RegistryHTTPError:
        status, answer = resp.status_code, answer_of(resp)
        message = redact(f"HTTP {status} {answer.text()}".strip(), self.credentials)
        # A 401 with no credential sent to a host nobody declared: the only way forward is to declare it (a login
        # or the environment pair would not be sent there), so that is the hint, not docker login.
        undeclared = status == 401 and self.credentials is None and self.anonymous_hint
        hint = registry_hint(f"{self.host}/{repo}", status, message, "push" if push or method in ("PUT", "POST") else "pull",
                             answer.hint() or (self.anonymous_hint if undeclared else None))
        if status == 401:
            hint += f" [credentials used: {self.credentials.source if self.credentials else 'none'}]"
        return RegistryHTTPError(hint, status, transient=answer.transient, said=message, hint=answer.hint() or "")

    def check_upload(self, repo: str) -> None:
        """Start a blob upload and cancel it: raises the registry's own error (its body:
        code, message, detail such as 'no space left on device') when it refuses uploads.
        The docker engine reports a failed push without that body; this asks for it."""
        resp = self._request("POST", f"/v2/{repo}/blobs/uploads/", repo, push=True)
        location = resp.headers.get("Location", "") if resp is not None else ""
        if location:
            path = re.sub(r"^https?://[^/]+", "", location)
            try:
                self._send("DELETE", path, f"repository:{repo}:pull,push", None, None)
            except RegistryHTTPError:
                pass  # an abandoned upload is collected by the registry


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="https://h/service/token",service="harbor-registry"`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


def with_query(path: str, **params: str) -> str:
    """``path`` (which may already carry a query, as upload Locations do) with ``params`` added."""
    return f"{path}{'&' if '?' in path else '?'}{urlencode(params)}"


def _next_link(link: str) -> str | None:
    m = re.search(r"<([^>]+)>\s*;\s*rel=\"?next\"?", link)
    if not m:
        return None
    target = m.group(1)
    return re.sub(r"^https?://[^/]+", "", target)


def fetch_limited(url: str, limit: int, session: requests.Session | None = None, timeout: float = 60.0) -> bytes:
    """The body at ``url`` (an OSV snapshot mirror), streamed and cut at ``limit`` bytes:
    a larger body, an HTTP error or a broken connection is a RegistryError that says so."""
    try:
        with (session or requests.Session()).get(url, stream=True, timeout=timeout) as resp:
            if resp.status_code != 200:
                raise RegistryError(f"GET {url}: HTTP {resp.status_code}; check the mirror's URL (sources.advisories)")
            body = bytearray()
            for chunk in resp.iter_content(1 << 20):
                body += chunk
                if len(body) > limit:
                    raise RegistryError(f"GET {url}: over the {limit}-byte cap of a snapshot; mirror the per-ecosystem all.zip")
            return bytes(body)
    except requests.exceptions.RequestException as exc:
        raise RegistryError(f"GET {url}: {type(exc).__name__}: {exc}; check the mirror's URL and that this host reaches it") from None


__all__ = [  # the names of imagesmith.edges.oci a caller of the client may take from here
    "ACCEPT",
    "DOCKER_LIST",
    "DOCKER_V2",
    "INDEXES",
    "MAX_BLOB",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "TRANSIENT_STATUS",
    "IndexEntry",
    "Manifest",
    "PushedManifest",
    "RegistryAnswer",
    "RegistryHTTPError",
    "RegistryUnreachable",
    "answer_of",
    "entries",
    "index_document",
    "is_loopback",
    "manifest_document",
    "sha256_digest",
]
