"""fleet.yaml: GPU classes, where each one runs, and what a floating tag requires.

Validated like the matrix (same located loader, same ``file:line key.path:
why; what to write`` messages, every error of a file reported together) and
turned into frozen records at once. Every value that later lands in a batch
script, an ``sbatch`` argument or a Kubernetes Job is checked here against the
grammar of what it becomes (Slurm names, label keys and values, quantities,
durations); the renderers still pass argv lists and quote what they write.
The slurm: and kubernetes: placements are key tables of the matrix's toolkit
(:class:`~imagesmith.model.validation.Table`: each key, its getter, its default).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from imagesmith.errors import Problem, UserError, ValidationError
from imagesmith.model import platform as platforms
from imagesmith.model.loader import CAPS, LoadError, read_confined
from imagesmith.model.located import KeyPath, load_located
from imagesmith.model.matrix.records import TIERS
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import Platform
from imagesmith.model.ref import ImageRef
from imagesmith.model.validation import Ctx, Derived, Key, Table
from imagesmith.resources import payload_dir

SCHEMA_VERSION = 1
SCHEDULERS = ("slurm", "kubernetes")
RUNTIMES = ("docker", "podman", "pyxis")
OPERATORS = ("Exists", "Equal")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PODMAN_SOCKET = "unix:///run/podman/podman.sock"

CLASS_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
FEATURE = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
CONSTRAINT = re.compile(rf"^\[?{FEATURE}(?:[&|]{FEATURE})*\]?$")
SLURM_MEM = re.compile(r"^[1-9][0-9]*[KMGT]?$")
DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$")
QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()/+-]{0,63}$")
ABS_PATH = re.compile(r"^/[A-Za-z0-9_./+-]*$")
ENGINE_URL = re.compile(r"^(?:unix://[A-Za-z0-9_./+-]+|(?:tcp|ssh)://[A-Za-z0-9_.@:-]+)$")

_COMP = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?"
DIGEST_REF = re.compile(rf"^(?P<name>(?:{_HOST}/)?{_COMP}(?:/{_COMP})*)@(?P<digest>sha256:[a-f0-9]{{64}})$")


# --------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class SlurmPlacement:
    partition: str
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gres_type: str | None = None
    time_limit_s: int = 1800
    start_deadline_s: int = 3600
    max_requeues: int = 0
    runtime: str = "docker"
    imagesmith: str | None = None  # the imagesmith on the node; default: the one running fleet verify
    docker_host: str | None = None
    cpus_per_task: int | None = None
    mem: str | None = None


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = None
    seconds: int | None = None


@dataclass(frozen=True)
class KubernetesPlacement:
    namespace: str
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    image_pull_secret: str | None = None
    deadline_s: int = 1800
    ttl_s: int = 3600
    start_deadline_s: int = 1800
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "8Gi"
    context: str | None = None


@dataclass(frozen=True)
class GpuClass:
    name: str
    gpus: int  # per job; 0 = CPU mode (imagesmith verify --gpus none)
    gpu: str | None  # the model torch reports (torch.cuda.get_device_name), e.g. "NVIDIA H200"
    tier: str | None = None
    slurm: SlurmPlacement | None = None
    kubernetes: KubernetesPlacement | None = None
    platform: Platform = DEFAULT_PLATFORM  # the nodes' own (a GH200 class: linux/arm64); runs there are native

    @property
    def scheduler(self) -> str:
        return "slurm" if self.slurm is not None else "kubernetes"

    @property
    def start_deadline_s(self) -> int:
        return self.slurm.start_deadline_s if self.slurm else self.kubernetes.start_deadline_s  # type: ignore[union-attr]

    @property
    def run_limit_s(self) -> int:
        return self.slurm.time_limit_s if self.slurm else self.kubernetes.deadline_s  # type: ignore[union-attr]


@dataclass(frozen=True)
class Fleet:
    file: Path
    classes: tuple[GpuClass, ...]
    require: tuple[str, ...]  # the classes a floating tag needs
    tier: str = "quick"
    warnings: tuple[Problem, ...] = ()

    def klass(self, name: str) -> GpuClass:
        return next(c for c in self.classes if c.name == name)


def parse_ref(text: str) -> ImageRef:
    """``host/repo@sha256:<64 hex>`` (no tag: the digest alone names what the fleet runs) as an
    :class:`ImageRef`, or a UserError saying what to write."""
    if DIGEST_REF.fullmatch(text) is None:
        raise UserError(f"{text!r} is not an image pinned by digest; write REGISTRY/REPOSITORY@sha256:<64 hex digits> "
                        f"(the digest publish printed, or skopeo inspect --format '{{{{.Digest}}}}')")
    return ImageRef.parse(text)


def label_key_ok(key: str) -> bool:
    """A Kubernetes label key: optional DNS-subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, sep, name = key.rpartition("/")
    return bool(LABEL_NAME.fullmatch(name)) and (not sep or bool(DNS_SUBDOMAIN.fullmatch(prefix)))


