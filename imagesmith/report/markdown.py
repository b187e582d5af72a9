"""Markdown for CI job summaries (GitHub, GitLab): targets x status, failed checks, measured vs baseline.

Every value from a report is text another job wrote, so it must stay inert on a
CI page (GitHub and GitLab render GitLab-/GitHub-flavoured Markdown). It goes
through :func:`cell` (tables) or :func:`text`:

* HTML is escaped (``<``, ``>``, ``&``): no raw HTML, no ``<https://…>`` autolink;
* Markdown punctuation that opens links, images and code spans is
  backslash-escaped (``\\ [ ] ( ) ! ` |``): ``[click](https://evil)`` and
  ``![x](https://track/p.png)`` show as the characters they are;
* what GFM autolinks without any markup is broken with a word joiner (U+2060,
  invisible): ``scheme://`` (``https://``, ``ftp://``…), ``www.`` and
  ``name@domain.tld``;
* newlines cannot end a table row or a line, pipes cannot split a cell;
* control characters (ESC, BEL, U+202E...) are escaped (``\x1b``), as on a terminal (:mod:`imagesmith.inert`).

A :class:`Code` value is shown as a code span (nothing inside one is a link):
backticks cannot close it, pipes cannot split its cell.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from imagesmith.inert import inert
from imagesmith.model import policy
from imagesmith.report.chartdata import throughputs
from imagesmith.report.model import STATUSES, Release, Run, fmt_value, headline
from imagesmith.report.parse import release_of
from imagesmith.units import fmt_bytes, gb


@dataclass(frozen=True)
class Code:
    """A cell shown as a code span (references, digests, tags)."""

    value: str


_PUNCTUATION = re.compile(r"([\\`\[\]()!|])")
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9+.-])(?=://)|(?<=\bwww)(?=\.)|(?<=@)(?=[a-z0-9-]+\.[a-z0-9])")
WORD_JOINER = "\u2060"


def cell(value: Any) -> str:
    """Inert in a Markdown table cell, a line of prose and as HTML (see the module docstring)."""
    if isinstance(value, Code):
        return "`" + html.escape(_one_line(str(value.value)), quote=False).replace("`", "'").replace("|", "\\|") + "`"
    escaped = html.escape(_PUNCTUATION.sub(r"\\\1", _one_line(str(value))), quote=False)
    return _AUTOLINK.sub(WORD_JOINER, escaped)


def _one_line(text: str) -> str:
    """Line breaks as spaces, every other control character escaped (``\x1b``, ``\u202e``: see :mod:`imagesmith.inert`)."""
    return inert(re.sub(r"[\r\n\u2028\u2029]", " ", text), one_line=True)


text = cell  # the same rules hold for a line of prose


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return out + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def section(title: str, headers: Sequence[str], rows: list[list[Any]]) -> list[str]:
    return [f"### {title}", "", *table(headers, rows), ""] if rows else []


def to_markdown(run: Run) -> str:
    """A summary for CI job pages: targets × status, failed checks, measured vs baseline."""
    icon = "✅" if run.ok else "❌"
    lines = [f"## {icon} imagesmith {run.kind}: {text(headline(run))}", "",
             text(" · ".join(p for p in (f"started {run.started_at}" if run.started_at else "",
                                         f"matrix {run.matrix}" if run.matrix else "", f"report {run.source}") if p)), ""]
    lines += _targets(run)
    lines += section("Failed checks", ["target", "check", "detail"], _checks(run, "fail"))
    lines += section("Warnings", ["target", "check", "detail"], _checks(run, "warn"))
    lines += section("Inconclusive (a shared GPU)", ["target", "check", "detail"], _checks(run, "inconclusive"))
    lines += section("GPU sharing", ["target", "GPUs during the run"], _sharing(run))
    lines += section("Measured against baseline",
                     ["target", "check", "GPU", "value", "baseline", "% of baseline", "fail line", "status"], _rates(run))
    lines += _build_failures(run)
    lines += _release(run)
    return "\n".join(lines).rstrip() + "\n"


def _targets(run: Run) -> list[str]:
    """Targets × status; the build column only when there was a build, counts only when there was a verify."""
    has_build, has_verify = run.kind != "verify", run.kind != "build"
    headers = ["target", "status", *(["build"] if has_build else []), *(STATUSES if has_verify else [])]
    rows = []
    for t in run.targets:
        b, v = t.build, t.verify
        build = (f"{b.status} {b.seconds:.0f} s" + (f", {fmt_bytes(b.size_bytes)}" if b.size_bytes else "")) if b else "-"
        counts = [v.count(s) for s in STATUSES] if v else ["-"] * len(STATUSES)
        rows.append([f"{'✅' if t.ok else '❌'} {t.id}", t.status, *([build] if has_build else []), *(counts if has_verify else [])])
    return [*table(headers, rows), ""]


def _sharing(run: Run) -> list[list[Any]]:
    """A row per verified target whose report measured who else used its GPUs."""
    return [[t.id, t.verify.sharing] for t in run.targets if t.verify and t.verify.sharing]


def _checks(run: Run, status: str) -> list[list[Any]]:
    rows = []
    for t in run.targets:
        for c in t.verify.checks if t.verify else ():
            if c.status == status:
                rows.append([t.id, c.id + (" (optional)" if c.optional else ""), c.detail or c.title])
    return rows


def _rates(run: Run) -> list[list[Any]]:
    rows = []
    for t in run.targets:
        for tp in throughputs(t.verify) if t.verify else ():
            c = tp.check
            for rate in tp.rates:
                pct = f"{100 * rate.value / c.baseline:.1f}%" if c.baseline else "-"
                rows.append([t.id, c.id, rate.gpu, fmt_value(rate.value, c.unit), fmt_value(c.baseline, c.unit), pct,
                             fmt_value(c.threshold, c.unit), c.status])
    return rows


def _release(run: Run) -> list[str]:
    return release_lines(run.release, 3) if run.release is not None else []


def release_document(release_json: Mapping[str, Any]) -> str:
    """release.md: what was released, where, at which digest, verified how (from release.json)."""
    release, _ = release_of(release_json)
    assert release is not None
    return "\n".join(release_lines(release, 1)) + "\n"


def _trust_lines(rel: Release) -> list[str]:
    """Which trust policy judged the verifications, its verifiers, and who signed each released target's."""
    found = rel.raw.get("trust")
    if not isinstance(found, Mapping) or not isinstance(found.get("policy"), Mapping):
        return []
    pol, targets = found["policy"], found.get("targets")
    signed: Mapping[str, Any] = targets if isinstance(targets, Mapping) else {}
    verifiers = [v for v in pol.get("verifiers") or [] if isinstance(v, Mapping)]
    names = ", ".join(f"{text(str(v.get('name')))} ({cell(Code(str(v.get('keyid'))[:12]))})" for v in verifiers)
    lines = [f"Verifications believed under trust policy {cell(Code(str(pol.get('file'))))} "
             f"(sha256 {cell(Code(str(pol.get('sha256'))[:12]))}): verifiers {names or '-'}.", ""]
    lines += [f"- {text(str(t))}: signed by {text(str(a.get('verifier')))} about {cell(Code(str(a.get('subject'))))}"
              for t, a in sorted(signed.items()) if isinstance(a, Mapping)]
    return lines + ([""] if signed else [])


