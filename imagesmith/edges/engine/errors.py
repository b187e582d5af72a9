"""Docker's errors as ours: every docker SDK, requests and urllib3 failure becomes an EngineError (or a registry's
RegistryHTTPError for a push) whose message says what was wrong and what to do; a login read from the docker config
with the SDK's own rules."""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from typing import Any, Iterator, Mapping

import docker
import docker.auth
import docker.errors
import requests
import urllib3.exceptions

from imagesmith.edges.registry import ENV_PASSWORD, ENV_USER, RegistryHTTPError, RegistryUnreachable, registry_hint, registry_host
from imagesmith.errors import (
    CommandNotFound,
    EngineConnectionLost,
    EngineError,
    GpuRuntimeMissing,
    ImagesmithError,
    UserError,
    one_line,
)
from imagesmith.model import engines
from imagesmith.model.engines import EngineKind

SOCKET_REASONS = re.compile(r"Connection refused|No such file or directory|Permission denied|Name or service not known"
                            r"|Temporary failure in name resolution|timed out|Connection reset by peer|Network is unreachable")


def socket_reason(exc: BaseException) -> str:
    found = SOCKET_REASONS.search(str(exc))
    return found.group(0) if found else said(exc)


def unreachable(docker_host: str, why: str) -> str:
    """Why the engine is not there and what to do, naming the DOCKER_HOST that was tried (Podman's socket: how to
    start Podman's Docker API there)."""
    if engines.guessed(docker_host).podman:
        return f"cannot reach the Podman engine at DOCKER_HOST={docker_host} ({why}); {engines.start_fix(docker_host)}"
    if docker_host:
        return (f"cannot reach the Docker engine at DOCKER_HOST={docker_host} ({why}); start the engine there, "
                "fix DOCKER_HOST, or unset it to use the local engine (unix:///var/run/docker.sock)")
    return (f"cannot reach the Docker engine at unix:///var/run/docker.sock ({why}); start it "
            "(sudo systemctl start docker, or dockerd &) or set DOCKER_HOST")


# What the SDK lets through: its own errors and its transport's (requests, and urllib3 while a stream is read).
FOREIGN = (docker.errors.DockerException, requests.exceptions.RequestException, urllib3.exceptions.HTTPError)


CONNECTION_LOST = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.ChunkedEncodingError,
                   urllib3.exceptions.ProtocolError, urllib3.exceptions.TimeoutError)


NO_GPU_RUNTIME = "could not select device driver"  # --gpus on an engine without the NVIDIA runtime


NO_CDI_DEVICE = "unresolvable CDI devices"  # Podman: a CDI name no spec of its host offers


COMMAND_NOT_FOUND = re.compile(r'exec: "([^"]+)": (?:executable file not found|no such file or directory)', re.I)


# The status a registry answered, as the engine quotes it in a push error (its push stream has no code).
HTTP_STATUS = re.compile(r"(?:HTTP status:?|HTTP)\s+(\d{3})\b", re.I)


STATUS_WORDS = (("unauthorized", 401), ("authentication required", 401), ("no basic auth credentials", 401),
                ("denied", 403), ("forbidden", 403), ("not found", 404),
                ("toomanyrequests", 429), ("too many requests", 429), ("internal server error", 500),
                ("bad gateway", 502), ("service unavailable", 503), ("gateway time", 504))


# The engine's words for a registry that did not answer at all (refused, reset, timed out).
NO_ANSWER = re.compile(r"connection refused|connection reset|broken pipe|\bEOF\b|i/o timeout|timed? ?out|TLS handshake timeout"
                       r"|temporarily unavailable", re.I)


def said(exc: BaseException) -> str:
    """What the engine (or the SDK) said, on one line: an API error's explanation (the daemon's own
    words, without the SDK's "500 Server Error for http+docker://..."), else the exception's cause."""
    return one_line(_words(exc), type(exc).__name__)


