"""The payload's answer, read and judged on the host: the one report line (read by the strict loader), checked
against the run's request; a failed report for a run that never answered, saying what ran and who exited; the host's
notes (ENTRYPOINT, --expect against the labels, where torch is); the running and the finished report."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Callable, Mapping, Sequence

from imagesmith import runstate
from imagesmith.errors import ImagesmithError
from imagesmith.model import loader, verifyreport
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.resources import payload_module
from imagesmith.stages.verify import entrypoint as entrypoints
from imagesmith.stages.verify.payload import STARTED, check_entry
from imagesmith.stages.verify.verify import CORE, LABEL, MARKER, REPORT_SCHEMA, Request, VerifyOptions


def parse_marker(stdout: str) -> dict[str, Any] | None:
    """The one report line in ``stdout``, unjudged; None when there is none or it is unreadable."""
    report, _ = find_marker(stdout)
    return report if isinstance(report, dict) else None


def find_marker(stdout: str) -> tuple[Any, str | None]:
    """(the report, None) from output holding exactly one report line; (None, None) without one; (None, why)
    otherwise. The line is read by the one strict reader (:func:`imagesmith.model.loader.parse_json_line`): the
    image under test wrote it, so ``NaN``, ``Infinity``, a duplicate key or deep nesting end the run as a failed
    check, never in a signed report."""
    lines = [line.rstrip("\r") for line in stdout.split("\n") if line.startswith(MARKER)]
    if not lines:
        return None, None
    if len(lines) > 1:
        return None, (f"{len(lines)} report lines in the output (the payload prints one): something in the "
                      "image prints its own")
    try:
        return loader.parse_json_line(lines[0][len(MARKER):], "the report line"), None
    except loader.LoadError as exc:
        return None, f"the report line is not strict JSON ({exc.why}; {len(lines[0])} characters)"


def finished_marker(stdout: str, ref: Any) -> VerifyReport | None:
    """A fleet cell's report from a job's output (a node wrote it: untrusted), finished with the image it ran
    (``ref``, its digest); None without one, or with one imagesmith does not read (the cell then has no report)."""
    found = parse_marker(stdout)
    if found is None:
        return None
    try:
        return verifyreport.parse(finish(found, {"ref": str(ref), "digests": [str(ref)]}, None, "", 0.0), "the job's report line")
    except loader.LoadError:
        return None


def judge_output(stdout: str, request: Request) -> tuple[dict[str, Any] | None, str | None]:
    """(the report, None) when ``stdout`` holds exactly one report line that follows the
    schema and answers ``request`` (its nonce, its tier, each check asked for once);
    (None, why) when it holds a report that does not; (None, None) when it holds none.
    Never raises: the output comes from the image."""
    schema = payload_module("report")
    try:
        report, problem = find_marker(stdout)
        if problem or report is None:
            return None, problem
        problems = schema.validate_report(report) if not isinstance(report, dict) else (
            schema.answers_request(report, request.nonce, dict(request.checks), request.tier)
            + schema.validate_report(report))
        if not problems:  # the host's schema of the verify report too: what is signed must be what publish reads
            loader.check_schema(report, REPORT_SCHEMA, "report")
    except loader.LoadError as exc:
        return None, f"the report was rejected: {exc.where}: {exc.why}"
    except Exception as exc:  # noqa: BLE001 - anything in the output must end as a failed check, not exit 3
        return None, f"the report could not be read ({type(exc).__name__})"
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return None, "the report was rejected: " + "; ".join(problems[:3]) + more
    return dict(report), None


def failed_report(check_id: str, detail: str, tier: str) -> dict[str, Any]:
    """A report for a payload that never reported: one failed check saying why."""
    check = check_entry(check_id, "payload ran and reported", "fail", detail)
    return {"schema": REPORT_SCHEMA, "tier": tier, "environment": {}, "checks": [check],
            "summary": {"pass": 0, "warn": 0, "fail": 1, "skip": 0, "inconclusive": 0, "ok": False},
            "sharing": {"exclusive": None, "allowed": False, "foreign": []}}


def with_checks(report: dict[str, Any], entries: list[dict[str, Any]], first: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """``report`` with the host's own check entries added (``first`` before the payload's: they ran before it)
    and the summary recounted."""
    if not entries and not first:
        return report
    checks = [*first, *(report.get("checks") or []), *entries]
    return report | {"checks": checks, "summary": payload_module("report").summarize(checks)}


def expect_conflicts(labels: Mapping[str, str], expect: Mapping[str, str]) -> list[str]:
    """--expect values that differ from what the image's labels declare (both named: one of them is wrong)."""
    pins = {n: v for n, _, v in (s.partition("==") for s in labels.get(LABEL + "packages", "").split()) if v}
    out = []
    for key, value in expect.items():
        label = LABEL + key.replace("_", ".") if key in CORE else LABEL + "packages"
        declared = labels.get(label) if key in CORE else pins.get(key)
        if declared and str(declared).lower() != str(value).lower():
            out.append(f"--expect {key}={value} overrides the image's label {label} ({key} {declared}): "
                       "the checks compare against the --expect value; one of the two is wrong")
    return out