def label_value_ok(value: str) -> bool:
    return value == "" or bool(LABEL_NAME.fullmatch(value))


# --------------------------------------------------------------------------
# validation


WORD = "letters, digits, '.', '_' or '-' (at most 64)"
TOP_KEYS = ("version", "tier", "classes", "floating")
CLASS_KEYS = ("gpu", "gpus", "tier", "platform", "slurm", "kubernetes")


def _named(pattern: re.Pattern[str], what: str, write: str) -> partial[str | None]:
    """:meth:`Ctx.name` for one kind of name: a string matching ``pattern``, or ``is not {what}; write {write}``."""
    return partial(Ctx.name, pattern=pattern, what=what, write=write)


SLURM = Table("slurm", (  # -> SlurmPlacement; runtime first: docker_host's default follows it
    Key("runtime", partial(Ctx.choice, choices=RUNTIMES), SlurmPlacement.runtime),
    Key("partition", _named(SLURM_NAME, "a Slurm partition name", WORD),
        required="a Slurm class needs partition: the partition its jobs go to (sinfo lists them)"),
    Key("account", _named(SLURM_NAME, "a Slurm account name", WORD)),
    Key("qos", _named(SLURM_NAME, "a Slurm QOS name", WORD)),
    Key("constraint", _named(CONSTRAINT, "a Slurm constraint", "node features joined by & or |, e.g. h200&nvlink")),
    Key("gres_type", _named(SLURM_NAME, "a GRES type", WORD)),
    Key("time_limit", Ctx.duration, SlurmPlacement.time_limit_s),
    Key("start_deadline", Ctx.duration, SlurmPlacement.start_deadline_s),
    Key("max_requeues", partial(Ctx.integer, lo=0, hi=10), SlurmPlacement.max_requeues),
    Key("imagesmith", _named(ABS_PATH, "an absolute path", "the imagesmith executable on the nodes, e.g. /shared/imagesmith/bin/imagesmith")),
    Key("docker_host", _named(ENGINE_URL, "an engine address", "unix:///run/podman/podman.sock, tcp://HOST:PORT or ssh://USER@HOST"),
        Derived(lambda given, values: PODMAN_SOCKET if values["runtime"] == "podman" else None)),
    Key("cpus_per_task", partial(Ctx.integer, lo=0, hi=4096), 0),  # 0: not asked for (None)
    Key("mem", _named(SLURM_MEM, "a Slurm memory size", "e.g. 64G or 512000M")),
))


def _slurm(ctx: Ctx, raw: Any, p: KeyPath) -> SlurmPlacement:
    v = SLURM.read(ctx, raw, p)
    return SlurmPlacement(
        partition=v["partition"] or "", account=v["account"], qos=v["qos"], constraint=v["constraint"], gres_type=v["gres_type"],
        time_limit_s=v["time_limit"], start_deadline_s=v["start_deadline"], max_requeues=v["max_requeues"],
        runtime=v["runtime"], imagesmith=v["imagesmith"], docker_host=v["docker_host"],
        cpus_per_task=v["cpus_per_task"] or None, mem=v["mem"],
    )


def _tolerations(ctx: Ctx, raw: Any, p: KeyPath) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(p, "expected a list of tolerations, e.g. [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]")
        return ()
    return tuple(_toleration(ctx, item, p + (i,)) for i, item in enumerate(raw))