def _words(exc: BaseException) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def engine_error(exc: BaseException, doing: str, kind: type[EngineError] = EngineError,
                 engine: EngineKind | None = None) -> EngineError:
    """A docker SDK exception (or one of requests, its transport) as one of ours: ``doing`` and the
    engine's words. The cases a caller must tell apart are types: the engine stopped answering
    (:class:`EngineConnectionLost`), no GPUs to give (:class:`GpuRuntimeMissing`: no runtime, or a CDI name
    no spec offers), a command not in the image (:class:`CommandNotFound`); ``kind`` for the rest
    (:class:`ContainerRefused` when a container was being created or started). ``engine`` (Docker or Podman)
    picks the fix said: that engine's own."""
    words, answer = said(exc), _words(exc) if isinstance(exc, docker.errors.APIError) else ""
    engine = engine or engines.guessed(os.environ.get("DOCKER_HOST", ""))  # not asked yet: the one DOCKER_HOST names
    name, cli = engine.name, engine.cli
    if isinstance(exc, CONNECTION_LOST):
        return EngineConnectionLost(f"{doing}: the {name} engine stopped answering ({socket_reason(exc)}); "
                                    f"check that it runs ({cli} info), then try again")
    if NO_GPU_RUNTIME in answer:
        fix = engine.gpu_fix if engine.podman else GpuRuntimeMissing.fix
        return GpuRuntimeMissing(f"{doing}: {words} ({fix})", fix=fix)
    if NO_CDI_DEVICE in answer:  # Podman: a CDI name no spec of its host offers
        fix = engines.FIX_PODMAN_GPU
        return GpuRuntimeMissing(f"{doing}: {words} ({fix})", fix=fix)
    missing = COMMAND_NOT_FOUND.search(answer)
    if missing:
        return CommandNotFound(f"{doing}: {words}", missing.group(1))
    hint = engines.rlimit_hint(answer, engine) or engines.conmon_hint(answer, engine, os.environ.get("DOCKER_HOST", ""))
    if hint:  # the engine's words are long and end in what the hint quotes
        return kind(f"{doing}: {hint}")
    return kind(f"{doing}: {words}")


@contextlib.contextmanager
def docker_errors(doing: str, kind: type[EngineError] = EngineError, engine: EngineKind | None = None) -> Iterator[None]:
    """Inside: every docker SDK or requests exception leaves as :func:`engine_error`'s (ours pass)."""
    try:
        yield
    except ImagesmithError:
        raise
    except FOREIGN as exc:
        raise engine_error(exc, doing, kind, engine) from None


def status_of(message: str, detail: Mapping[str, Any]) -> int:
    """The HTTP status behind the engine's words: the error detail's code, a quoted status, else the words."""
    if "code" in detail:
        return int(detail["code"])
    quoted = HTTP_STATUS.search(message)
    if quoted:
        return int(quoted.group(1))
    lowered = message.lower()
    return next((code for needle, code in STATUS_WORDS if needle in lowered), 0)


def push_error(ref: str, message: str, detail: Mapping[str, Any], engine: EngineKind | None = None) -> RegistryHTTPError:
    """What the engine said about a failed push as a :class:`RegistryHTTPError` with the HTTP status
    it quotes (its ``transient`` follows the status), or :class:`RegistryUnreachable` when the
    registry did not answer at all; a 401's hint names ``engine``'s own login."""
    status = status_of(message, detail) or None
    hint = registry_hint(ref, status, message, "push", login=engine.login_fix(registry_host(ref)) if engine else None)
    if status is None and NO_ANSWER.search(message):
        return RegistryUnreachable(hint, said=message.strip())
    return RegistryHTTPError(hint, status, said=message.strip())


def docker_login(host: str, config: Mapping[str, Any], what: str = "docker config",
                 cli: str = "docker") -> tuple[str, str, str | None] | None:
    """(user, secret, credential helper or None) for ``host`` from a docker config, resolved as the
    docker SDK resolves it: ``credHelpers``/``credsStore`` (running ``docker-credential-<name>``)
    before ``auths``; Docker Hub's aliases understood. An identity token (an OAuth refresh token)
    cannot log in here and counts as none."""
    if not config:
        return None  # the SDK would read the default config file instead
    try:
        with warnings.catch_warnings():  # the SDK warns when a helper is missing; the error below says it
            warnings.simplefilter("ignore")
            auth = docker.auth.load_config(config_dict=json.loads(json.dumps(config)))
            found = auth.resolve_authconfig(host)
            helper = auth.get_credential_store(host) if found and "Username" in found else None
    except (docker.errors.DockerException, ValueError, TypeError) as exc:
        raise UserError(f"{what}: the login for {host} cannot be read ({said(exc)}); "
                        f"run {cli} login {host} again (install its credential helper if the config names one), "
                        f"or set {ENV_USER}/{ENV_PASSWORD}") from None
    user = (found or {}).get("Username") or (found or {}).get("username")
    secret = (found or {}).get("Password") or (found or {}).get("password")
    return (str(user), str(secret), helper) if user and secret else None
