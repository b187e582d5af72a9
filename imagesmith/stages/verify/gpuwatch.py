"""The run's verdict on its GPUs: what the host watched, joined with what the payload reported.

The payload reports each check's window and what it could see from where it ran (inside a container
its NVML lists only the container's processes; the device's memory it does see). The host's watch
(:class:`imagesmith.edges.gpuwatch.ProcessWatch`, on the engine's own host) lists every process. This
module joins the two into the report's ``sharing`` key and judges each throughput check against the
tenants of its own window (the payload's rule, ``sharing.judge_entry``: one rule, both sides):

* ``exclusive: false`` when anybody saw a tenant on a GPU the run used;
* ``exclusive: true`` only when the host watched the whole run (sampled from before the container was
  created until it was gone, no gap over :data:`MAX_GAP_S`, no NVML error), listed the run's own
  processes (so its lists are the run's namespace's) and accounted for every byte of memory;
* ``null`` otherwise, with the reason (a remote engine, no NVML here, a watch that never saw the run).
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Mapping, Sequence

from imagesmith.resources import payload_module

MAX_GAP_S = 1.0  # a tenant that comes and goes between two samples further apart could be missed
GPU_NEEDS = ("gpu", "multi_gpu")


def payload_gpus(report: Mapping[str, Any]) -> dict[str, int]:
    """NVML UUID -> the payload's GPU index, from the payload's environment.gpus (untrusted: types checked)."""
    env = report.get("environment")
    gpus = env.get("gpus") if isinstance(env, Mapping) else None
    out: dict[str, int] = {}
    for g in gpus if isinstance(gpus, list) else []:
        if isinstance(g, Mapping) and isinstance(g.get("uuid"), str) and isinstance(g.get("index"), int):
            out[g["uuid"]] = int(g["index"])
    return out


def tenants(watch: Mapping[str, Any], visible: Mapping[str, int]) -> list[dict[str, Any]]:
    """The watch's foreign processes, and memory nobody it listed held, on the GPUs the run used."""
    record = payload_module("sharing").record
    rows = [record(visible[p["uuid"]], p["uuid"], p["pid"], p["name"], p["used_bytes"], "during", p["first"], p["last"], by="host")
            for p in watch.get("processes") or [] if p.get("owner") == "foreign" and p.get("uuid") in visible]
    if watch.get("own_seen"):  # a watch that never listed the run's processes counts the run's own memory as unseen
        rows += [record(visible[u["uuid"]], u["uuid"], None, None, u["used_bytes"], "during", u["first"], u["last"], by="host")
                 for u in watch.get("unseen") or [] if u.get("uuid") in visible]
    return rows


def whole(watch: Mapping[str, Any], visible: Mapping[str, int]) -> str | None:
    """Why the watch does not stand for the whole run (None when it does)."""
    if watch.get("error"):
        return str(watch["error"])
    if not watch.get("samples"):
        return "the host's watch took no sample"
    if float(watch.get("largest_gap_s") or 0.0) > MAX_GAP_S:
        return f"the host's watch paused for {watch['largest_gap_s']:.1f} s (more than {MAX_GAP_S:g} s) during the run"
    if not watch.get("own_seen"):
        return ("NVML on this host never listed the run's own processes (imagesmith runs in another PID namespace than "
                "the engine's containers?): its lists say nothing of others")
    accounted = watch.get("accounted_samples") or {}
    if any(not accounted.get(u) for u in visible):
        return "this driver gives no per-device memory v2 figures: memory of processes NVML does not list goes unnoticed"
    return None


def join(report: dict[str, Any], watch: Mapping[str, Any] | None, unwatched: str | None, allowed: bool) -> dict[str, Any]:
    """``report`` with the host's ``sharing`` verdict, its throughput checks judged against their windows, the
    summary and the mode's GPU counts recounted. ``watch``: the host's record (None: not watched, ``unwatched`` says why)."""
    paid = report.get("sharing")
    visible = payload_gpus(report)
    if not visible:  # CPU mode, or a payload that did not say which GPUs: nothing to judge
        return report
    by_payload = [dict(f) for f in (paid.get("foreign") if isinstance(paid, Mapping) else None) or [] if isinstance(f, Mapping)]
    why: str | None
    if watch is None:
        found, why = by_payload, unwatched or "the host did not watch the GPUs"
    else:
        found, why = tenants(watch, visible) or by_payload, whole(watch, visible)
    if found:
        exclusive, reason = False, f"another process used the GPU: {payload_module('sharing').describe(found)}"
    elif why is None and watch is not None:
        exclusive, reason = True, (f"the host watched every {watch.get('interval_s')} s for the whole run "
                                   f"({watch.get('samples')} samples): no other process, every MiB accounted for")
    else:
        exclusive, reason = None, why or "not watched"
    shared = {"exclusive": exclusive, "allowed": allowed, "foreign": list(found), "reason": reason}
    return rejudge(report, shared)


