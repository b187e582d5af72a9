"""``imagesmith doctor``: can this host build and verify the matrix?

Two halves, so that every check is a pure function with table tests:

* ``gather(host)`` asks the host once, through one seam object (``Host``:
  engine version and info, NVML inventory, disk usage, docker config, CDI
  specs, PATH, environment) and returns frozen ``Facts``;
* the checks in ``CHECKS`` read ``Facts`` and ``Needs`` (what the matrix asks
  for: CUDA versions, registry, planned image sizes) and each returns results
  ``{id, status: ok|warn|fail, detail, fix}``, every problem with the command
  that fixes it.

Ready means no ``fail``: warnings (no GPU, so verification runs in CPU mode;
no registry login, so a release could not push) do not stop building.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from imagesmith.edges import credentials
from imagesmith.edges import harbor as harbor_api
from imagesmith.edges.hostinfo import HostInfo, inventory
from imagesmith.edges.protocols import EngineProtocol
from imagesmith.edges.registry import ENV_PASSWORD, ENV_USER, is_loopback
from imagesmith.errors import UserError
from imagesmith.model import cdi, compat, engines, gpupath, schemas
from imagesmith.model.engines import EngineKind
from imagesmith.model.gpupath import EngineGpu, Lookup
from imagesmith.model.ref import DOCKER_HUB
from imagesmith.model.versions import version_key
from imagesmith.stages.tools.doctor_release import ReleaseFacts, probe_release

SCHEMA = schemas.DOCTOR
OK, WARN, FAIL = "ok", "warn", "fail"
GB = 10**9
MIN_API = "1.40"  # Docker 19.03: the first engine that takes device requests (--gpus)
MIN_FREE_BYTES = 10 * GB  # without a matrix: room for one small image
DISK_HEADROOM = 1.5  # builds need room beyond the final images (intermediate layers, pip caches)
DEFAULT_CDI_DIRS = cdi.DEFAULT_DIRS
ALL_GPUS = cdi.qualified_names("all")  # what doctor asks the specs for: nvidia.com/gpu=all
GPU_HOOK = "nvidia-container-runtime-hook"  # what docker --gpus runs (nvidia-container-toolkit)
LOGIN_FIX = f"{{login}}   (or export {ENV_USER}=... {ENV_PASSWORD}=..., e.g. a Harbor robot account)"

# What each layer adds to the engine's disk, in GB: the one table doctor estimates with.
LAYER_GB: Mapping[str, float] = {"base:cuda": 6.0, "base:cpu": 1.3, "cv": 0.6, "nlp": 0.3, "project": 0.1}
OTHER_LAYER_GB = 0.5  # a layer of the user's own

# The commands that fix things (one place, so tests and docs agree).
FIX_DOCKER_GROUP = "sudo usermod -aG docker $USER && newgrp docker"
FIX_PODMAN_SOCKET = ("use your own Podman: systemctl --user start podman.socket && "
                     "export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock")
FIX_UPGRADE_DOCKER = "upgrade Docker to 19.03 or newer: sudo apt-get install -y docker.io (or docker-ce from Docker's repository)"
FIX_TOOLKIT = engines.FIX_DOCKER_TOOLKIT
FIX_CDI_SPEC = f"{gpupath.FIX_CDI_SPEC}   (or install the NVIDIA container toolkit: {FIX_TOOLKIT})"
FIX_DRIVER = "install the NVIDIA driver: sudo apt-get install -y cuda-drivers (NVIDIA's CUDA apt repository), then reboot"


# =====================================================================  records


@dataclass(frozen=True)
class Result:
    id: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Disk:
    path: str
    total: int
    free: int


@dataclass(frozen=True)
class Facts:
    """What doctor saw on this host, gathered once."""

    engine_version: Mapping[str, Any] | None = None
    engine_info: Mapping[str, Any] | None = None
    engine_error: str | None = None
    gpus: HostInfo = HostInfo(None, None, (), "NVML not asked")  # noqa: RUF009 (a frozen dataclass: one shared value is safe)
    cdi: Lookup = field(default_factory=Lookup)  # the CDI specs of this host against nvidia.com/gpu=all (read through the strict loader)
    cdi_error: str | None = None  # why a spec was refused
    disk: Disk | None = None
    disk_error: str | None = None
    docker_config: Mapping[str, Any] = field(default_factory=dict)
    docker_config_error: str | None = None
    gpu_hook: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    release: ReleaseFacts | None = None  # asked only with doctor --release and a matrix naming a registry

    @property
    def engine_ok(self) -> bool:
        return self.engine_info is not None

    @property
    def engine(self) -> EngineKind:
        """The engine as it describes itself; unreachable: the one DOCKER_HOST most likely names."""
        if self.engine_info is None:
            return engines.guessed(self.environ.get("DOCKER_HOST", ""))
        return EngineKind.of(self.engine_info, self.engine_version)

    def login_fix(self, host: str) -> str:
        return LOGIN_FIX.format(login=self.engine.login_fix(host))


@dataclass(frozen=True)
class Needs:
    """What the matrix asks of the host (empty when no matrix was given)."""

    matrix: str | None = None
    problem: str | None = None  # why the matrix could not be used
    cuda: tuple[str, ...] = ()
    registry: str | None = None
    planned_bytes: int = 0
    targets: int = 0
    publish: bool = False  # this host also pushes (doctor --release): a missing registry login fails
    repository: str | None = None  # <project>/<repository> a release pushes to
    floating: tuple[str, ...] = ()  # the floating tags the plan moves
    credentials_file: Path | None = None  # --credentials: the registry login a release would use
    vulnerability_threshold: str | None = None  # vulnerabilities.threshold when the matrix names advisories (else None)
    vulnerability_allow: tuple[str, ...] = ()  # the ids the matrix allows


# =====================================================================  the seam


class Host(Protocol):
    """Everything doctor asks of the machine. Tests pass a double."""

    environ: Mapping[str, str]

    def engine_version(self) -> Mapping[str, Any]: ...  # raises UserError when unreachable
    def engine_info(self) -> Mapping[str, Any]: ...
    def nvml(self) -> HostInfo: ...
    def disk_usage(self, path: str) -> Disk: ...  # raises OSError
    def docker_config(self) -> Mapping[str, Any]: ...  # raises OSError / ValueError
    def cdi_lookup(self, names: tuple[str, ...], dirs: Sequence[str]) -> Lookup: ...  # raises UserError for a hostile spec
    def which(self, program: str) -> str | None: ...


class SystemHost:
    """The real machine: the Docker engine, NVML, the file system."""

    def __init__(self, engine: EngineProtocol | None = None, environ: Mapping[str, str] | None = None) -> None:
        self._engine = engine
        self.environ = os.environ if environ is None else environ

    @property
    def engine(self) -> Any:
        if self._engine is None:
            from imagesmith.edges.runcontext import docker_engine  # docker is imported only when doctor runs

            self._engine = docker_engine(timeout=10)
        return self._engine

    def engine_version(self) -> Mapping[str, Any]:
        return dict(self.engine.version())

    def engine_info(self) -> Mapping[str, Any]:
        return dict(self.engine.info())

    def nvml(self) -> HostInfo:
        return inventory()

    def disk_usage(self, path: str) -> Disk:
        usage = shutil.disk_usage(path)
        return Disk(path, usage.total, usage.free)

    def docker_config(self) -> Mapping[str, Any]:
        return credentials.read_operator_docker_config(self.environ)

    def cdi_lookup(self, names: tuple[str, ...], dirs: Sequence[str]) -> Lookup:
        from imagesmith.stages.verify import gpus

        return gpus.lookup(names, dirs)[0]

    def which(self, program: str) -> str | None:
        return shutil.which(program)


def gather(host: Host) -> Facts:
    """Ask the host everything once; no question may raise."""
    version, info, engine_error = _engine(host)
    config, config_error = _docker_config(host)
    root = str((info or {}).get("DockerRootDir") or "")
    disk, disk_error = _disk(host, root) if root else (None, None)
    cdi_dirs = tuple((info or {}).get("CDISpecDirs") or ()) or DEFAULT_CDI_DIRS
    found, cdi_error = _cdi(host, cdi_dirs)
    return Facts(engine_version=version, engine_info=info, engine_error=engine_error, gpus=host.nvml(),
                 cdi=found, cdi_error=cdi_error, disk=disk, disk_error=disk_error,
                 docker_config=config, docker_config_error=config_error, gpu_hook=host.which(GPU_HOOK),
                 environ=dict(host.environ))


def _cdi(host: Host, dirs: tuple[str, ...]) -> tuple[Lookup, str | None]:
    try:
        return host.cdi_lookup(ALL_GPUS, dirs), None
    except UserError as exc:  # a hostile spec: named, never a traceback
        return Lookup(ALL_GPUS, dirs), str(exc).splitlines()[0]


def _engine(host: Host) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None, str | None]:
    try:
        return host.engine_version(), host.engine_info(), None
    except UserError as exc:
        return None, None, str(exc)
    except Exception as exc:  # an engine that answers nonsense is still an unusable engine
        return None, None, f"{type(exc).__name__}: {exc}"


def _docker_config(host: Host) -> tuple[Mapping[str, Any], str | None]:
    try:
        return host.docker_config(), None
    except (OSError, ValueError, UserError) as exc:
        return {}, f"{type(exc).__name__}: {exc}" if not isinstance(exc, UserError) else str(exc)


def _disk(host: Host, path: str) -> tuple[Disk | None, str | None]:
    try:
        return host.disk_usage(path), None
    except OSError as exc:
        return None, exc.strerror or str(exc)


# =====================================================================  what the matrix needs


def layer_bytes(layer: str, cuda: str) -> int:
    """Estimated bytes one target of ``layer`` adds (base: by accelerator)."""
    key = f"base:{'cpu' if cuda == 'cpu' else 'cuda'}" if layer == "base" else layer
    return int(LAYER_GB.get(key, OTHER_LAYER_GB) * GB)


def needs_from(matrix_name: str, registry: str | None, targets: Iterable[tuple[str, str]], publish: bool = False) -> Needs:
    """``targets``: (layer, cuda) of each planned target."""
    targets = list(targets)
    cuda = sorted({c for _, c in targets if c != "cpu"}, key=version_key)
    return Needs(matrix=matrix_name, cuda=tuple(cuda), registry=registry,
                 planned_bytes=sum(layer_bytes(layer, c) for layer, c in targets), targets=len(targets), publish=publish)


def load_needs(path: Path | None, cwd: Path | None = None, publish: bool = False, allowed_roots: Sequence[Path] = ()) -> Needs:
    """The matrix at ``path`` (default: ./matrix.yaml when there is one) as Needs."""
    from imagesmith.model import matrix as matrix_mod
    from imagesmith.model import plan as plan_mod

    if path is None:
        if not ((cwd or Path.cwd()) / "matrix.yaml").is_file():
            return Needs(publish=publish)
        path = (cwd / "matrix.yaml") if cwd else Path("matrix.yaml")
    try:
        m = matrix_mod.load(path, allowed_roots=allowed_roots)
        p = plan_mod.expand(m, dt.date.today().strftime("%Y%m%d"))
    except UserError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Needs(matrix=str(path), problem=first, publish=publish)
    needs = needs_from(str(path), m.image.registry, ((t.layer, t.versions.cuda) for t in p.targets), publish)
    return replace(needs, repository=m.image.repository, floating=tuple(sorted({f for t in p.targets for f in t.floating})),
                   vulnerability_threshold=m.vulnerabilities.threshold if m.sources.advisories else None,
                   vulnerability_allow=tuple(a.id for a in m.vulnerabilities.allow))


# =====================================================================  checks

Check = Callable[[Facts, Needs], list[Result]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


@check
def matrix_check(f: Facts, n: Needs) -> list[Result]:
    if n.problem:
        return [Result("matrix", FAIL, f"{n.matrix}: {n.problem}", f"imagesmith matrix validate {n.matrix}")]
    if n.matrix is None:
        return [Result("matrix", WARN, "no matrix.yaml here: driver, disk and registry are checked without one",
                       "imagesmith doctor --matrix path/to/matrix.yaml")]
    return [Result("matrix", OK, f"{n.matrix}: {n.targets} targets, CUDA {', '.join(n.cuda) or 'none (cpu only)'}")]


@check
def engine_check(f: Facts, n: Needs) -> list[Result]:
    where = f.environ.get("DOCKER_HOST", "")
    if f.engine_error is not None:
        reason = f.engine_error.split("; start ")[0]  # the fix is the fix line's
        if "permission denied" in reason.lower():
            fix = FIX_PODMAN_SOCKET if f.engine.podman else FIX_DOCKER_GROUP
        else:
            fix = engines.start_fix(where)
        return [Result("engine", FAIL, reason, fix)]
    kind = f.engine
    detail = f"{kind.describe()} at {where or 'the local socket'}"
    if not kind.podman and version_key(kind.api if kind.api != "?" else "0") < version_key(MIN_API):
        return [Result("engine", FAIL, f"{detail}: too old to pass GPUs to containers (API < {MIN_API})", FIX_UPGRADE_DOCKER)]
    return [Result("engine", OK, detail)]


@check
def runtime_check(f: Facts, n: Needs) -> list[Result]:
    """The GPU path verify takes on this host (gpupath.choose, as verify --gpus all asks it) and why."""
    if not f.engine_ok:
        return [Result("gpu runtime", WARN, "not checked: the engine is unreachable")]
    engine, kind = EngineGpu.of(f.engine_info or {}, f.environ.get("DOCKER_HOST", "")), f.engine
    if f.cdi_error and not engine.nvidia_runtime:
        return [Result("gpu runtime", FAIL, f"a CDI spec is refused: {f.cdi_error}", _cdi_fix(kind))]
    found = _gpu_path(gpupath.choose("auto", "all", engine, f.cdi), engine, f)
    if found:
        return [Result("gpu runtime", OK, found)]
    no_spec = f.cdi.problem.split("; ")[0] or f"no CDI spec offers {ALL_GPUS[0]}"
    if kind.podman:
        why, fix = f"{kind.name} takes GPUs by CDI only (its Docker API drops --gpus), and {no_spec}", gpupath.FIX_CDI_SPEC
    elif not engine.local:
        why = (f"Docker at DOCKER_HOST={engine.docker_host} lists no nvidia runtime and no CDI of its own (the CDI "
               "specs of this host say nothing of it)")
        fix = f"on that host: {FIX_TOOLKIT}"
    else:
        why, fix = f"Docker has no nvidia runtime or {GPU_HOOK}, and {no_spec}", FIX_CDI_SPEC
    if not f.gpus.gpus:
        return [Result("gpu runtime", WARN, f"{why} (no GPU here either: verification runs in CPU mode)", fix)]
    return [Result("gpu runtime", FAIL, f"{why}: containers cannot see the GPUs", fix)]


def _cdi_fix(kind: EngineKind) -> str:
    return gpupath.FIX_CDI_SPEC if kind.podman else FIX_CDI_SPEC


def _gpu_path(path: gpupath.GpuPath, engine: EngineGpu, f: Facts) -> str:
    """How verify gives containers GPUs here, in words ('' when it cannot)."""
    specs = cdi.listed(path.specs)
    if path.path == gpupath.NVIDIA and engine.nvidia_runtime:
        return f"nvidia runtime registered (default runtime: {(f.engine_info or {}).get('DefaultRuntime', 'runc')}): docker --gpus"
    if path.path == gpupath.CDI_ENGINE and engine.podman:
        if path.specs:
            return f"{f.engine.name} resolves CDI devices itself (from {', '.join(engine.cdi_dirs)}): {specs} offers {', '.join(path.devices)}"
        if not engine.local:
            return (f"{f.engine.name} at DOCKER_HOST={engine.docker_host} resolves CDI devices itself: verify passes "
                    f"{', '.join(path.devices)} (the specs on that host decide; it refuses a name they lack)")
        return ""
    if path.path == gpupath.CDI_ENGINE:
        return f"engine CDI (CDISpecDirs {', '.join(engine.cdi_dirs)}): {specs} offers {', '.join(path.devices)}"
    if path.path == gpupath.CDI_TRANSLATED:
        return (f"CDI translated by imagesmith from {specs} ({', '.join(path.devices)}): this Docker has no CDI, so verify "
                "gives containers the spec's device nodes, mounts and environment itself and emulates its "
                "create-symlinks and update-ldcache hooks")
    if f.gpu_hook and engine.local:
        return f"{f.gpu_hook} present: docker --gpus works"
    if path.then is not None and path.then.path == gpupath.CDI_ENGINE:
        return (f"engine CDI (CDISpecDirs {', '.join(engine.cdi_dirs)}): verify passes {', '.join(path.then.devices)} "
                "where the engine refuses --gpus")
    return ""


@check
def gpu_check(f: Facts, n: Needs) -> list[Result]:
    host = f.gpus
    if not host.gpus:
        why = host.error or "NVML reports no GPU"
        return [Result("gpus", WARN, f"no NVIDIA GPU: verification will run in CPU mode ({why})", FIX_DRIVER)]
    names: dict[str, int] = {}
    for g in host.gpus:
        label = f"{g.name} ({g.memory_total_mib / 1024:.0f} GiB" + (f", sm_{g.capability.replace('.', '')})" if g.capability else ")")
        names[label] = names.get(label, 0) + 1
    gpus = ", ".join(f"{count} × {label}" for label, count in names.items())
    return [Result("gpus", OK, f"{gpus}; driver {host.driver} (CUDA {host.cuda_driver or '?'})")]


@check
def driver_check(f: Facts, n: Needs) -> list[Result]:
    """The host driver against every CUDA version of the matrix (none without a driver: gpus says so)."""
    driver = f.gpus.driver
    if not driver or not f.gpus.gpus:
        return []
    kb = compat.load()
    return [_driver_result(kb, cuda, driver) for cuda in n.cuda]


def _driver_result(kb: compat.KnowledgeBase, cuda: str, driver: str) -> Result:
    status, info, rid = kb.driver_status(cuda, driver), kb.cuda.get(cuda), f"driver for CUDA {cuda}"
    if status == "unknown" or info is None:
        return Result(rid, WARN, f"CUDA {cuda} is not in the knowledge base", "imagesmith compat  (update imagesmith, or set IMAGESMITH_COMPAT)")
    fix = f"install driver >= {info.toolkit_driver}: sudo apt-get install -y cuda-drivers-{info.toolkit_driver.split('.')[0]}"
    if status == "pass":
        return Result(rid, OK, f"driver {driver} >= {info.toolkit_driver}")
    if status == "compat":
        return Result(rid, WARN, f"driver {driver} < {info.toolkit_driver}: CUDA {cuda} images run under minor-version "
                      "compatibility (no PTX JIT of newer kernels)", fix)
    return Result(rid, FAIL, f"driver {driver} is older than {info.min_driver}, the oldest that runs CUDA {cuda}", fix)


@check
def disk_check(f: Facts, n: Needs) -> list[Result]:
    if not f.engine_ok:
        return [Result("disk", WARN, "not checked: the engine is unreachable")]
    root = str((f.engine_info or {}).get("DockerRootDir") or "?")
    need, prune = n.planned_bytes, f.engine.prune_fix
    if f.disk is None:
        size = f"; the matrix needs about {gb(need)}" if need else ""
        return [Result("disk", WARN, f"cannot measure {root} here ({f.disk_error or 'not local'}; a remote engine?){size}")]
    free = f.disk.free
    if not need:
        status = WARN if free < MIN_FREE_BYTES else OK
        return [Result("disk", status, f"{gb(free)} free on {root}", prune if status == WARN else "")]
    detail = f"{gb(free)} free on {root}; {n.targets} planned images need about {gb(need)}"
    if free < need:
        return [Result("disk", FAIL, detail, prune)]
    if free < need * DISK_HEADROOM:
        return [Result("disk", WARN, f"{detail}, little room for build layers", prune)]
    return [Result("disk", OK, detail)]


@check
def registry_check(f: Facts, n: Needs) -> list[Result]:
    """How a push would log in: the same store as publish (--credentials, env, docker config), the
    matrix's registry being the declared release host."""
    if n.matrix is None or n.problem:
        return []
    host = n.registry or DOCKER_HUB
    try:
        found = credentials.release_store(host, f.environ, n.credentials_file, f.docker_config).for_host(host)
    except UserError as exc:
        return [Result("registry", FAIL, f"{host}: {exc}", f.login_fix(host))]
    if found is not None:
        return [Result("registry", OK, f"{host}: {found.source}")]
    if is_loopback(host):
        return [Result("registry", OK, f"{host}: a local registry; no login found (fine if it has no auth)")]
    note = f" ({f.docker_config_error})" if f.docker_config_error else ""
    if n.publish:
        return [Result("registry", FAIL, f"{host}: no login found{note}: publishing cannot push", f.login_fix(host))]
    return [Result("registry", WARN, f"{host}: no login found{note}: building works, publishing cannot push", f.login_fix(host))]