def release_lines(rel: Release, level: int) -> list[str]:
    """The release: targets, floating tags, evidence attached, problems; headings from ``level`` down."""
    h = "#" * level
    not_released = sum(not t.ok for t in rel.targets)
    lines = [f"{h} Release {text(rel.date)}: {text(rel.registry)}/{text(rel.repository)}", "",
             f"**{'OK' if rel.ok else 'FAILED'}**: {rel.pushed} references pushed, {rel.unchanged} unchanged, "
             f"{not_released} targets not released.", "",
             *_traffic_line(rel), *_trust_lines(rel),
             *table(["target", "status", "reference", "digest", "torch", "cuda", "python", "verification", "floating", "note",
                     "sent", "already there"],
                    [[t.target, t.status, Code(t.reference or "-"), Code((t.digest or "-")[:19]), t.versions.get("torch", "-"),
                      t.versions.get("cuda", "-"), t.versions.get("python", "-"), t.how, " ".join(t.floating) or "-", t.note,
                      _gb(t.traffic.pushed_bytes if t.traffic else None), _gb(t.traffic.existing_bytes if t.traffic else None)]
                     for t in rel.targets])]
    unvetted = [t for t in rel.targets if t.ok and t.gpu_verified is False]
    if unvetted:
        lines += ["", f"**{len(unvetted)} CUDA image{'s' if len(unvetted) > 1 else ''} {policy.NOT_GPU_VERIFIED}** "
                  f"(verified without a GPU; tags end in `{policy.CPU_VERIFIED_SUFFIX}`, no floating tags): "
                  + ", ".join(cell(Code(t.reference)) for t in unvetted)]
    if rel.indexes:
        lines += ["", f"{h}# Image indexes", "", *table(["tag", "action", "digest", "platforms", "note"], [
            [Code(i.tag), i.action, Code(i.digest[:19]), i.platforms, i.reason] for i in rel.indexes])]
    if rel.floating:
        lines += ["", f"{h}# Floating tags", "", *table(["tag", "action", "target", "torch", "digest", "note"], [
            [Code(f.tag), f.action, f.target or "-", f.torch or "-", Code((f.digest or "-")[:19]), f.reason] for f in rel.floating])]
    promoted = [[t.target, Code(t.source), f"{p.mounted:.0f} / {p.copied:.0f} / {p.present:.0f}", f"{p.bytes_moved:.0f}",
                 f"{p.seconds:g}"] for t in rel.targets if (p := t.promotion) is not None]
    if promoted:
        lines += ["", f"{h}# Promoted from staging", "",
                  *table(["target", "staged image", "blobs mounted / copied / present", "bytes moved", "seconds"], promoted)]
    evidence = [[Code((t.digest or "")[:19]), a.kind, Code((a.digest or "-")[:19]), a.size, a.status, "yes" if a.signed else "no"]
                for t in rel.targets for a in t.evidence]
    if evidence:
        lines += ["", f"{h}# Evidence attached", "", *table(["image digest", "artifact", "digest", "bytes", "status", "signed"], evidence)]
    found = [[t.target, f.id, f.severity, f.package, f.version, f.fixed or "-", f.allowed or ("blocks" if t.status == "vulnerable" else "-")]
             for t in rel.targets for f in t.vulnerabilities]
    if found:
        lines += ["", f"{h}# Known vulnerabilities", "",
                  *table(["target", "advisory", "severity", "package", "version", "fixed in", "allowed"], found)]
    problems = [*rel.errors, *(f"{t.target}: {t.error}" for t in rel.targets if t.error),
                *(f"image index {i.tag}: {i.reason}" for i in rel.indexes if i.action in ("held", "failed"))]
    if problems:
        lines += ["", f"{h}# Problems", "", *(f"- {text(p)}" for p in problems)]
    return lines + [""] if level > 1 else lines


def _traffic_line(rel: Release) -> list[str]:
    """What the pushes sent, and what the registry already had (the shared CUDA layer, parents)."""
    t = rel.traffic
    if t is None:
        return []
    return [f"Sent {_gb(t.pushed_bytes)} in {t.pushed_layers:.0f} layers; the registry already had "
            f"{t.existing_layers:.0f} layers ({_gb(t.existing_bytes)}).", ""]


def _gb(n: float | None) -> str:
    return "-" if n is None else gb(n)


def _build_failures(run: Run) -> list[str]:
    out: list[str] = []
    for t in run.targets:
        b = t.build
        if b is None or b.status != "failed":
            continue
        out += [f"**{text(t.id)}**: {text(b.error or 'failed')}  ", f"Dockerfile: {text(b.dockerfile)} · log: {text(b.log)}", ""]
        if b.log_tail:
            fence = "~" * max(3, 1 + max(len(m) for m in re.findall("~+", "\n".join(b.log_tail)) or [""]))
            out += [fence + "text", *b.log_tail, fence, ""]
    return ["### Build failures", "", *out] if out else []