def rejudge(report: dict[str, Any], shared: Mapping[str, Any]) -> dict[str, Any]:
    """The report with ``shared`` as its sharing key and every check judged against it (summary, mode recounted)."""
    registry = _registry()
    throughput = {cid for cid, spec in registry.items() if spec.throughput}
    checks = payload_module("sharing").judge_throughput_entries(list(report.get("checks") or []), shared, throughput)
    checks = [named(c, shared) if isinstance(c, Mapping) and c.get("id") in throughput else c for c in checks]
    out = report | {"sharing": dict(shared), "checks": checks, "summary": payload_module("report").summarize(checks)}
    mode = report.get("mode")
    if isinstance(mode, Mapping):
        out["mode"] = dict(mode) | {"gpu_checks": gpu_counts(checks, registry)}
    return out


def named(check: Mapping[str, Any], shared: Mapping[str, Any]) -> Any:
    """A check the payload found inconclusive, its tenant described as the verdict names it (the host's PIDs, where
    the payload inside a container could only weigh memory nobody it could list held)."""
    sharing = payload_module("sharing")
    if check.get("status") != "inconclusive" or shared.get("allowed") or not str(check.get("detail", "")).startswith("inconclusive: "):
        return check
    hit = sharing.during(sharing.window_of(check), [f for f in shared.get("foreign") or [] if isinstance(f, Mapping)])
    if not hit:
        return check
    measured = str(check.get("detail", "")).partition("; measured: ")[2]
    return dict(check) | {"detail": f"inconclusive: {sharing.describe(hit)} during this check" + (f"; measured: {measured}" if measured else "")}


def _registry() -> Mapping[str, Any]:
    payload_module("checks")  # registers every check
    registry: Mapping[str, Any] = payload_module("registry").REGISTRY
    return registry


def gpu_counts(checks: Sequence[Any], registry: Mapping[str, Any]) -> dict[str, int]:
    """How the checks that need a GPU ended (the payload's mode.gpu_checks, counted again)."""
    counts = {status: 0 for status in ("pass", "warn", "fail", "skip", "inconclusive")}
    for c in checks:
        spec = registry.get(str(c.get("id"))) if isinstance(c, Mapping) else None
        if spec is not None and spec.needs in GPU_NEEDS and c.get("status") in counts:
            counts[c["status"]] += 1
    return counts


def host_indexes(report: dict[str, Any], nvml: Mapping[str, Any] | None) -> dict[str, Any]:
    """environment.gpus with each GPU's host NVML index (``host_index``), matched by UUID: with ``--gpus 2,3`` the
    payload's GPU 0 is the host's 2, and the metrics carry the host's index as the DCGM exporter does."""
    gpus = (nvml or {}).get("gpus") if isinstance(nvml, Mapping) else None
    index = {g.get("uuid"): g.get("index") for g in gpus or [] if isinstance(g, Mapping)}
    env = report.get("environment")
    if not isinstance(env, Mapping) or not isinstance(env.get("gpus"), list) or not index:
        return report
    listed = [dict(g) | ({"host_index": index[g["uuid"]]} if isinstance(g, Mapping) and g.get("uuid") in index else {})
              for g in env["gpus"] if isinstance(g, Mapping)]
    return report | {"environment": dict(env) | {"gpus": listed}}


# "[ 3/12] gemm.bf16                fail  271.3 TFLOP/s   2.1s  34% of baseline": the payload's progress line
PROGRESS = re.compile(r"^\[\s*\d+/\d+\] (?P<id>\S+)\s+(?P<status>pass|warn|fail|skip|inconclusive)\b.*?(?P<s>\d+\.\d)s  ")
SUMMARY = re.compile(r"^imagesmith payload: \d+ pass, .* -> ")


def live(progress: Callable[[str], None] | None, watch: Callable[[], Any]) -> Callable[[str], None] | None:
    """The payload's stderr lines as they come, in the host's words: a throughput check that fell short while the
    host's watch saw a tenant says ``inconclusive`` and names it (the report will), and the payload's own summary line
    is left out (the host prints the verdict once it has joined what it watched)."""
    if progress is None:
        return None
    throughput = {cid for cid, spec in _registry().items() if spec.throughput}

    def line(text: str) -> None:
        if SUMMARY.match(text):
            return
        got, seen = PROGRESS.match(text), watch()
        if got and seen is not None and got["id"] in throughput and got["status"] in ("fail", "warn"):
            now = time.time()
            hit = seen.foreign_between(now - float(got["s"]) - 1.0, now)
            if hit:
                text = (f"{text[:got.start('status')]}inconclusive{text[got.end('status'):]} (the host saw "
                        f"{payload_module('sharing').describe([_as_record(h) for h in hit])} during this check)")
        progress(text)
    return line


def _as_record(seen: Mapping[str, Any]) -> dict[str, Any]:
    return {"gpu": seen.get("index", "?"), "pid": seen.get("pid"), "name": seen.get("name"), "used_bytes": seen.get("used_bytes")}