@check
def push_check(f: Facts, n: Needs) -> list[Result]:
    """doctor --release: the registry accepted (and we cancelled) a blob upload to the repository."""
    if f.release is None:
        return []
    where = f"{n.registry}/{n.repository}"
    if f.release.push_error:
        fix = (f.login_fix(n.registry or "")
               if "HTTP 401" in f.release.push_error else
               f"give the account push permission on {where} (Harbor: a robot account with push and pull on the project)")
        return [Result("push", FAIL, f.release.push_error, fix)]
    return [Result("push", OK, f"{where}: a push was accepted (blob upload started and cancelled): images, "
                               f"SBOMs, attestations and signatures can be pushed")]


SIGNATURE_TAGS = ("sha256-" + "0" * 64 + ".sig", "sha256-" + "0" * 64)


@check
def immutability_check(f: Facts, n: Needs) -> list[Result]:
    """doctor --release against Harbor: tag-immutability rules that would block a floating tag
    (or the signature / referrers tags the evidence uses)."""
    r = f.release
    if r is None or r.harbor is None:
        return []
    if r.rules_error:
        return [Result("tag immutability", WARN, f"Harbor {r.harbor}: {r.rules_error}")]
    project, _, repo = (n.repository or "").partition("/")
    blocked = harbor_api.blocked(r.rules, repo, list(n.floating) + list(SIGNATURE_TAGS))
    fix = f"in Harbor: Projects > {project} > Policy > Tag Immutability, exclude these tags from the rule"
    out = [Result("tag immutability", WARN, f"floating tag {tag} matches {rule.describe()}: Harbor will refuse to move it", fix)
           for tag, rule in blocked.items() if tag not in SIGNATURE_TAGS]
    if any(tag in SIGNATURE_TAGS for tag in blocked):
        out.append(Result("tag immutability", WARN, "sha256-<digest>.sig tags match an immutability rule: a second "
                          "signature of an image cannot be added", fix))
    return out or [Result("tag immutability", OK, f"Harbor {r.harbor}: no rule of project {project} blocks "
                                                  f"{len(n.floating)} floating tags or the signature tags")]


