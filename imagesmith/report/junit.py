"""JUnit XML for CI test tabs: one testsuite per target, a testcase per build, check and release.

Built with ElementTree, which escapes text and attributes (``<``, ``&``, quotes,
``]]>``); :func:`xml_text` removes what XML 1.0 cannot carry at all.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from imagesmith.model.releasereport import Released
from imagesmith.report.model import Built, Check, Run, Target, clean, fmt_value, headline
from imagesmith.units import fmt_bytes


def to_junit(run: Run) -> str:
    """One testsuite per target: a ``build`` testcase, then one testcase per check.

    fail -> <failure>; skip -> <skipped>; warn -> passed, with the warning in
    <system-out>; a failed *optional* check -> <skipped> (it does not fail the
    target, so it must not turn CI red).
    """
    root = ET.Element("testsuites", name=f"imagesmith {run.kind}")
    if not run.complete:
        root.append(_unfinished_suite(run))
    for t in run.targets:
        root.append(_suite(t, run.started_at))
    sum_counts(root, root.findall("testsuite"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def xml_text(text: Any) -> str:
    """ElementTree escapes markup; what it cannot carry (control characters, escape codes) is dropped here."""
    return clean(str(text))


def _unfinished_suite(run: Run) -> ET.Element:
    """A run that did not complete is a failure in CI, whatever its targets say."""
    suite = ET.Element("testsuite", name="run")
    case = _case("run", "state", None)
    ET.SubElement(case, "failure", message=xml_text(headline(run)), type="incomplete").text = xml_text("; ".join(run.unfinished))
    suite.append(case)
    sum_counts(suite, [case])
    return suite


def _suite(t: Target, timestamp: str) -> ET.Element:
    suite = ET.Element("testsuite", name=xml_text(t.id))
    if timestamp:
        suite.set("timestamp", xml_text(timestamp))
    if t.build is not None:
        suite.append(_build_case(t.id, t.build))
    if t.verify is not None:
        for c in t.verify.checks:
            suite.append(_check_case(t.id, c))
    elif t.verify_expected:
        suite.append(_unverified_case(t))
    if t.release is not None:
        suite.append(_release_case(t.id, t.release))
    sum_counts(suite, suite.findall("testcase"))
    return suite


def _unverified_case(t: Target) -> ET.Element:
    """A run without a verify report for a target: skipped when its build failed (that failure is
    reported), a failure when it was built (the image went unverified)."""
    case = _case(t.id, "verify", None)
    if t.build is not None and not t.build.ok:
        ET.SubElement(case, "skipped", message=f"not verified: build {t.build.status}")
    else:
        ET.SubElement(case, "failure", message="no verify report for this target", type="verify")
    return case


def _status_text(status: str, error: str | None) -> str:
    """``not-verified`` + ``not verified`` says it once."""
    return status if not error or error.replace(" ", "-") == status else f"{status}: {error}"


def _release_case(target: str, rel: Released) -> ET.Element:
    """pushed/unchanged pass; not-built/not-verified are skipped (their cause failed elsewhere); the rest fail."""
    case = _case(target, "release", None)
    where = f"{rel.reference}@{rel.digest}" if rel.digest else rel.reference
    found = "".join(f"\n{f.id} {f.severity}: {f.package} {f.version}, fixed in {f.fixed or '-'}" + (f" (allowed {f.allowed})" if f.allowed else "")
                    for f in rel.vulnerabilities)
    if rel.ok:
        ET.SubElement(case, "system-out").text = xml_text(f"{rel.status} {where} {' '.join(rel.floating)}".strip() + found)
    elif rel.status in ("not-built", "not-verified"):
        ET.SubElement(case, "skipped", message=xml_text(_status_text(rel.status, rel.error)))
    else:
        ET.SubElement(case, "failure", message=xml_text(rel.error or rel.status), type="release").text = xml_text(_status_text(rel.status, rel.error) + found)
    return case


def _case(classname: str, name: str, seconds: float | None) -> ET.Element:
    return ET.Element("testcase", classname=xml_text(classname), name=xml_text(name), time=f"{seconds or 0:.3f}")


def _build_case(target: str, b: Built) -> ET.Element:
    case = _case(target, "build", b.seconds)
    if b.status == "failed":
        text = [b.error or "failed", f"Dockerfile: {b.dockerfile}", f"log: {b.log}", *b.mismatches, *b.log_tail]
        ET.SubElement(case, "failure", message=xml_text(b.error or "build failed"), type="build").text = xml_text("\n".join(text))
    elif not b.ok:
        ET.SubElement(case, "skipped", message=xml_text(f"{b.status}: {b.error or ''}".rstrip(": ")))
    else:
        out = f"{b.status} {b.image} ({b.image_id or '-'}), {fmt_bytes(b.size_bytes) if b.size_bytes else 'size unknown'}"
        ET.SubElement(case, "system-out").text = xml_text(out)
    return case


def _check_case(target: str, c: Check) -> ET.Element:
    case = _case(target, c.id, c.duration_s)
    figures = _figures(c)
    if c.failed:
        ET.SubElement(case, "failure", message=xml_text(c.detail or "failed"), type=xml_text(c.id)).text = xml_text("\n".join([c.detail, *figures]))
    elif c.status == "fail":
        ET.SubElement(case, "skipped", message=xml_text(f"optional check failed: {c.detail}"))
    elif c.status == "skip":
        ET.SubElement(case, "skipped", message=xml_text(c.detail or "skipped"))
    elif c.status == "inconclusive":  # measured on a shared GPU: neither a pass nor the GPU's failure
        ET.SubElement(case, "skipped", message=xml_text(c.detail or "inconclusive"))
    else:
        note = ("WARN: " if c.status == "warn" else "") + "\n".join([c.detail, *figures])
        ET.SubElement(case, "system-out").text = xml_text(note.strip())
    return case


def _figures(c: Check) -> list[str]:
    out = []
    if c.value is not None:
        out.append(f"value: {fmt_value(c.value, c.unit)}")
    if c.threshold is not None:
        out.append(f"threshold: {fmt_value(c.threshold, c.unit)}")
    if c.baseline is not None:
        pct = f" ({c.percent_of_baseline:g}% of it)" if c.percent_of_baseline is not None else ""
        out.append(f"baseline: {fmt_value(c.baseline, c.unit)}{pct}")
    return out


def sum_counts(element: ET.Element, children: list[ET.Element]) -> None:
    if element.tag == "testsuites":
        totals = {k: sum(int(s.get(k, "0")) for s in children) for k in ("tests", "failures", "errors", "skipped")}
        seconds = sum(float(s.get("time", "0")) for s in children)
    else:
        totals = {"tests": len(children), "failures": sum(c.find("failure") is not None for c in children),
                  "errors": 0, "skipped": sum(c.find("skipped") is not None for c in children)}
        seconds = sum(float(c.get("time", "0")) for c in children)
    for key, value in totals.items():
        element.set(key, str(value))
    element.set("time", f"{seconds:.3f}")
