"""The records every renderer reads (frozen), and the few words they share.

``parse`` builds them from report.json; ``markdown``, ``junit`` and ``html``
read only these, never the raw JSON. A release is the model's own value
(:class:`imagesmith.model.releasereport.ReleaseReport`, each target's part a
``Released``), as a verify report is (``VerifyReport``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from imagesmith.model import policy
from imagesmith.model.releasereport import DONE as RELEASE_DONE
from imagesmith.model.releasereport import Released, ReleaseReport
from imagesmith.model.verifyreport import Check as Check  # one check, one type: the model's
from imagesmith.model.verifyreport import Sharing, VerifyReport

STATUSES = ("pass", "warn", "fail", "skip", "inconclusive")
GPU_VERIFIED = "GPU-verified"
BUILD_OK = ("built", "cached")

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Characters XML 1.0 forbids (a build log with control codes must not break the JUnit file).
XML_INVALID = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class GpuSeries:
    """NVML readings of one GPU over the run; ``values[metric][i]`` was read at ``t[i]``."""

    gpu: int
    name: str
    t: tuple[float, ...]
    values: Mapping[str, tuple[float | None, ...]]


@dataclass(frozen=True)
class Nvml:
    interval_s: float | None = None
    gpus: tuple[GpuSeries, ...] = ()
    error: str | None = None
    present: bool = False  # the report has an NVML block (the host-side sampler ran)


@dataclass(frozen=True)
class Verify:
    """One target's verification as the renderers draw it: the typed report (:mod:`imagesmith.model.verifyreport`,
    parsed once), its checks with their measured figures as floats, and the host sampler's NVML series."""

    report: VerifyReport
    checks: tuple[Check, ...]  # the report's checks; threshold, baseline, % of it and duration as floats
    nvml: Nvml = field(default_factory=Nvml)

    @property
    def tier(self) -> str:
        return self.report.tier

    @property
    def started_at(self) -> str:
        return self.report.started_at or ""

    @property
    def duration_s(self) -> float | None:
        return None if self.report.duration_s is None else float(self.report.duration_s)

    @property
    def image_ref(self) -> str:
        return (self.report.image.ref or "") if self.report.image else ""

    @property
    def environment(self) -> Mapping[str, Any]:
        """The payload's ``environment`` as written (the GPUs' UUIDs and host indexes are there, not in the typed
        :class:`~imagesmith.model.verifyreport.Environment`)."""
        env = self.report.to_json().get("environment")
        return env if isinstance(env, Mapping) else {}

    @property
    def shared(self) -> Sharing | None:
        """The report's sharing block; None: a report written before it."""
        return self.report.sharing

    @property
    def ok(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def not_gpu_verified(self) -> bool:
        """A CUDA build of torch whose verification did not run (or pass) on a GPU."""
        return self.report.cuda_image and not policy.evidence(self.report).gpu_verified

    @property
    def gpu(self) -> str:
        """A CUDA image's GPU verdict in a few words: 'GPU-verified on 2 GPUs', 'not GPU-verified (CPU mode)', 'not
        GPU-verified (GPU exclusivity not measured)', ...; '' for a CPU image (vetted on a CPU)."""
        return policy.evidence(self.report).short() if self.report.cuda_image else ""

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    @property
    def sharing(self) -> str:
        """'not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (...)', '' when the report has no sharing key."""
        return policy.sharing_line(self.report)

    def gpu_name(self, index: int) -> str:
        for gpu in self.environment.get("gpus") or ():
            if isinstance(gpu, Mapping) and gpu.get("index") == index:
                return str(gpu.get("name", ""))
        return ""


@dataclass(frozen=True)
class Built:
    status: str  # built | cached | failed | skipped | cancelled | queued
    image: str = ""
    image_id: str | None = None
    seconds: float = 0.0
    size_bytes: int = 0
    error: str | None = None
    dockerfile: str = ""
    log: str = ""
    mismatches: tuple[str, ...] = ()
    log_tail: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in BUILD_OK


@dataclass(frozen=True)
class Target:
    id: str
    build: Built | None = None
    verify: Verify | None = None
    verify_expected: bool = False  # a run report: a built target without a verify report is not done
    release: Released | None = None

    @property
    def status(self) -> str:
        """A few words for people: 'passed', 'passed, GPU-verified', 'passed, not GPU-verified (CPU mode)', 'warnings',
        'failed', 'build failed', ... ; a target known only from a release says what the release did ('pushed')."""
        if self.build is not None and not self.build.ok:
            return f"build {self.build.status}"
        if self.verify is None:
            if self.build is None and not self.verify_expected and self.release is not None:
                return self.release.status
            return "not verified" if self.verify_expected else (self.build.status if self.build else "unknown")
        if not self.verify.ok:
            return "failed"
        word = "warnings" if self.verify.count("warn") else "passed"
        return f"{word}, {self.verify.gpu}" if self.verify.gpu else word

    @property
    def ok(self) -> bool:
        return self.status.split(",")[0] in ("passed", "warnings", *BUILD_OK, *RELEASE_DONE)

    @property
    def gpu(self) -> str:
        """The GPU verdict of a CUDA image ('GPU-verified on 1 GPU', 'not GPU-verified (CPU mode)', ...), from its verify report
        or, for a target known only from a release, from release.json; '' for a CPU image."""
        if self.verify is not None:
            return self.verify.gpu
        if self.release is not None and self.release.gpu_verified is not None:
            return self.release.how
        return ""

    @property
    def vetted(self) -> bool:
        """Passed, and a CUDA image's pass was earned on a GPU (a CPU image is vetted on a CPU)."""
        return self.ok and not self.gpu.startswith(policy.NOT_GPU_VERIFIED)

    @property
    def tone(self) -> str:
        """The colour of its badge: pass (vetted), unvetted (passed, but a CUDA image not GPU-verified), fail, skip."""
        if self.vetted:
            return "pass"
        if self.ok:
            return "unvetted"
        return "skip" if self.status in ("build skipped", "build cancelled", "not-built") else "fail"


@dataclass(frozen=True)
class Run:
    kind: str  # build | verify | run
    source: str
    started_at: str
    matrix: str
    targets: tuple[Target, ...]
    release: ReleaseReport | None = None
    unfinished: tuple[str, ...] = ()  # parts of the run that did not complete ("build interrupted (SIGINT)")

    @property
    def complete(self) -> bool:
        return not self.unfinished

    @property
    def ok(self) -> bool:
        """Success: a run that completed, every target passed, the release (if any) ok."""
        return (self.complete and bool(self.targets) and all(t.ok for t in self.targets)
                and (self.release is None or self.release.ok))

    def failed_targets(self) -> list[Target]:
        return [t for t in self.targets if not t.ok]

    @property
    def tone(self) -> str:
        """The verdict's colour: ok (every target vetted), unvetted (passed, but CUDA images not GPU-verified), bad."""
        if not self.ok:
            return "bad"
        return "ok" if all(t.vetted for t in self.targets) else "unvetted"


# -- words every format shares ---------------------------------------------------------------------------


def clean(text: str) -> str:
    """Without terminal escape codes and characters XML 1.0 forbids."""
    return XML_INVALID.sub("", ANSI.sub("", text))


def fmt_value(value: Any, unit: str = "") -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def env_line(v: Verify) -> str:
    env = v.environment
    parts = [f"{k} {env[k]}" for k in ("torch", "cuda", "cudnn", "nccl", "python", "os", "driver") if env.get(k)]
    names = [str(g.get("name")) for g in env.get("gpus") or () if isinstance(g, Mapping)]
    if names:
        parts.append(f"{len(names)} × {names[0]}" if len(set(names)) == 1 else ", ".join(names))
    return ", ".join(parts) or "no environment recorded"


def headline(run: Run) -> str:
    if not run.complete:
        return f"not a result: the run did not complete ({'; '.join(run.unfinished)})"
    n, bad = len(run.targets), len(run.failed_targets())
    if not n:
        return "no targets in this report"
    good, failed = {"build": ("built", "did not build"), "release": ("released", "not released")}.get(run.kind, ("passed", "failed"))
    if n == 1:
        verdict = f"the target {failed if bad else good}"
    else:
        verdict = f"{bad} of {n} targets {failed}" if bad else f"all {n} targets {good}"
    return verdict + ("" if bad else gpu_words(run, n == 1)) + ("; the release failed" if run.release and not run.release.ok else "")


def gpu_words(run: Run, one: bool) -> str:
    """What the verdict says about GPUs: ', GPU-verified' (one target), '; 5 not GPU-verified (CPU mode)', '; the 2 CUDA
    images GPU-verified'; '' when no target that passed is a CUDA image."""
    passed = [t.gpu for t in run.targets if t.ok and t.gpu]
    if not passed:
        return ""
    if one:
        return f", {passed[0]}"
    unvetted = Counter(g for g in passed if g.startswith(policy.NOT_GPU_VERIFIED))
    if not unvetted:
        return f"; the {len(passed)} CUDA images {GPU_VERIFIED}" if len(passed) > 1 else f"; the CUDA image {GPU_VERIFIED}"
    return "; " + ", ".join(f"{count} {words}" for words, count in unvetted.most_common())


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def release_summary(rel: ReleaseReport) -> str:
    """'7 images pushed, 0 unchanged, 0 not released; floating tags: 2 created' (the count of images, never of
    references: a release.json's ``pushed`` also lists the floating tags it wrote)."""
    by = Counter(t.status for t in rel.targets)
    not_released = sum(not t.ok for t in rel.targets)
    moved = Counter(f.action for f in rel.floating)
    floating = "; floating tags: " + ", ".join(f"{n} {action}" for action, n in moved.items()) if moved else ""
    return f"{plural(by['pushed'], 'image')} pushed, {by['unchanged']} unchanged, {not_released} not released{floating}"


def footnotes(texts: Iterable[str]) -> dict[str, int]:
    """Each distinct non-empty text once, numbered from 1 in order of first appearance: a note many rows share is
    printed once, and each row names its number."""
    out: dict[str, int] = {}
    for text in texts:
        if text and text not in out:
            out[text] = len(out) + 1
    return out