SEVERITY_ORDER = ("none", "low", "medium", "high", "critical")


@check
def scan_policy_check(f: Facts, n: Needs) -> list[Result]:
    """doctor --release against Harbor, for a matrix with advisories: does the project scan on push, and
    does its prevent-vulnerable setting agree with vulnerabilities.threshold?"""
    r = f.release
    if r is None or r.harbor is None or n.vulnerability_threshold is None:
        return []
    if r.scan is None:
        return [Result("harbor scan", WARN, f"Harbor {r.harbor}: {r.scan_error or 'the project could not be read'}")]
    project, threshold = (n.repository or "").partition("/")[0], n.vulnerability_threshold
    where = f"in Harbor: Projects > {project} > Configuration"
    out = []
    if not r.scan.auto_scan:
        out.append(Result("harbor scan", WARN, f"project {project} does not scan images on push: only imagesmith's OSV match "
                          "looks at them", f"{where}: tick 'Automatically scan images on push'"))
    out += _prevent_results(r.scan, project, threshold, n.vulnerability_allow, where)
    return out or [Result("harbor scan", OK, f"Harbor {r.harbor}: project {project} scans on push and blocks pulls at "
                                             f"{r.scan.severity} and above; the matrix's threshold is {threshold}")]


def _prevent_results(scan: harbor_api.ScanPolicy, project: str, threshold: str, allow: Sequence[str], where: str) -> list[Result]:
    if not scan.prevent_vul:
        return [Result("harbor scan", WARN, f"project {project} lets images with vulnerabilities be pulled: imagesmith's "
                       f"threshold ({threshold}) is the only gate", f"{where}: tick 'Prevent vulnerable images from running' "
                       f"with severity {threshold}")]
    if SEVERITY_ORDER.index(scan.severity or "none") < SEVERITY_ORDER.index(threshold):
        return [Result("harbor scan", FAIL, f"project {project} refuses pulls of images with {scan.severity or 'any'} "
                       f"vulnerabilities, but the matrix releases images below {threshold}: Harbor would block images "
                       "imagesmith released", f"{where}: set the prevent-vulnerable severity to {threshold}, or set "
                       f"vulnerabilities.threshold: {scan.severity or 'low'} in the matrix")]
    missing = [a for a in allow if a.startswith("CVE-") and a not in scan.allowlist]
    if missing:
        return [Result("harbor scan", WARN, f"the matrix allows {', '.join(missing)}, which project {project}'s CVE allowlist "
                       "lacks: Harbor may block images imagesmith released", f"{where}: add {', '.join(missing)} to the CVE allowlist")]
    return []