def _toleration(ctx: Ctx, raw: Any, p: KeyPath) -> Toleration:
    s = ctx.section(raw, p, ("key", "operator", "value", "effect", "seconds"))
    key = s("key", Ctx.string)
    if key is not None and not label_key_ok(key):
        ctx.error(p + ("key",), f"{key!r} is not a Kubernetes label key; write e.g. nvidia.com/gpu")
    operator = s("operator", Ctx.choice, OPERATORS, "Equal" if "value" in s else "Exists")
    value = s("value", Ctx.string)
    if value is not None and not label_value_ok(value):
        ctx.error(p + ("value",), f"{value!r} is not a label value; write at most 63 letters, digits, '-', '_' or '.'")
    if operator == "Exists" and value:
        ctx.error(p + ("value",), "operator Exists takes no value; drop value or write operator: Equal")
    effect = s("effect", Ctx.choice, EFFECTS, "") or None if "effect" in s else None
    seconds = s("seconds", Ctx.integer, -1, 0, 10**9) if "seconds" in s else None
    return Toleration(key, operator, value, effect, seconds)


def _node_selector(ctx: Ctx, raw: Any, p: KeyPath) -> tuple[tuple[str, str], ...]:
    out = []
    for key, value in ctx.open_mapping(raw, p).items():
        text = "" if value is None else ctx.string(value, p + (key,), "") or ""
        if not label_key_ok(key):
            ctx.error(p + (key,), f"{key!r} is not a Kubernetes label key; write e.g. nvidia.com/gpu.product")
        elif not label_value_ok(text):
            ctx.error(p + (key,), f"{text!r} is not a label value; write at most 63 letters, digits, '-', '_' or '.' (e.g. NVIDIA-H200)")
        out.append((key, text))
    return tuple(sorted(out))


QUANTITY_WHAT = "a Kubernetes quantity"
KUBERNETES = Table("kubernetes", (  # -> KubernetesPlacement
    Key("namespace", _named(DNS_LABEL, "a namespace name", "lowercase letters, digits and '-' (at most 63)"),
        required="a Kubernetes class needs namespace: the namespace its Jobs run in"),
    Key("node_selector", _node_selector),
    Key("tolerations", _tolerations),
    Key("image_pull_secret", _named(DNS_SUBDOMAIN, "a Secret name", "the name of a kubernetes.io/dockerconfigjson Secret, e.g. harbor-robot")),
    Key("deadline", Ctx.duration, KubernetesPlacement.deadline_s),
    Key("ttl", partial(Ctx.duration, lo=0), KubernetesPlacement.ttl_s),
    Key("start_deadline", Ctx.duration, KubernetesPlacement.start_deadline_s),
    Key("cpu", _named(QUANTITY, QUANTITY_WHAT, "e.g. 8 or 500m")),
    Key("memory", _named(QUANTITY, QUANTITY_WHAT, "e.g. 64Gi")),
    Key("shm_size", _named(QUANTITY, QUANTITY_WHAT, "e.g. 8Gi"), KubernetesPlacement.shm_size),
    Key("context", _named(SLURM_NAME, "a kubeconfig context name", WORD)),
))


def _kubernetes(ctx: Ctx, raw: Any, p: KeyPath) -> KubernetesPlacement:
    v = KUBERNETES.read(ctx, raw, p)
    return KubernetesPlacement(
        namespace=v["namespace"] or "", node_selector=v["node_selector"], tolerations=v["tolerations"],
        image_pull_secret=v["image_pull_secret"], deadline_s=v["deadline"], ttl_s=v["ttl"], start_deadline_s=v["start_deadline"],
        cpu=v["cpu"], memory=v["memory"], shm_size=v["shm_size"] or "8Gi", context=v["context"],
    )


def _class(ctx: Ctx, name: str, raw: Any, baselines: Mapping[str, Any]) -> GpuClass:
    p: KeyPath = ("classes", name)
    s = ctx.section(raw, p, CLASS_KEYS)
    if not CLASS_NAME.fullmatch(name):
        ctx.error(p, f"class name {name!r} must be lowercase letters, digits and '-' (at most 31; it names jobs and folders)")
    given = [k for k in SCHEDULERS if k in s]
    if len(given) != 1:
        ctx.error(p, f"a class runs on one scheduler; give exactly one of slurm: or kubernetes: (found {', '.join(given) or 'none'})")
    gpus = s("gpus", Ctx.integer, 1, 0, 64)
    gpu = s("gpu", Ctx.name, GPU_MODEL, "a GPU model name", "the name torch reports, e.g. NVIDIA H200")
    _check_gpu(ctx, p, gpus, gpu, baselines)
    return GpuClass(
        name=name, gpus=gpus, gpu=gpu, platform=s("platform", _platform),
        tier=s("tier", Ctx.choice, TIERS, "quick") if "tier" in s else None,
        slurm=s("slurm", _slurm) if "slurm" in s else None,
        kubernetes=s("kubernetes", _kubernetes) if "kubernetes" in s and "slurm" not in s else None,
    )


