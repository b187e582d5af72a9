"""Where registry credentials come from, and which host each one is for.

One :class:`CredentialStore` is built at the start of a run (:func:`load_store`) from what the operator
declared, and every stage asks it by host. A credential applies only to the host it was configured for:

- ``--credentials FILE``: a docker ``config.json``-style file (``{"auths": {"HOST": {"auth": "base64(user:pass)"}}}``)
  or lines ``HOST user:password``; a legacy line ``user:password`` (no host) binds to the declared host only
  (:attr:`Declared.primary`: the release registry, else the staging registry);
- the environment pair IMAGESMITH_REGISTRY_USER/PASSWORD binds to IMAGESMITH_REGISTRY_HOST when set, else to
  the declared host; with neither it applies nowhere;
- the docker config (``$DOCKER_CONFIG/config.json``): its ``auths`` keys and credential helpers, per host, as
  the docker CLI reads them (resolved by the docker SDK, in engine.py);
- Podman's auth files, which ``podman login`` writes in the same format: ``$REGISTRY_AUTH_FILE`` when set (asked
  before the docker config, as Podman asks only it), else ``$XDG_RUNTIME_DIR/containers/auth.json`` (without
  XDG_RUNTIME_DIR, ``/run/containers/<uid>/auth.json``, where a rootful podman login writes) and
  ``~/.config/containers/auth.json``, asked after the docker config. Each is read through the strict loader, asked
  only for a declared host, and a key with a path (``quay.io/org``) counts for its host.

Hosts come from the operator (command line, matrix), never from an artifact: a host read from a file another
job wrote is asked through :meth:`CredentialStore.for_artifact`, which answers None (anonymous) when the
operator declared nothing and refuses (exit 1, naming both hosts and the file) a host other than the one
declared. A host read from an artifact never receives a secret.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from imagesmith.edges.registry import (
    ENV_PASSWORD,
    ENV_USER,
    Credentials,
    docker_config_path,
    from_environment,
    login_command,
    read_docker_config,
    split_login,
)
from imagesmith.errors import Redactor, UserError
from imagesmith.model import grammar
from imagesmith.model.located import printable
from imagesmith.model.ref import DOCKER_HUB, host_of

ENV_HOST = "IMAGESMITH_REGISTRY_HOST"
HUB_ALIASES = frozenset({DOCKER_HUB, "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})
RELEASE_FLAG = "--registry HOST/REPO (or --matrix, whose image.registry declares it)"
STAGE_FLAG = "--stage REGISTRY/REPO"
EXAMPLE = "harbor.example.com robot$ml+ci:SECRET"


def normalize_host(text: str) -> str:
    """The host a credential or a reference names, as docker compares them: the scheme and any path
    dropped (docker config keys such as ``https://index.docker.io/v1/``), lower case, Docker Hub's aliases
    as ``docker.io``; the port kept (``h:5000`` is not ``h``). ValueError when it is not a registry host."""
    host = text.strip()
    for scheme in ("https://", "http://"):
        if host.lower().startswith(scheme):
            host = host[len(scheme):]
    host = host_of(host).lower()
    if not host:
        raise ValueError(f"{printable(text)} names no host")
    if grammar.registry_host(host):
        raise ValueError(f"{printable(text)} is not a registry host; write host or host:port, e.g. harbor.example.com "
                         "or 127.0.0.1:5000")
    return DOCKER_HUB if host in HUB_ALIASES else host


def same_host(a: str, b: str) -> bool:
    """Whether two host names (or a host and a ``host/repo``) name one registry."""
    try:
        return normalize_host(a) == normalize_host(b)
    except ValueError:
        return False


@dataclass(frozen=True)
class Declared:
    """The registry hosts the operator declared for this run (command line or matrix); None: not declared."""

    release: str | None = None
    staging: str | None = None

    def __post_init__(self) -> None:
        for name in ("release", "staging"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _declared_host(value, name))

    @property
    def primary(self) -> str | None:
        """The host a credential without a host binds to: the release registry, else the staging registry."""
        return self.release or self.staging


def _declared_host(value: str, what: str) -> str:
    try:
        return normalize_host(value)
    except ValueError as exc:
        raise UserError(f"the declared {what} registry: {exc}") from None


@dataclass(frozen=True)
class LoginFile:
    """One file of logins an engine's command line wrote (docker's ``config.json``, Podman's ``auth.json``: the
    same format), as read at the start; ``error``: why it could not be read (said when a login is looked up there)."""

    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "docker config"
    error: str = ""
    login: str = "docker"  # the command line that writes it: docker login, podman login

    def find(self, host: str) -> Credentials | None:
        from imagesmith.edges.engine import docker_login  # engine.py is the only docker importer

        if self.error:
            raise UserError(self.error)
        what = self.source if self.login == "podman" else "docker config"
        found = docker_login(host, dict(self.config), what, self.login) if self.config else None
        if found is None:
            return None
        user, secret, helper = found
        return Credentials(user, secret, f"docker credential helper {helper}" if helper else self.source)


@dataclass(frozen=True)
class CredentialStore:
    """Credentials by host, frozen once built. ``entries``: from ``--credentials`` and the environment
    (normalised host -> credentials); ``docker_config``: the docker config as read at the start; ``before`` and
    ``after``: Podman's auth files, asked before it (``$REGISTRY_AUTH_FILE``) and after it (the default ones)."""

    declared: Declared = field(default_factory=Declared)
    entries: Mapping[str, Credentials] = field(default_factory=lambda: MappingProxyType({}))
    docker_config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    docker_config_source: str = "docker config"
    docker_config_error: str = ""  # the docker config could not be read: said when a login is looked up there
    before: tuple[LoginFile, ...] = ()
    after: tuple[LoginFile, ...] = ()

    def for_host(self, host: str) -> Credentials | None:
        """The credentials configured for ``host`` (a host the operator named), first found wins:
        ``--credentials``, the environment pair, ``$REGISTRY_AUTH_FILE``, the docker config, Podman's default
        auth files; None when there are none."""
        try:
            key = normalize_host(host)
        except ValueError as exc:
            raise UserError(f"registry host: {exc}") from None
        found = self.entries.get(key)
        for login in (*self.before, LoginFile(self.docker_config, self.docker_config_source, self.docker_config_error), *self.after):
            found = found or login.find(key)
        return found

    def for_artifact(self, host: str, declared: str | None, where: str, what: str, flag: str) -> Credentials | None:
        """Credentials for a ``host`` read from an artifact (``where``, its ``what``: e.g. "staged repository"):
        the declared host's when they agree, None (anonymous) when nothing was declared; a UserError (nothing
        sent) when the artifact names another host than the one declared with ``flag``."""
        check_artifact_host(host, declared, where, what, flag)
        return self.for_host(host) if declared is not None else None

    def anonymous_hint(self, host: str, declared: str | None, flag: str) -> str:
        """What a 401 says when no credential was sent to ``host``: which flag declares it, or how to log in."""
        if declared is None:
            return (f"no credential was sent to {host}: that host was read from an artifact and "
                    f"none was declared; declare it with {flag} to log in")
        return (f"no login for {declared} was found: give --credentials FILE with a line '{declared} user:password', "
                f"export {ENV_USER}/{ENV_PASSWORD}, or {login_command(declared)}")

    def secrets(self) -> list[str]:
        """Every secret the store holds from --credentials and the environment (for redaction)."""
        return Redactor([s for c in self.entries.values() for s in c.secrets()], min_length=3).secrets


