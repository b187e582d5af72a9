"""Markdown for CI job summaries (GitHub, GitLab): targets x status, failed checks, measured vs baseline.

Every value from a report is text another job wrote, so it must stay inert on a
CI page (GitHub and GitLab render GitLab-/GitHub-flavoured Markdown), and read
as itself in the raw file too (release.md is read raw as often as rendered). It
goes through :func:`cell` (tables) or :func:`text`, which escape only what
would be markup:

* ``<`` before a letter, ``/``, ``!`` or ``?`` (an HTML tag, a comment, an
  ``<https://…>`` autolink) and ``&`` that starts an entity (``&amp;``) are
  backslash-escaped; ``a < b`` and ``&&`` stay as they are;
* ``\\ [ ] ` |`` are backslash-escaped: with no bracket a link or an image
  cannot open (``[click](https://evil)``, ``![x](https://track/p.png)`` show as
  the characters they are), so parentheses need no escape;
* what GFM autolinks without any markup is broken with a word joiner (U+2060,
  invisible): ``scheme://`` (``https://``, ``ftp://``…), ``www.`` and
  ``name@domain.tld``;
* newlines cannot end a table row or a line, pipes cannot split a cell;
* control characters (ESC, BEL, U+202E...) are escaped (``\x1b``), as on a terminal (:mod:`imagesmith.inert`).

A :class:`Code` value is shown as a code span (nothing inside one is markup):
backticks cannot close it, pipes cannot split its cell.

Tables keep to six columns or fewer, so that a page on GitLab or GitHub shows them
without sideways scrolling; a note many rows share is printed once, numbered.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from imagesmith.inert import inert
from imagesmith.model import policy, releasereport
from imagesmith.model.releasereport import Attached, ReleaseReport
from imagesmith.report.chartdata import throughputs
from imagesmith.report.model import STATUSES, Run, fmt_value, footnotes, headline, release_summary
from imagesmith.units import fmt_bytes, gb


@dataclass(frozen=True)
class Code:
    """A cell shown as a code span (references, digests, tags)."""

    value: str


_PUNCTUATION = re.compile(r"([\\`\[\]|])")
_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)")  # what opens a tag, a comment, an autolink, an entity
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9+.-])(?=://)|(?<=\bwww)(?=\.)|(?<=@)(?=[a-z0-9-]+\.[a-z0-9])")
WORD_JOINER = "\u2060"


def cell(value: Any) -> str:
    """Inert in a Markdown table cell and a line of prose, rendered or raw (see the module docstring)."""
    if isinstance(value, Code):
        return "`" + _one_line(str(value.value)).replace("`", "'").replace("|", "\\|") + "`"
    escaped = _MARKUP.sub(lambda m: "\\" + m.group(0), _PUNCTUATION.sub(r"\\\1", _one_line(str(value))))
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


ICON = {"ok": "✅", "pass": "✅", "unvetted": "⚠️", "bad": "❌", "fail": "❌", "skip": "⏭️"}


def to_markdown(run: Run) -> str:
    """A summary for CI job pages: targets × status, failed checks, measured vs baseline."""
    lines = [f"## {ICON[run.tone]} imagesmith {run.kind}: {text(headline(run))}", "",
             text(" · ".join(p for p in (f"started {run.started_at}" if run.started_at else "",
                                         f"matrix {run.matrix}" if run.matrix else "", f"report {run.source}") if p)), ""]
    lines += _targets(run)
    lines += section("Failed checks", ["target", "check", "detail"], _checks(run, "fail"))
    lines += section("Warnings", ["target", "check", "detail"], _checks(run, "warn"))
    lines += section("Inconclusive (a shared GPU)", ["target", "check", "detail"], _checks(run, "inconclusive"))
    lines += section("GPU sharing", ["target", "GPUs during the run"], _sharing(run))
    lines += section("Measured against baseline", ["target", "check · GPU", "value", "% of baseline (baseline)", "fail line", "status"],
                     _rates(run))
    lines += _build_failures(run)
    lines += _release(run)
    return "\n".join(lines).rstrip() + "\n"


def _targets(run: Run) -> list[str]:
    """Targets × status; the build column only when there was a build, the checks only when there was a verify."""
    if run.kind == "release":
        return []  # the release's own table says it all
    has_build, has_verify = run.kind != "verify", run.kind != "build"
    headers = ["target", "status", *(["build"] if has_build else []), *(["checks"] if has_verify else [])]
    rows = []
    for t in run.targets:
        b, v = t.build, t.verify
        build = (f"{b.status} {b.seconds:.0f} s" + (f", {fmt_bytes(b.size_bytes)}" if b.size_bytes else "")) if b else "-"
        counts = (", ".join(f"{v.count(s)} {s}" for s in STATUSES if v.count(s)) or "none") if v else "-"
        rows.append([f"{ICON[t.tone]} {t.id}", t.status, *([build] if has_build else []), *([counts] if has_verify else [])])
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
                pct = f"{100 * rate.value / c.baseline:.1f}% ({fmt_value(c.baseline, c.unit)})" if c.baseline else "-"
                rows.append([t.id, f"{c.id} · {rate.gpu}", fmt_value(rate.value, c.unit), pct, fmt_value(c.threshold, c.unit), c.status])
    return rows


def _release(run: Run) -> list[str]:
    return release_lines(run.release, 3) if run.release is not None else []


def release_document(release_json: Mapping[str, Any]) -> str:
    """release.md from a release.json read from disk (see :func:`release_markdown`)."""
    return release_markdown(releasereport.parse(release_json))


def release_markdown(release: ReleaseReport) -> str:
    """release.md: what was released, where, at which digest, verified how."""
    return "\n".join(release_lines(release, 1)) + "\n"


def _trust_lines(rel: ReleaseReport) -> list[str]:
    """Which trust policy judged the verifications, and its verifiers (who signed each target: the table's
    verification column)."""
    if rel.trust is None:
        return []
    names = ", ".join(f"{text(v.name)} (key {cell(Code(v.keyid[:12]))})" for v in rel.trust.verifiers)
    return [f"Verifications believed under trust policy {cell(Code(rel.trust.file))} "
            f"(sha256 {cell(Code(rel.trust.sha256[:12]))}), verifiers: {names or '-'}. Each signed statement names "
            "the image its verifier ran; the release pushed that image as the digest in the table.", ""]


def _numbered(notes: Mapping[str, int]) -> list[str]:
    return ["Notes:", "", *(f"{n}. {text(note)}" for note, n in notes.items()), ""] if notes else []


def release_lines(rel: ReleaseReport, level: int) -> list[str]:
    """The release: the verdict and what went where first, then versions, floating tags, evidence, problems;
    headings from ``level`` down; no table wider than six columns, each shared note once."""
    h = "#" * level
    notes = footnotes(t.note for t in rel.targets)
    signers = rel.trust.signers if rel.trust is not None else {}
    lines = [f"{h} Release {text(rel.date)}: {text(rel.registry)}/{text(rel.repository)}", "",
             f"**{'OK' if rel.ok else 'FAILED'}**: {text(release_summary(rel))}.", "", *_unvetted_lines(rel),
             *table(["target", "status", "tag", "digest", "verification", "note"],
                    [[t.target, t.status, Code(t.short_tag), Code((t.digest or "-")[:19]),
                      t.how + (f", signed by {signers[t.target]}" if t.target in signers else ""),
                      f"note {notes[t.note]}" if t.note else "-"] for t in rel.targets]),
             "", *_numbered(notes), *_trust_lines(rel)]
    lines += [f"{h}# Versions and traffic", "", *_traffic_line(rel), *table(
        ["target", "torch", "CUDA", "Python", "sent", "already there"],
        [[t.target, t.versions.get("torch", "-"), t.versions.get("cuda", "-"), t.versions.get("python", "-"),
          _gb(t.traffic.pushed_bytes if t.traffic else None), _gb(t.traffic.existing_bytes if t.traffic else None)]
         for t in rel.targets])]
    if rel.indexes:
        lines += ["", f"{h}# Image indexes", "", *table(["tag", "action", "digest", "platforms", "floating", "note"], [
            [Code(i.tag), i.action, Code(i.digest[:19]), i.platforms, " ".join(i.floating) or "-", i.reason] for i in rel.indexes])]
    if rel.floating:
        lines += ["", f"{h}# Floating tags", "", *table(["tag", "action", "target", "torch", "digest", "note"], [
            [Code(f.tag), f.action, f.target or "-", f.torch or "-", Code((f.digest or "-")[:19]), f.reason] for f in rel.floating])]
    promoted = [[t.target, Code(t.source), f"{p.mounted:.0f} / {p.copied:.0f} / {p.present:.0f}", f"{p.bytes_moved:.0f}",
                 f"{p.seconds:g}"] for t in rel.targets if (p := t.promotion) is not None]
    if promoted:
        lines += ["", f"{h}# Promoted from staging", "",
                  *table(["target", "staged image", "blobs mounted / copied / present", "bytes moved", "seconds"], promoted)]
    evidence = [_evidence_row(t.digest or "", t.evidence) for t in rel.targets if t.evidence]
    if evidence:
        lines += ["", f"{h}# Evidence attached", "", *table(["image digest", "signed artifacts", "unsigned", "status"], evidence)]
    found = [[t.target, f.id, f.severity, f"{f.package} {f.version}", f.fixed or "-",
              f.allowed or ("blocks" if t.status == "vulnerable" else "-")] for t in rel.targets for f in t.vulnerabilities]
    if found:
        lines += ["", f"{h}# Known vulnerabilities", "",
                  *table(["target", "advisory", "severity", "package", "fixed in", "allowed"], found)]
    problems = [*rel.errors, *(f"{t.target}: {t.error}" for t in rel.targets if t.error),
                *(f"image index {i.tag}: {i.reason}" for i in rel.indexes if i.action in ("held", "failed"))]
    if problems:
        lines += ["", f"{h}# Problems", "", *(f"- {text(p)}" for p in problems)]
    return lines + [""] if level > 1 else lines


def _unvetted_lines(rel: ReleaseReport) -> list[str]:
    unvetted = [t for t in rel.targets if t.ok and t.gpu_verified is False]
    if not unvetted:
        return []
    many = len(unvetted) > 1
    return [f"**{len(unvetted)} CUDA image{'s' if many else ''} {policy.NOT_GPU_VERIFIED}**: verified without a GPU, "
            f"{'their tags end' if many else 'its tag ends'} in `{policy.CPU_VERIFIED_SUFFIX}`, no floating tags.", ""]


def _evidence_row(digest: str, attached: Sequence[Attached]) -> list[Any]:
    """One row per released digest: the artifacts attached to it, signed and not, and how their pushes ended."""
    statuses = Counter(a.status for a in attached)
    return [Code(digest[:19]), ", ".join(a.kind for a in attached if a.signed) or "-",
            ", ".join(a.kind for a in attached if not a.signed) or "-", ", ".join(f"{n} {s}" for s, n in statuses.items())]


def _traffic_line(rel: ReleaseReport) -> list[str]:
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