# =====================================================================  running and output


def run(facts: Facts, needs: Needs, checks: Sequence[Check] = CHECKS) -> list[Result]:
    return [result for fn in checks for result in fn(facts, needs)]


def diagnose(host: Host | None = None, matrix: Path | None = None, publish: bool = False,
             cwd: Path | None = None, allowed_roots: Sequence[Path] = (),
             release_probe: Callable[[str, str, Mapping[str, str], Path | None], ReleaseFacts] = probe_release,
             credentials_file: Path | None = None) -> list[Result]:
    """Everything ``imagesmith doctor`` does but printing; ``--release`` also asks the registry."""
    facts = gather(host or SystemHost())
    needs = replace(load_needs(matrix, cwd, publish, allowed_roots), credentials_file=credentials_file)
    if needs.publish and needs.registry and needs.repository and not needs.problem:
        facts = replace(facts, release=release_probe(needs.registry, needs.repository, facts.environ, credentials_file))
    return run(facts, needs)


def ready(results: Sequence[Result]) -> bool:
    return not any(r.status == FAIL for r in results)


def exit_code(results: Sequence[Result]) -> int:
    return 0 if ready(results) else 1


def to_json(results: Sequence[Result]) -> dict[str, Any]:
    return {"schema": SCHEMA, "ready": ready(results), "checks": [r.to_json() for r in results]}


def table_rows(results: Sequence[Result]) -> list[list[str]]:
    return [[r.id, r.status.upper() if r.status != OK else "ok", r.detail] for r in results]


def fix_lines(results: Sequence[Result]) -> list[str]:
    """One line per problem: what to run (failures first)."""
    order = {FAIL: 0, WARN: 1, OK: 2}
    return [f"  {r.id}: {r.fix}" for r in sorted(results, key=lambda r: order[r.status]) if r.fix and r.status != OK]


def verdict(results: Sequence[Result]) -> str:
    fails = sum(r.status == FAIL for r in results)
    warns = sum(r.status == WARN for r in results)
    if fails:
        return f"NOT READY: {fails} problem{'s' if fails > 1 else ''} to fix" + (f", {warns} warning{'s' if warns > 1 else ''}" if warns else "")
    return "ready" + (f" ({warns} warning{'s' if warns > 1 else ''})" if warns else "")


__all__ = ["ReleaseFacts", "probe_release"]  # the names of imagesmith.stages.tools.doctor_release its callers take from here