def check_artifact_host(host: str, declared: str | None, where: str, what: str, flag: str) -> None:
    """A UserError when an artifact's ``host`` is not the ``declared`` one (nothing is sent then)."""
    if declared is None or same_host(host, declared):
        return
    shown = host if grammar.registry_host(host) is None else printable(host)  # an artifact's text, escaped
    raise UserError(f"{where} names the {what} host {shown}, but {declared} was declared ({flag}); nothing was "
                    f"sent: publish/verify the artifacts of that registry, or declare {shown} if it is yours")


def load_store(declared: Declared, environ: Mapping[str, str] | None = None, credentials_file: Path | None = None,
               docker_config: Path | Mapping[str, Any] | None = None,
               podman_auth: Sequence[Path] | None = None) -> CredentialStore:
    """The run's store: ``credentials_file`` (``--credentials``), the environment pair, the docker config (a path,
    or a config already read; default ``$DOCKER_CONFIG/config.json``) and Podman's auth files (default
    :func:`podman_auth_files`), each bound to its host."""
    env = os.environ if environ is None else environ
    entries = dict(_from_environment(env, declared))
    entries.update(read_credentials_file(credentials_file, declared.primary) if credentials_file else {})
    where: Path | Mapping[str, Any] = docker_config if docker_config is not None else docker_config_path(env)
    config: Mapping[str, Any] = {} if isinstance(where, Path) else where
    error = ""
    if isinstance(where, Path):
        try:
            config = read_docker_config(where)
        except UserError as exc:  # a run that never looks a login up there must not fail on it
            error = str(exc)
    source = f"docker config {where}" if isinstance(where, Path) else "docker config"
    files = [_podman_file(p) for p in (podman_auth_files(env) if podman_auth is None else podman_auth)]
    explicit = bool(env.get(REGISTRY_AUTH_FILE)) and podman_auth is None
    return CredentialStore(declared, MappingProxyType(entries), MappingProxyType(_case_folded(config)), source, error,
                           before=tuple(files) if explicit else (), after=() if explicit else tuple(files))


