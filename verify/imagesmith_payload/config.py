"""The payload's configuration: JSON from the host, then CLI flags on top.

Validated once into frozen records; a bad value is a ConfigError naming the
key path (exit code 2).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, TypeVar

from .judge import CudaRelease

T = TypeVar("T")

SCHEMA = "imagesmith.verify-config/1"
TIERS = ("quick", "standard", "soak")
CORE_VERSIONS = ("torch", "cuda", "cudnn", "nccl", "python", "os")
EXPECT_PATHS = ("cuda_libs",)  # where torch's CUDA libraries must load from (a folder)
THRESHOLD_KEYS = ("baseline", "fail_fraction", "warn_fraction")
RELEASE_KEYS = ("release", "cudart", "driver")


class ConfigError(ValueError):
    """Bad configuration or usage; the message names the key."""


@dataclass(frozen=True)
class Expected:
    torch: Optional[str] = None
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    nccl: Optional[str] = None
    python: Optional[str] = None
    os: Optional[str] = None
    packages: Mapping[str, str] = field(default_factory=dict)
    cuda_libs: Optional[str] = None


@dataclass(frozen=True)
class ImageConfig:
    """What the image runs when started normally (docker inspect .Config)."""

    user: str = ""
    entrypoint: Tuple[str, ...] = ()
    cmd: Tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    exposed_ports: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    tier: str = "quick"
    require_gpu: bool = False
    expect_gpus: Optional[int] = None
    gpus: str = "auto"  # what was asked: all | none | 0,1 (imagesmith always says); auto: whatever is visible
    allow_cpu: bool = False  # gpus all with none visible: CPU mode instead of a failure
    allow_shared_gpu: bool = False  # judge throughput on a GPU another process uses (the tenant's share)
    gpu_unavailable: Optional[str] = None  # the host's reason it could not attach GPUs
    expected: Expected = field(default_factory=Expected)
    toolkit_driver: Optional[str] = None
    min_driver: Optional[str] = None
    cuda_releases: Tuple[CudaRelease, ...] = ()
    layers: Tuple[str, ...] = ()
    expect_non_root: Optional[bool] = None
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    soak_minutes: float = 30.0
    leak_inject_mib: float = 0.0
    burn_seconds: float = 60.0
    contention_processes: int = 4
    collective_timeout_s: float = 180.0
    only: Tuple[str, ...] = ()
    skip: Tuple[str, ...] = ()
    nonce: Optional[str] = None  # the host's run identity: the report must echo it
    checks: Optional[Tuple[str, ...]] = None  # exactly these checks (the host's request), in this order
    image: Optional[ImageConfig] = None  # the image's configuration as the engine reports it


# ----------------------------------------------------------------- validators
def _typed(kind: type, label: str) -> Callable[[str, Any], Any]:
    def check(path: str, value: Any) -> Any:
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            hint = " (quote version numbers: \"3.10\", not 3.10)" if label == "a string" else ""
            raise ConfigError(f"config key {path!r}: expected {label}, got {value!r}{hint}")
        return value
    return check


_str, _bool, _int, _num = (_typed(str, "a string"), _typed(bool, "true or false"),
                           _typed(int, "an integer"), _typed(float, "a number"))


def _optional(inner: Callable[[str, Any], T]) -> Callable[[str, Any], Optional[T]]:
    return lambda path, value: None if value is None else inner(path, value)


def _tier(path: str, value: Any) -> str:
    if value not in TIERS:
        raise ConfigError(f"config key {path!r}: expected one of {', '.join(TIERS)}, got {value!r}")
    return str(value)


def _gpus(path: str, value: Any) -> str:
    """all | none | auto | a comma-separated list of GPU indexes or UUIDs."""
    text = _str(path, value).strip()
    items = [g.strip() for g in text.split(",")]
    if text in ("all", "none", "auto") or (text and all(re.fullmatch(r"\d+|(GPU|MIG)-[A-Za-z0-9-]+", g) for g in items)):
        return text if text in ("all", "none", "auto") else ",".join(items)
    raise ConfigError(f"config key {path!r}: expected all, none, auto or a list such as 0,1, got {value!r}")


def _positive(inner: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    def check(path: str, value: Any) -> Any:
        value = inner(path, value)
        if value is not None and value < 0:
            raise ConfigError(f"config key {path!r}: must be >= 0, got {value!r}")
        return value
    return check


def _object(path: str, value: Any) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"config key {path!r}: expected an object, got {value!r}")
    return value


def _unknown(path: str, data: Mapping[str, Any], known: Tuple[str, ...]) -> None:
    extra = sorted(set(data) - set(known))
    if extra:
        where = f"{path}." if path else ""
        raise ConfigError(f"config key {where + extra[0]!r}: unknown key; known: {', '.join(known)}")


# ------------------------------------------------------------------- sections
_TOP: Dict[str, Callable[[str, Any], Any]] = {
    "tier": _tier,
    "require_gpu": _bool,
    "expect_gpus": _optional(_positive(_int)),
    "gpus": _gpus,
    "allow_cpu": _bool,
    "allow_shared_gpu": _bool,
    "gpu_unavailable": _optional(_str),
    "soak_minutes": _positive(_num),
    "leak_inject_mib": _positive(_num),
    "burn_seconds": _positive(_num),
    "contention_processes": _positive(_int),
    "collective_timeout_s": _positive(_num),
}
_SECTIONS = ("schema", "expected", "driver", "layers", "security", "thresholds", "nonce", "checks", "image")


def parse_config(data: Any) -> Config:
    """Validate a config object (parsed JSON) into a Config."""
    data = _object("", data) if data is not None else {}
    _unknown("", data, tuple(_TOP) + _SECTIONS)
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ConfigError(f"config key 'schema': expected {SCHEMA!r}, got {schema!r}")
    values = {k: check(k, data[k]) for k, check in _TOP.items() if k in data}
    values.update(_driver(data.get("driver") or {}))
    values["expected"] = _expected(data.get("expected") or {})
    values["layers"] = _layers(data.get("layers") or [])
    values["expect_non_root"] = _security(data.get("security") or {})
    values["thresholds"] = _thresholds(data.get("thresholds") or {})
    values["nonce"] = _optional(_str)("nonce", data.get("nonce"))
    values["checks"] = None if data.get("checks") is None else _names("checks", data["checks"])
    values["image"] = None if data.get("image") is None else _image(data["image"])
    return Config(**values)


def _expected(data: Any) -> Expected:
    data = _object("expected", data)
    _unknown("expected", data, CORE_VERSIONS + EXPECT_PATHS + ("packages",))
    core = {k: _optional(_str)(f"expected.{k}", data.get(k)) for k in CORE_VERSIONS + EXPECT_PATHS}
    packages = _object("expected.packages", data.get("packages") or {})
    pkgs = {name: _str(f"expected.packages.{name}", v) for name, v in packages.items()}
    return Expected(packages=pkgs, **core)


def _driver(data: Any) -> Dict[str, Any]:
    data = _object("driver", data)
    _unknown("driver", data, ("toolkit_driver", "min_driver", "releases"))
    out: Dict[str, Any] = {k: _optional(_str)(f"driver.{k}", data.get(k))
                           for k in ("toolkit_driver", "min_driver")}
    releases = data.get("releases") or []
    if not isinstance(releases, list):
        raise ConfigError(f"config key 'driver.releases': expected a list, got {releases!r}")
    out["cuda_releases"] = tuple(_release(f"driver.releases[{i}]", r) for i, r in enumerate(releases))
    return out


def _release(path: str, data: Any) -> CudaRelease:
    data = _object(path, data)
    _unknown(path, data, RELEASE_KEYS + ("min_driver",))
    missing = [k for k in RELEASE_KEYS if k not in data]
    if missing:
        raise ConfigError(f"config key '{path}.{missing[0]}': missing; a release needs {', '.join(RELEASE_KEYS)}")
    values = {k: _str(f"{path}.{k}", data.get(k)) for k in RELEASE_KEYS}
    return CudaRelease(min_driver=_optional(_str)(f"{path}.min_driver", data.get("min_driver")), **values)


def _names(path: str, data: Any) -> Tuple[str, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"config key {path!r}: expected a list of names, got {data!r}")
    return tuple(_str(f"{path}[{i}]", v) for i, v in enumerate(data))


def _layers(data: Any) -> Tuple[str, ...]:
    return _names("layers", data)


_IMAGE_KEYS = ("user", "entrypoint", "cmd", "env", "exposed_ports")


def _image(data: Any) -> ImageConfig:
    data = _object("image", data)
    _unknown("image", data, _IMAGE_KEYS)
    env = _object("image.env", data.get("env") or {})
    return ImageConfig(
        user=_optional(_str)("image.user", data.get("user")) or "",
        entrypoint=_names("image.entrypoint", data.get("entrypoint") or []),
        cmd=_names("image.cmd", data.get("cmd") or []),
        env={str(k): _str(f"image.env.{k}", v) for k, v in env.items()},
        exposed_ports=_names("image.exposed_ports", data.get("exposed_ports") or []))


def _security(data: Any) -> Optional[bool]:
    data = _object("security", data)
    _unknown("security", data, ("expect_non_root",))
    return _optional(_bool)("security.expect_non_root", data.get("expect_non_root"))


def _thresholds(data: Any) -> Dict[str, Dict[str, float]]:
    data = _object("thresholds", data)
    out = {}
    for check_id, entry in data.items():
        path = f"thresholds.{check_id}"
        entry = _object(path, entry)
        _unknown(path, entry, THRESHOLD_KEYS)
        out[check_id] = {k: _positive(_num)(f"{path}.{k}", v) for k, v in entry.items()}
    return out


# ------------------------------------------------------------------------ CLI
def load_config_file(path: Optional[str]) -> Config:
    if not path:
        return Config()
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"--config {path}: not valid JSON: {exc}") from exc
    return parse_config(data)


def with_overrides(config: Config, **overrides: Any) -> Config:
    """CLI flags on top of the file; None means 'not given'."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(config, **given)


def with_expectations(config: Config, expect: Mapping[str, str]) -> Config:
    """--expect torch=..,cuda=..,torchvision=..: core keys and packages."""
    known = CORE_VERSIONS + EXPECT_PATHS
    core = {k: v for k, v in expect.items() if k in known}
    packages = dict(config.expected.packages)
    packages.update({k: v for k, v in expect.items() if k not in known})
    expected = dataclasses.replace(config.expected, packages=packages, **core)
    return dataclasses.replace(config, expected=expected)
