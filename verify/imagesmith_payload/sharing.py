"""Who else uses the GPUs: NVML's process lists at the start and at the end of a run (no torch here).

The rule (docs/verification-fleet.md, "A shared GPU"):

* The start snapshot is taken before the payload creates any CUDA context, so every
  process NVML lists then is foreign.
* At the end the payload holds a context on each GPU it used. A listed PID that is the
  payload's own or one of its descendants is ours (host mode: one PID namespace).
* Inside a container NVML lists host PIDs, which mean nothing in the container's /proc.
  When none of the listed PIDs is ours, the payload grows its memory on that GPU by a
  marker amount and lists again: the one PID whose used memory grew by at least 90 % of
  the marker is ours. Where NVML reports no per-process memory, a PID that was not there at
  the start is ours only if it is the only new one; otherwise exclusivity is unknown (null).
* Names come from /proc only where the PIDs are ours to read (the payload found its own
  PID in NVML's list); inside a container a foreign process has no name.

A foreign process makes the run not exclusive. Throughput checks that fell short on a
shared GPU end ``inconclusive`` (they measured the tenant's share, not the GPU), unless
the user asked to measure that share (``--allow-shared-gpu``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .judge import FAIL, INCONCLUSIVE, WARN

MARKER_BYTES = 256 * 2**20
MARKER_MATCH = 0.9  # the share of the marker a PID's used memory must grow by to be ours
Listing = List[Tuple[int, Optional[int]]]  # (pid, used bytes or None)


@dataclass(frozen=True)
class Seen:
    uuid: str
    pid: int
    used_bytes: Optional[int]
    name: Optional[str] = None


@dataclass(frozen=True)
class Snapshot:
    procs: Tuple[Seen, ...] = ()
    utilization: Mapping[str, Optional[int]] = field(default_factory=dict)  # uuid -> GPU busy %
    error: Optional[str] = None


class NvmlSource:
    """The process lists of every device NVML shows (through nvml.Nvml)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def devices(self) -> List[str]:
        return [self.nvml.uuid(self.nvml.handle(i)) for i in range(self.nvml.device_count())]

    def processes(self, uuid: str) -> Listing:
        return list(self.nvml.processes(self.nvml.handle(0, uuid)))

    def utilization(self, uuid: str) -> Optional[int]:
        value = self.nvml.utilization_pct(self.nvml.handle(0, uuid))
        return None if value is None else int(value)