def release_store(host: str, environ: Mapping[str, str], credentials_file: Path | None = None,
                  docker_config: Mapping[str, Any] | None = None) -> CredentialStore:
    """The store a release to ``host`` logs in with, ``host`` being the declared release registry (what doctor asks
    the way publish would); ``docker_config``: the docker config as already read (default: read from ``environ``)."""
    return load_store(Declared(release=host), environ, credentials_file, docker_config)


def read_operator_docker_config(environ: Mapping[str, str]) -> Mapping[str, Any]:
    """The docker config the store reads (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``), {} when
    there is none; a UserError when it cannot be read."""
    return read_docker_config(docker_config_path(environ))


REGISTRY_AUTH_FILE = "REGISTRY_AUTH_FILE"


def podman_auth_files(env: Mapping[str, str]) -> list[Path]:
    """Where ``podman login`` keeps logins, as Podman looks them up: ``$REGISTRY_AUTH_FILE`` alone when set; else
    ``$XDG_RUNTIME_DIR/containers/auth.json`` (``/run/containers/<uid>/auth.json`` without XDG_RUNTIME_DIR, in an
    environment that names a HOME) and ``$HOME/.config/containers/auth.json``."""
    if env.get(REGISTRY_AUTH_FILE):
        return [Path(env[REGISTRY_AUTH_FILE])]
    found = []
    if env.get("XDG_RUNTIME_DIR"):
        found.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    elif env.get("HOME"):
        found.append(Path("/run/containers") / str(os.getuid()) / "auth.json")
    if env.get("HOME"):
        found.append(Path(env["HOME"]) / ".config" / "containers" / "auth.json")
    return found


def _podman_file(path: Path) -> LoginFile:
    """One of Podman's auth files through the strict reader (a missing one is empty)."""
    source = f"Podman auth file {path}"
    try:
        config = read_docker_config(path, what=source, login=f"podman login (or set {REGISTRY_AUTH_FILE} to another file)")
    except UserError as exc:
        return LoginFile(source=source, error=str(exc), login="podman")
    return LoginFile(MappingProxyType(_case_folded(config)), source, login="podman")


def _case_folded(config: Mapping[str, Any]) -> dict[str, Any]:
    """The docker config with its per-host keys (``auths``, ``credHelpers``) in lower case, as hosts are asked;
    Docker Hub's keys are left as the docker SDK expects them."""
    out = dict(config)
    for section in ("auths", "credHelpers"):
        if isinstance(config.get(section), Mapping):
            out[section] = {_folded(k): v for k, v in config[section].items()}
    return out


def _folded(key: Any) -> Any:
    try:
        return key if normalize_host(key) == DOCKER_HUB else key.lower()
    except (ValueError, AttributeError):
        return key


def _from_environment(env: Mapping[str, str], declared: Declared) -> dict[str, Credentials]:
    """The environment pair, bound to IMAGESMITH_REGISTRY_HOST, else to the declared host (else nowhere)."""
    found = from_environment(env)
    named = env.get(ENV_HOST, "").strip()
    try:
        host = normalize_host(named) if named else declared.primary
    except ValueError as exc:
        raise UserError(f"{ENV_HOST}: {exc}") from None
    if found is None or host is None:
        return {}
    return {host: Credentials(found.username, found.password, f"environment ({ENV_USER}, for {host})")}


# -- the --credentials file ------------------------------------------------------------------


CREDENTIALS_CAP = 1 << 20  # a file of logins: one line or one auths entry per registry


def read_credentials_file(path: Path, declared: str | None) -> dict[str, Credentials]:
    """``--credentials FILE``: a docker config.json-style ``auths`` object, or lines ``HOST user:password``
    (``#`` comments and blank lines skipped) with at most one legacy line ``user:password`` bound to
    ``declared``. Every problem is a UserError naming the file and the line."""
    from imagesmith.model import loader

    try:
        text = loader.strict_text(loader.read_regular(path, cap=CREDENTIALS_CAP), str(path))
    except loader.LoadError as exc:
        raise UserError(f"credentials file {path}: {exc.why}; it must hold lines HOST user:password "
                        f"(e.g. {EXAMPLE}) or a docker config.json") from None
    if text.lstrip().startswith("{"):
        return _from_auths(path, text)
    return _from_lines(path, text, declared)