def _platform(ctx: Ctx, raw: Any, p: KeyPath) -> Platform:
    """A class's ``platform:`` (its nodes' own; default linux/amd64), in the matrix's grammar."""
    if raw is None:
        return DEFAULT_PLATFORM
    why = platforms.problem(raw) if isinstance(raw, str) else f"expected one platform ({', '.join(platforms.NAMES)})"
    if why:
        ctx.error(p, why)
        return DEFAULT_PLATFORM
    return platforms.parse(raw)


def _check_gpu(ctx: Ctx, p: KeyPath, gpus: int, gpu: str | None, baselines: Mapping[str, Any]) -> None:
    if gpus > 0 and not gpu:
        ctx.warn(p, "gpu: is not set, so the job's GPUs are not checked against the class; write the model torch reports, e.g. gpu: NVIDIA H200")
    if gpus == 0 and gpu:
        ctx.error(p + ("gpus",), f"gpus is 0 (CPU mode) but gpu names {gpu!r}; give the GPU count, or drop gpu for a CPU class")
    if gpus > 0 and gpu and gpu not in baselines:
        ctx.warn(p + ("gpu",), f"verify/baselines.json has no baseline for {gpu!r}, so throughput is not judged against one; "
                               f"it has {', '.join(sorted(baselines)) or 'none'}")


def _require(ctx: Ctx, raw: Any, classes: Mapping[str, GpuClass]) -> tuple[str, ...]:
    p: KeyPath = ("floating",)
    d = ctx.mapping(raw, p, ("require",))
    if "require" not in d:
        return tuple(classes)
    names = ctx.strings(d["require"], p + ("require",))
    if not names:
        ctx.error(p + ("require",), "is empty, so no class would gate a floating tag; list classes, or drop require to require every class")
    for i, name in enumerate(names):
        if name not in classes:
            ctx.error(p + ("require", i), f"{name!r} is not a class here; classes: {', '.join(classes) or 'none'}")
    return tuple(dict.fromkeys(names))


def _baselines() -> dict[str, Any]:
    try:
        return dict(json.loads((payload_dir() / "baselines.json").read_text()).get("gpus") or {})
    except (OSError, ValueError):
        return {}


def parse(text: str | bytes, file: Path) -> Fleet:
    raw, lines = load_located(text, file.name)
    ctx = Ctx(file.resolve(), lines)
    d = ctx.mapping(raw, (), TOP_KEYS)
    if d.get("version") is not None and str(d["version"]) != str(SCHEMA_VERSION):
        ctx.error(("version",), f"fleet schema version {d['version']} is not supported; this imagesmith reads version {SCHEMA_VERSION}")
    baselines = _baselines()
    classes = {name: _class(ctx, str(name), spec, baselines) for name, spec in ctx.open_mapping(d.get("classes"), ("classes",)).items()}
    if not classes:
        ctx.error(("classes",) if "classes" in d else (), "no classes: name at least one GPU class with its slurm: or kubernetes: placement")
    fleet = Fleet(file=ctx.file, classes=tuple(classes.values()), require=_require(ctx, d.get("floating"), classes),
                  tier=ctx.choice(d.get("tier"), ("tier",), TIERS, "quick"), warnings=tuple(ctx.warnings()))
    if ctx.errors():
        raise ValidationError(problems=ctx.errors() + ctx.warnings())
    return fleet


def load(path: str | Path) -> Fleet:
    """Load and validate ``path``; raise ValidationError listing every error."""
    file = Path(path)
    return parse(read_confined_problem(file), file)


def read_confined_problem(file: Path) -> bytes:
    """The bytes of a fleet file through :mod:`imagesmith.model.loader` (a regular file, not a link out of its
    folder, at most ``CAPS["fleet.yaml"]`` bytes); a refusal is a ValidationError naming the file."""
    try:
        return read_confined(file, cap=CAPS["fleet.yaml"])
    except LoadError as exc:
        raise ValidationError(problems=[Problem(str(exc))]) from None
