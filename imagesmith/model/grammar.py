"""The grammar of every matrix value that reaches a generated file (pure).

Each check takes a value and returns ``None`` when it is acceptable, else one
sentence: why not, and what to write instead. ``matrix.sections`` calls them where
values are loaded, so a value is judged against what it *becomes* (a Linux
user name, a Debian package, a pip requirement, a URL, an image reference,
an environment variable name, an OCI label key) before anything is rendered.
Control characters never get this far: the YAML loader refuses them.

Sources of the rules:
- image references: github.com/distribution/reference ``regexp.go``, as kept
  in Python by ``docker-image-py`` (``docker_image.reference``);
- pip requirements: PEP 508 through ``packaging.requirements``;
- Debian package names and versions: Debian Policy 5.6.1 and 5.6.12;
- user names: shadow-utils' default ``NAME_REGEX`` (``useradd``), 32 characters;
- environment names: POSIX.1-2017 XBD 8.1 (portable names);
- label keys: Docker's label guidance and the OCI image-spec annotation rules
  (reverse-DNS, lowercase); ``io.imagesmith.*`` and the OCI keys imagesmith
  sets itself are reserved.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Callable, Optional

from docker_image import reference
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from imagesmith.errors import UserError
from imagesmith.model.located import printable
from imagesmith.model.ref import ImageRef

Check = Callable[[str], Optional[str]]

USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
DEBIAN_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
DEBIAN_VERSION = re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LABEL_KEY = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
# RFC 3986 characters less those a shell or a Dockerfile gives a meaning to ('"$`()!*;\ <>{}|^).
URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@&+,=%]+")
NO_PROXY = re.compile(r"[A-Za-z0-9.:/*_\[\]-]+(?:,[A-Za-z0-9.:/*_\[\]-]+)*")
RESERVED_LABELS = ("org.opencontainers.image.title", "org.opencontainers.image.description",
                   "org.opencontainers.image.base.name")
MAX_TEXT = 4096  # an ENV or LABEL value
GPU_LIST = re.compile(r"^(all|none|(\d+|(GPU|MIG)-[A-Za-z0-9-]+)(,(\d+|(GPU|MIG)-[A-Za-z0-9-]+))*)$")  # verify.gpus, --gpus: docker's device list


def user_name(value: str) -> str | None:
    if value == "root":
        return "the images' default user must not be root; write a name such as ml"
    if not USER.fullmatch(value):
        return (f"{printable(value)} is not a Linux user name; write lowercase letters, digits, _ and -, "
                "starting with a letter or _, at most 32 characters (e.g. ml)")
    return None


def debian_package(value: str) -> str | None:
    name, eq, version = value.partition("=")
    if not DEBIAN_NAME.fullmatch(name):
        return (f"{printable(value)} is not a Debian package name; write lowercase letters, digits, + - . "
                "(at least two characters), optionally =VERSION, e.g. curl or curl=7.88.1-10+deb12u8")
    if eq and not DEBIAN_VERSION.fullmatch(version):
        return f"{printable(version)} is not a Debian version; write it as apt shows it, e.g. {name}=7.88.1-10+deb12u8"
    return None


def pip_requirement(value: str) -> str | None:
    """A requirement specifier as pip takes it in a package list: no options, no URL."""
    if value.startswith("-"):
        return (f"{printable(value)} is a pip option, not a package; package sources go under sources:, "
                "and other options are not supported")
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        return f"{printable(value)} is not a pip requirement ({str(exc).splitlines()[0]}); write name==version, e.g. numpy==2.1.3"
    if req.url:
        return (f"{printable(value)} installs from a URL; put wheel folders or indexes under sources: "
                f"and write {req.name}==VERSION here")
    return None


def is_pinned(value: str) -> bool:
    """``name==X.Y.Z`` (or ``===``): one exact version, no wildcard."""
    try:
        specs = list(Requirement(value).specifier)
    except InvalidRequirement:
        return False
    return len(specs) == 1 and specs[0].operator in ("==", "===") and not specs[0].version.endswith(".*")


def python_version(value: str) -> str | None:
    try:
        Version(value)
    except InvalidVersion:
        return f"{printable(value)} is not a version; write e.g. 4.4.10"
    return None if re.fullmatch(r"[0-9A-Za-z.+!-]+", value) else f"{printable(value)} is not a version; write e.g. 4.4.10"


def host(value: str) -> str | None:
    """A host name or IP address (as pip's --trusted-host, Jupyter's ip or a credential's host)."""
    name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        return f"{printable(value)}: the port must be a number from 1 to 65535"
    try:
        ipaddress.ip_address(name.strip("[]"))
        return None
    except ValueError:
        pass
    if HOSTNAME.fullmatch(name):
        return None
    return f"{printable(value)} is not a host name or IP address; write e.g. pypi.example.com or 10.0.0.5:8080"


def listen_address(value: str) -> str | None:
    """An address a server binds: an IP address or a host name, without a port."""
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if HOSTNAME.fullmatch(value):
        return None
    return f"{printable(value)} is not an IP address or host name to listen on; write e.g. 0.0.0.0 or 127.0.0.1"


def url(value: str, schemes: tuple[str, ...] = ("https", "http", "file")) -> str | None:
    """An index or link URL: a supported scheme, a host, no credentials, no characters a shell reads."""
    if not URL_CHARS.fullmatch(value):
        bad = sorted({c for c in value if not URL_CHARS.fullmatch(c)})
        return (f"{printable(value)} holds {', '.join(map(repr, bad))}, which a URL does not need; "
                "percent-encode it (%20 for a space)")
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        return f"{printable(value)} is not a URL (its [IPv6] host is cut); write e.g. https://[fd00::1]:8443/simple"
    try:
        parts.port  # noqa: B018 (raises for a bad port)
    except ValueError:
        return f"{printable(value)}: the port must be a number from 1 to 65535"
    if parts.scheme not in schemes:
        return f"{printable(value)}: the scheme must be one of {', '.join(s + '://' for s in schemes)}"
    if parts.scheme == "file":
        return None if parts.path.startswith("/") and not parts.netloc else f"{printable(value)}: write file:///absolute/path"
    if "@" in parts.netloc:
        return (f"{printable(value)} carries credentials, which would reach the build's history and logs; "
                "remove them and use sources.credentials (host, username_env, password_env)")
    return host(parts.hostname or "") if parts.hostname else f"{printable(value)} has no host; write e.g. https://pypi.example.com/simple"


def proxy_url(value: str) -> str | None:
    return url(value, ("http", "https", "socks5", "socks5h"))


def no_proxy(value: str) -> str | None:
    if NO_PROXY.fullmatch(value):
        return None
    return f"{printable(value)} is not a no_proxy list; write hosts, domains or CIDRs separated by commas, e.g. localhost,.corp.example.com"


def image_reference(value: str) -> str | None:
    """A Docker image reference (name[:tag][@digest]) as distribution/reference parses it."""
    try:
        ImageRef.parse(value)
    except UserError as exc:
        return str(exc)
    return None if value == value.strip() else f"{printable(value)} has surrounding spaces; remove them"


def registry_host(value: str) -> str | None:
    if reference.ImageRegexps.ANCHORED_DOMAIN_REGEXP.fullmatch(value) and value == value.strip():
        return None
    return f"{printable(value)} is not a registry host; write host or host:port, e.g. harbor.example.com or 127.0.0.1:5000"


def repository(value: str) -> str | None:
    if reference.ImageRegexps.REMOTE_NAME_REGEXP.fullmatch(value) and value == value.strip():
        return None
    return f"{value!r} is not a valid image repository (lowercase letters, digits, . _ - /)"


def env_name(value: str) -> str | None:
    if ENV_NAME.fullmatch(value):
        return None
    return f"{printable(value)} is not an environment variable name; write letters, digits and _, not starting with a digit (e.g. HF_HOME)"


def label_key(value: str) -> str | None:
    if value.startswith("io.imagesmith.") or value in RESERVED_LABELS:
        return f"{printable(value)} is set by imagesmith itself; choose another key (e.g. com.example.team)"
    if LABEL_KEY.fullmatch(value) and len(value) <= 128:
        return None
    return (f"{printable(value)} is not a label key; write lowercase reverse-DNS words joined by . - or _ "
            "(e.g. org.opencontainers.image.vendor or com.example.team)")


def text(value: str) -> str | None:
    """Free text (an ENV or LABEL value): any printable characters, bounded."""
    if len(value) > MAX_TEXT:
        return f"is {len(value):,} characters; at most {MAX_TEXT:,}"
    return None