def _from_lines(path: Path, text: str, declared: str | None) -> dict[str, Credentials]:
    found: dict[str, Credentials] = {}
    legacy = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"credentials file {path}, line {number}"
        host, secret = _split_line(line)
        if host is None:
            if legacy:
                raise UserError(f"{where}: a second line without a host (line {legacy} has one); "
                                f"write HOST user:password on each line, e.g. {EXAMPLE}")
            legacy = number
            host = _legacy_host(where, declared)
        if host in found:
            raise UserError(f"{where}: a second login for {host}; keep one line per host")
        found[host] = _user_password(where, secret, f"file {path} (line {number}, for {host})")
    if not found:
        raise UserError(f"credentials file {path}: no login in it; write HOST user:password, e.g. {EXAMPLE}")
    return found


def _split_line(line: str) -> tuple[str | None, str]:
    """``HOST user:password`` -> (host, secret); a line whose first word is no host is a legacy ``user:password``."""
    parts = line.split(None, 1)
    if len(parts) == 2:
        try:
            return normalize_host(parts[0]), parts[1].strip()
        except ValueError:
            pass
    return None, line


def _legacy_host(where: str, declared: str | None) -> str:
    if declared is None:
        raise UserError(f"{where}: user:password names no host, so it applies only to the declared release "
                        f"registry, and none is declared; write HOST user:password (e.g. {EXAMPLE}), or declare "
                        f"the host ({RELEASE_FLAG}, or {STAGE_FLAG})")
    return declared


def _user_password(where: str, secret: str, source: str) -> Credentials:
    try:
        user, password = split_login(secret)
    except ValueError as missing:
        raise UserError(f"{where}: expected HOST user:password (e.g. {EXAMPLE}); the login has no {missing}") from None
    return Credentials(user, password, source)


def _from_auths(path: Path, text: str) -> dict[str, Credentials]:
    from imagesmith.model import loader

    try:
        doc = loader.parse_json(text.encode(), "")
    except loader.LoadError as exc:  # its file is ":LINE:COLUMN" where the parser knows the place
        line = exc.file.split(":")[1] if exc.file.count(":") == 2 else "?"
        why = exc.why[len("not JSON ("):-1] if exc.why.startswith("not JSON (") else exc.why
        raise UserError(f"credentials file {path}, line {line}: not valid JSON ({why}); "
                        'write {"auths": {"HOST": {"auth": "base64(user:password)"}}}') from None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict) or not auths:
        raise UserError(f'credentials file {path}, line 1: no "auths" object with a login in it; '
                        'write {"auths": {"HOST": {"auth": "base64(user:password)"}}}')
    found: dict[str, Credentials] = {}
    for key, entry in auths.items():
        where = f"credentials file {path}, line {_line_of(text, key)}, auths / {printable(key)}"
        try:
            host = normalize_host(key)
        except ValueError as exc:
            raise UserError(f"{where}: {exc}") from None
        if host in found:
            raise UserError(f"{where}: a second login for {host}; keep one entry per host")
        found[host] = _auth_entry(where, entry, f"file {path} (auths / {host})")
    return found


def _auth_entry(where: str, entry: Any, source: str) -> Credentials:
    if not isinstance(entry, dict):
        raise UserError(f'{where}: expected an object such as {{"auth": "base64(user:password)"}}')
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            secret = base64.b64decode(entry["auth"], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise UserError(f"{where} / auth: not base64 of user:password; write base64 of user:password") from None
        return _user_password(f"{where} / auth", secret, source)
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(password, str):
        return _user_password(where, f"{user}:{password}", source)
    raise UserError(f'{where}: no "auth" (base64 of user:password) nor "username" and "password"; '
                    "a credential helper belongs in the docker config, not in --credentials")


def _line_of(text: str, key: str) -> int:
    """The line where ``"key"`` first appears in ``text`` (1 when it cannot be found)."""
    at = text.find(json.dumps(key))
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


__all__ = [
    "ENV_HOST",
    "ENV_PASSWORD",
    "ENV_USER",
    "CredentialStore",
    "Declared",
    "LoginFile",
    "check_artifact_host",
    "load_store",
    "normalize_host",
    "podman_auth_files",
    "read_credentials_file",
    "read_operator_docker_config",
    "release_store",
    "same_host",
]