def with_notes(report: dict[str, Any], launch: entrypoints.Launch, options: VerifyOptions,
               labels: Mapping[str, str], history: Callable[[], Sequence[Mapping[str, Any]]] = list) -> dict[str, Any]:
    """The report with the host's notes: how the payload ran beside the image's ENTRYPOINT, --expect against
    lying labels; a torch that did not import says what to do (``history``: the image's build steps, read only
    when nothing in the image puts the torch found elsewhere on PATH), or names the ENTRYPOINT it bypassed."""
    note = launch.note()
    notes = [*(report.get("notes") or []), *([note] if note else []), *expect_conflicts(labels, options.expect)]
    checks = [_where_torch_is(c, launch, note, history) for c in report.get("checks") or []]
    return report | {"notes": notes, "checks": checks} if notes or checks != report.get("checks") else report


def _where_torch_is(check: Any, launch: entrypoints.Launch, note: str | None,
                    history: Callable[[], Sequence[Mapping[str, Any]]] = list) -> Any:
    """versions.torch, torch not importable: what to do where the payload found torch elsewhere (its
    ``data.elsewhere``), else the ENTRYPOINT it bypassed."""
    if not isinstance(check, dict) or check.get("id") != "versions.torch" or "not importable" not in str(check.get("detail")):
        return check
    data = check.get("data")
    data = data if isinstance(data, dict) else {}
    found = [f for f in data.get("elsewhere") or [] if isinstance(f, dict) and isinstance(f.get("prefix"), str)]
    if found:
        dropped = parent_path(history, str(found[0]["prefix"])) if not found[0].get("on_path") else None
        return check | {"detail": f"{check.get('detail')}; {remedy(found[0], launch, dropped)}"}
    return check | {"detail": f"{check.get('detail')} ({note})"} if note and not launch.through else check


ENV_PATH = re.compile(r"\bENV\s+PATH[= ]\s*(\S+)")


def parent_path(history: Callable[[], Sequence[Mapping[str, Any]]], prefix: str) -> str | None:
    """An earlier build step's ``ENV PATH`` that held ``prefix``/bin (a parent image's, say), which a later ENV PATH
    dropped: the image's history (``docker history``: CreatedBy, newest first). None when none did, or unreadable."""
    try:
        steps = list(history())
    except (ImagesmithError, OSError):
        return None
    bin_dir = prefix.rstrip("/") + "/bin"
    for step in steps:
        found = ENV_PATH.search(str(step.get("CreatedBy") or "")) if isinstance(step, Mapping) else None
        if found and bin_dir in found.group(1).strip("\"'").split(":"):
            return found.group(1).strip("\"'")[:200]
    return None