def proc_name(pid: int, proc_root: str = "/proc") -> Optional[str]:
    try:
        with open(os.path.join(proc_root, str(pid), "comm"), encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()[:64] or None
    except OSError:
        return None


def take(source: Any) -> Snapshot:
    """Every process on every device, and each device's utilization; the error instead, never raises."""
    try:
        uuids = source.devices()
        procs = tuple(Seen(u, int(pid), used) for u in uuids for pid, used in source.processes(u))
        return Snapshot(procs, {u: source.utilization(u) for u in uuids})
    except Exception as exc:  # NVML missing a symbol, a device lost, ...
        return Snapshot(error=f"{type(exc).__name__}: {exc}")


def own_pids(me: int, proc_root: str = "/proc") -> Set[int]:
    """``me`` and every descendant of it visible in ``proc_root``."""
    parents: Dict[int, int] = {}
    for entry in _listdir(proc_root):
        if entry.isdigit():
            ppid = _ppid(os.path.join(proc_root, entry, "stat"))
            if ppid is not None:
                parents[int(entry)] = ppid
    ours, grew = {me}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in ours} - ours
        ours |= more
        grew = bool(more)
    return ours


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _ppid(stat_path: str) -> Optional[int]:
    try:
        with open(stat_path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        return int(text[text.rindex(")") + 2:].split()[1])  # "pid (comm) state ppid ..."
    except (OSError, ValueError, IndexError):
        return None


def identify_by_growth(source: Any, uuid: str, grow: Callable[[int], Callable[[], None]]) -> Optional[int]:
    """Our host PID on ``uuid``: the one whose used memory grows with a marker allocation."""
    before = dict(source.processes(uuid))
    release = grow(MARKER_BYTES)
    try:
        after = dict(source.processes(uuid))
    finally:
        release()
    grown = [pid for pid, used in after.items() if used is not None and before.get(pid) is not None
             and used - (before[pid] or 0) >= MARKER_MATCH * MARKER_BYTES]
    return grown[0] if len(grown) == 1 else None


@dataclass(frozen=True)
class Verdict:
    sharing: Dict[str, Any]  # the report's `sharing` key, exactly {exclusive, allowed, foreign}
    notes: Tuple[str, ...] = ()


def judge(start: Snapshot, end: Snapshot, visible: Mapping[str, int], ours: Set[int], allowed: bool,
          handshake: Optional[Callable[[str], Optional[int]]] = None,
          name_of: Callable[[int], Optional[str]] = proc_name) -> Verdict:
    """The run's sharing verdict from two snapshots; ``visible``: uuid -> the payload's GPU index."""
    if start.error and end.error:
        return _unknown(allowed, f"not measured: NVML could not list processes ({start.error})")
    if not visible:
        return _unknown(allowed, "not measured: the run used no GPU")
    start_procs = [p for p in start.procs if p.uuid in visible and p.pid not in ours]
    end_all = [p for p in end.procs if p.uuid in visible]
    same_ns = any(p.pid in ours for p in end_all)
    notes: List[str] = [f"not measured at the end: {end.error}"] if end.error else []
    candidates = [p for p in end_all if p.pid not in ours]
    ambiguous = False
    if not same_ns and candidates:
        mine, how = _find_ours(start_procs, candidates, handshake)
        ambiguous = mine is None
        before = {p.pid for p in start_procs}  # PIDs there before our first context are foreign in any case
        candidates = [p for p in candidates if (p.pid in before if ambiguous else p.pid != mine)]
        notes.append(how)
    foreign = merge(start_procs, candidates, visible, name_of if same_ns else (lambda _pid: None))
    exclusive: Optional[bool] = False if foreign else (None if ambiguous else True)
    if start.error:
        notes.append(f"not measured at the start: {start.error}")
    return Verdict({"exclusive": exclusive, "allowed": allowed, "foreign": foreign}, tuple(notes))


def _unknown(allowed: bool, note: str) -> Verdict:
    return Verdict({"exclusive": None, "allowed": allowed, "foreign": []}, (note,))


def _find_ours(start: Sequence[Seen], end: Sequence[Seen],
               handshake: Optional[Callable[[str], Optional[int]]]) -> Tuple[Optional[int], str]:
    """Our PID among ``end`` (another PID namespace): by a memory marker, else by elimination."""
    for uuid in dict.fromkeys(p.uuid for p in end):
        mine = handshake(uuid) if handshake is not None else None
        if mine is not None:
            return mine, f"own PID {mine} (host namespace) found by a {MARKER_BYTES >> 20} MiB marker allocation"
    new = {p.pid for p in end} - {p.pid for p in start}
    if len(new) == 1:
        only = new.pop()
        return only, f"own PID {only} (host namespace) taken as the only process new since the start"
    return None, (f"own PID not identified among {len(new)} processes new since the start "
                  "(NVML gave no per-process memory): exclusivity unknown")


def merge(start: Iterable[Seen], end: Iterable[Seen], visible: Mapping[str, int],
          name_of: Callable[[int], Optional[str]]) -> List[Dict[str, Any]]:
    """One record per (GPU, PID): seen at the start, the end or both; the latest memory figure."""
    rows: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for when, procs in (("start", start), ("end", end)):
        for p in procs:
            row = rows.setdefault((p.uuid, p.pid), {
                "gpu": visible[p.uuid], "uuid": p.uuid, "pid": p.pid, "name": name_of(p.pid),
                "used_bytes": None, "seen": when})
            row["seen"] = "both" if row["seen"] != when else when
            row["used_bytes"] = p.used_bytes if p.used_bytes is not None else row["used_bytes"]
    return sorted(rows.values(), key=lambda r: (r["gpu"], r["pid"]))


# ------------------------------------------------------------------ judging the checks
def describe(foreign: Sequence[Mapping[str, Any]], limit: int = 3) -> str:
    """'GPU 0 shared with PID 4242 python3, 1.6 GiB; ...'"""
    parts = []
    for f in foreign[:limit]:
        name = f" {f['name']}" if f.get("name") else ""
        used = f", {f['used_bytes'] / 2**30:.1f} GiB" if isinstance(f.get("used_bytes"), int) else ""
        parts.append(f"GPU {f['gpu']} shared with PID {f['pid']}{name}{used}")
    more = f" (and {len(foreign) - limit} more)" if len(foreign) > limit else ""
    return "; ".join(parts) + more


def judge_throughput_entries(entries: Sequence[Dict[str, Any]], sharing: Mapping[str, Any],
                             throughput: Set[str]) -> List[Dict[str, Any]]:
    """On a shared GPU (not allowed): a throughput check that fell short of its threshold
    (fail or warn with a threshold) is inconclusive, not a fault of the GPU. Wrong results,
    crashes and passes stay as they are."""
    if sharing.get("exclusive") is not False or sharing.get("allowed"):
        return list(entries)
    why = describe(sharing.get("foreign") or [])
    out = []
    for entry in entries:
        if entry["id"] in throughput and entry["status"] in (FAIL, WARN) and entry.get("threshold") is not None:
            entry = dict(entry, status=INCONCLUSIVE,
                         detail=f"inconclusive: {why}; measured: {entry['status']}: {entry.get('detail', '')}")
        out.append(entry)
    return out


def verdict_line(sharing: Mapping[str, Any]) -> str:
    """One line for the payload's summary and the host's tables."""
    exclusive = sharing.get("exclusive")
    if exclusive is None:
        return "GPU exclusivity not measured"
    if exclusive:
        return "GPUs exclusive to this run"
    how = ("--allow-shared-gpu: throughput is the tenant's share" if sharing.get("allowed")
           else "throughput checks inconclusive; not verified")
    return f"not exclusive: {describe(sharing.get('foreign') or [])} ({how})"


SEEN = ("start", "end", "both")
FOREIGN_KEYS = ("gpu", "uuid", "pid", "name", "used_bytes", "seen")


def validate(sharing: Any) -> List[str]:
    """Problems with a report's ``sharing`` key (empty when it has exactly the documented shape)."""
    if not isinstance(sharing, dict):
        return ["report.sharing: expected an object"]
    problems = [f"report.sharing: unexpected key {k!r}" for k in sharing if k not in ("exclusive", "allowed", "foreign")]
    if sharing.get("exclusive") not in (True, False, None):
        problems.append("report.sharing.exclusive: expected true, false or null")
    if not isinstance(sharing.get("allowed"), bool):
        problems.append("report.sharing.allowed: expected true or false")
    foreign = sharing.get("foreign")
    if not isinstance(foreign, list):
        return problems + ["report.sharing.foreign: expected a list"]
    for i, f in enumerate(foreign):
        problems += _foreign_problems(f"report.sharing.foreign[{i}]", f)
    if sharing.get("exclusive") is True and foreign:
        problems.append("report.sharing: exclusive is true but foreign processes are listed")
    return problems


def _foreign_problems(where: str, f: Any) -> List[str]:
    if not isinstance(f, dict) or set(f) != set(FOREIGN_KEYS):
        return [f"{where}: expected an object with keys {', '.join(FOREIGN_KEYS)}"]
    ints = [k for k in ("gpu", "pid") if not _is_int(f[k])]
    problems = [f"{where}.{k}: expected an integer" for k in ints]
    if not isinstance(f["uuid"], str):
        problems.append(f"{where}.uuid: expected text")
    if f["name"] is not None and not isinstance(f["name"], str):
        problems.append(f"{where}.name: expected text or null")
    if f["used_bytes"] is not None and not _is_int(f["used_bytes"]):
        problems.append(f"{where}.used_bytes: expected an integer or null")
    if f["seen"] not in SEEN:
        problems.append(f"{where}.seen: expected one of {', '.join(SEEN)}")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