def remedy(found: Mapping[str, Any], launch: entrypoints.Launch, dropped: str | None = None) -> str:
    """What to do about torch in ``found`` (an environment the payload found, with what puts it on PATH);
    ``dropped``: an earlier ENV PATH that held it (:func:`parent_path`)."""
    scopes = payload_module("envsearch")
    fix = f"set ENV PATH={str(found['prefix'])[:200].rstrip('/')}/bin:$PATH"
    if dropped:
        return f"an earlier build step's ENV PATH={dropped} held it, and a later ENV PATH dropped it: {fix}"
    by = {str(b.get("scope")) for b in found.get("on_path") or [] if isinstance(b, dict)}
    if by & {scopes.LOGIN, scopes.BASH} and not launch.login_shell:
        return f"run with --login-shell or {fix}"
    if scopes.ENTRYPOINT in by and launch.entrypoint and not launch.through:
        return f"run it through the ENTRYPOINT ({entrypoints.THROUGH}) or {fix}"
    if any(scope.startswith("every command") for scope in by):
        return f"put its bin first in ENV PATH ({fix})"
    if scopes.INTERACTIVE in by:
        return f"{fix} (a verify run, like `docker run IMAGE COMMAND`, starts no interactive shell)"
    return fix


def running_report(ref: str | None, tier: str) -> dict[str, Any]:
    """What a verify report says while its run goes on (and, interrupted, after)."""
    return {"schema": REPORT_SCHEMA, "tier": tier, "started_at": now(), "environment": {}, "checks": [],
            "summary": {"pass": 0, "warn": 0, "fail": 0, "skip": 0, "inconclusive": 0, "ok": False},
            "image": {"ref": ref} if ref else None}


def finish(report: dict[str, Any], image: Mapping[str, Any] | None, nvml: Mapping[str, Any] | None,
           started: str, seconds: float) -> dict[str, Any]:
    """The payload's report with the host's view added (image, NVML, wall time)."""
    out = dict(report)
    out["schema"] = REPORT_SCHEMA
    out["payload_schema"] = report.get("schema")
    out.setdefault("started_at", started)
    out["wall_s"] = round(seconds, 2)
    out["image"] = dict(image) if image else None
    out["nvml"] = dict(nvml) if nvml else None
    out["state"] = runstate.COMPLETE
    return out


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


NO_PYTHON = "the image has no python3 on its PATH, so nothing in it can be verified"


def no_python(launch: entrypoints.Launch) -> str:
    """No python3 where the payload looked for it: the image's PATH, the one its ENTRYPOINT or login shell sets."""
    if launch.login_shell:
        return "the image's login shell (--login-shell) finds no python3 on the PATH it sets, so the payload could not start"
    if launch.through:
        return (f"the image's ENTRYPOINT {entrypoints.shown(launch.entrypoint)} finds no python3 on the PATH it gives the "
                f"command it runs, so the payload could not start through it; {entrypoints.BYPASS} runs the image's own python3")
    return NO_PYTHON


def _lines(text: str, n: int = 3) -> str:
    return " | ".join(line[:300] for line in text.strip().splitlines()[-n:]) if text.strip() else ""


def why_no_report(code: int, stdout: str, stderr: str, launch: entrypoints.Launch | None = None) -> str:
    """Why the run left no report, saying what ran and who exited: the payload (whose first line is on stderr,
    :data:`STARTED`), or what ran before it and never started it (the image's ENTRYPOINT, its login shell, a
    python3 that ignored its arguments)."""
    launch = launch or entrypoints.Launch()
    started, output = STARTED in stderr, stderr + "\n" + stdout
    last = _lines(stderr) or _lines(stdout) or "no output"
    if not started and "python3" in output and ("not found" in output or "No such file" in output):
        return no_python(launch)
    if not started and launch.through:
        return (f"the image's ENTRYPOINT {entrypoints.shown(launch.entrypoint)} exited {code} before the payload started "
                f"(it was given python3 run.py as `docker run IMAGE python3 ...` gives it a command): {last}")
    if not started:
        what = "the image's login shell (--login-shell)" if launch.login_shell else "the image's python3"
        return f"{what} exited {code} without starting the payload ({launch.ran()}; it did not run its arguments): {last}"
    return (f"the payload exited {code} without a report ({launch.ran()}; it crashed, or something in the image "
            f"swallowed its output): {last}")
