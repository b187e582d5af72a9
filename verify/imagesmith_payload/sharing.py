"""Who else uses the GPUs: what NVML shows the payload during its run (no torch here).

What NVML shows depends on where the payload runs (measured on an H200, driver 580):

* Its **process lists** answer per PID namespace. Inside a container (or under ``unshare --pid``)
  they list only that namespace's processes, under the namespace's PIDs: a tenant outside is not
  listed at all. In the host's namespace they list every process.
* Its **memory figures** (``nvmlDeviceGetMemoryInfo_v2``: used, reserved) are the device's, whatever
  namespace asks, and ``used`` is the sum of every process's memory within a few MiB per process.
  So memory that no listed process holds is held by a process this payload cannot see.

The watch (watch.py runs it):

* a start snapshot before the payload's first CUDA context: every process listed then is foreign;
* a sampler every :data:`INTERVAL_S` for the whole run: a listed PID that is neither the payload nor
  a descendant is a tenant (first and last time seen, its memory); the memory ledger subtracts what
  the listed processes hold from what the device says is used, and :data:`UNSEEN_FLOOR` or more
  unaccounted for :data:`UNSEEN_HOLD_S` or longer is a tenant this payload cannot see;
* an end snapshot with the payload's contexts alive (older drivers list host PIDs inside a
  container: a marker allocation finds ours, else elimination).

The payload's verdict: ``exclusive`` false when it saw a tenant; true only when it watched the
whole run, saw its own processes listed (so the lists speak of its namespace) and could account for
every byte on every GPU it used; null otherwise, with the reason. ``imagesmith verify`` joins this
with what the host watched (docs/verification.md, "A shared GPU").

Each check reports its window (wall-clock start and end, :func:`window_of`). A throughput check
that fell short while a tenant was there (its window overlaps the tenant's time) ends
``inconclusive`` naming the tenant: it measured the tenant's share, not the GPU. A check with no
tenant in its window keeps its status, whatever came before or after. With ``--allow-shared-gpu``
nothing is re-judged (the user asked to measure the share).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .judge import DEFAULT_WARN_FRACTION, FAIL, INCONCLUSIVE, WARN

INTERVAL_S = 0.25  # the sampler's period
MARGIN_S = 2 * INTERVAL_S  # a tenant seen at t may have started or ended up to one period either side
MARKER_BYTES = 256 * 2**20
MARKER_MATCH = 0.9  # the share of the marker a PID's used memory must grow by to be ours
UNSEEN_FLOOR = 256 * 2**20  # a CUDA context alone holds ~600 MiB on an H200; NVML's rounding is a few MiB
UNSEEN_HOLD_S = 1.0  # unaccounted memory this long: a tenant, not our own context being born
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
    t: Optional[float] = None  # wall-clock time it was taken


class NvmlSource:
    """The process lists and memory of every device NVML shows (through nvml.Nvml)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def devices(self) -> List[str]:
        return [self.nvml.uuid(self.nvml.handle(i)) for i in range(self.nvml.device_count())]

    def processes(self, uuid: str) -> Listing:
        return list(self.nvml.processes(self.nvml.handle(0, uuid)))

    def utilization(self, uuid: str) -> Optional[int]:
        value = self.nvml.utilization_pct(self.nvml.handle(0, uuid))
        return None if value is None else int(value)

    def memory_used(self, uuid: str) -> Optional[int]:
        """Bytes in use by processes (the driver's reserve excluded); None without memory v2."""
        got = self.nvml.memory(self.nvml.handle(0, uuid))
        return None if got is None else int(got[0])


def proc_name(pid: int, proc_root: str = "/proc") -> Optional[str]:
    try:
        with open(os.path.join(proc_root, str(pid), "comm"), encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()[:64] or None
    except OSError:
        return None


def take(source: Any, clock: Callable[[], float] = time.time) -> Snapshot:
    """Every process on every device, and each device's utilization; the error instead, never raises."""
    try:
        uuids = source.devices()
        procs = tuple(Seen(u, int(pid), used) for u in uuids for pid, used in source.processes(u))
        return Snapshot(procs, {u: source.utilization(u) for u in uuids}, t=clock())
    except Exception as exc:  # NVML missing a symbol, a device lost, ...
        return Snapshot(error=f"{type(exc).__name__}: {exc}", t=clock())


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


# ------------------------------------------------------------------ what the sampler saw
def unaccounted(used: Sequence[Optional[int]], listing: Listing) -> Optional[int]:
    """Bytes no listed process holds: the device's used memory (the smaller of two readings taken around
    the listing, so a process growing meanwhile is not mistaken for a tenant) minus every listed process's;
    None when that cannot be told (no memory v2, or a listed process without a figure)."""
    if not used or any(u is None for u in used) or any(b is None for _pid, b in listing):
        return None
    held = sum(int(b) for _pid, b in listing if b is not None)
    return max(0, min(int(u) for u in used if u is not None) - held)


class MemoryLedger:
    """Unaccounted memory on one GPU, sample by sample: episodes of at least ``hold_s`` over ``floor``."""

    def __init__(self, floor: int = UNSEEN_FLOOR, hold_s: float = UNSEEN_HOLD_S) -> None:
        self.floor, self.hold_s = floor, hold_s
        self.closed: List[Tuple[float, float, int]] = []
        self._open: Optional[List[float]] = None  # [first, last, most bytes]
        self.samples = 0  # samples that could be accounted
        self.blind = 0  # samples that could not

    def feed(self, t: float, free_of_owner: Optional[int]) -> None:
        """One sample: bytes nobody listed holds (None: this sample could not be accounted)."""
        if free_of_owner is None:
            self.blind += 1
            return
        self.samples += 1
        if free_of_owner <= self.floor:
            self._close()
        elif self._open is None:
            self._open = [t, t, float(free_of_owner)]
        else:
            self._open[1], self._open[2] = t, max(self._open[2], float(free_of_owner))

    def _close(self) -> None:
        if self._open is not None and self._open[1] - self._open[0] >= self.hold_s:
            self.closed.append((self._open[0], self._open[1], int(self._open[2])))
        self._open = None

    def episodes(self) -> List[Tuple[float, float, int]]:
        """(first, last, most bytes) of every episode, one still open included when long enough."""
        held = list(self.closed)
        if self._open is not None and self._open[1] - self._open[0] >= self.hold_s:
            held.append((self._open[0], self._open[1], int(self._open[2])))
        return held

    def current(self) -> Optional[Tuple[float, float, int]]:
        """The episode under way now, when it has lasted long enough to count."""
        if self._open is not None and self._open[1] - self._open[0] >= self.hold_s:
            return self._open[0], self._open[1], int(self._open[2])
        return None


@dataclass
class Watched:
    """What the sampler saw between the two snapshots (watch.py fills it in)."""

    listed: Dict[Tuple[str, int], Dict[str, Any]] = field(default_factory=dict)  # foreign (uuid, pid) -> first, last, used_bytes, name
    ledgers: Dict[str, MemoryLedger] = field(default_factory=dict)  # uuid -> unaccounted memory
    own_listed: bool = False  # a PID of this run was listed: the lists speak of this PID namespace
    samples: int = 0
    largest_gap_s: float = 0.0
    first: Optional[float] = None
    last: Optional[float] = None
    error: Optional[str] = None

    def see(self, uuid: str, pid: int, used: Optional[int], t: float, name: Optional[str]) -> None:
        row = self.listed.setdefault((uuid, pid), {"first": t, "last": t, "used_bytes": used, "name": name})
        row["last"] = t
        if used is not None and (row["used_bytes"] is None or used > row["used_bytes"]):
            row["used_bytes"] = used

    def tick(self, t: float) -> None:
        if self.last is not None:
            self.largest_gap_s = max(self.largest_gap_s, t - self.last)
        self.first = t if self.first is None else self.first
        self.last = t
        self.samples += 1


# ------------------------------------------------------------------ the verdict
@dataclass(frozen=True)
class Verdict:
    sharing: Dict[str, Any]  # the report's `sharing` key: {exclusive, allowed, foreign, reason}
    notes: Tuple[str, ...] = ()


def judge(start: Snapshot, end: Snapshot, visible: Mapping[str, int], ours: Set[int], allowed: bool,
          handshake: Optional[Callable[[str], Optional[int]]] = None,
          name_of: Callable[[int], Optional[str]] = proc_name, watched: Optional[Watched] = None) -> Verdict:
    """The run's sharing verdict from the snapshots and the sampler; ``visible``: uuid -> the payload's GPU index."""
    if not visible:
        return _unknown(allowed, "not measured: the run used no GPU")
    if start.error and end.error and (watched is None or not watched.samples):
        return _unknown(allowed, f"not measured: NVML could not list processes ({start.error})")
    start_procs = [p for p in start.procs if p.uuid in visible and p.pid not in ours]
    end_all = [p for p in end.procs if p.uuid in visible]
    same_ns = any(p.pid in ours for p in end_all) or bool(watched and watched.own_listed)
    notes: List[str] = [f"not measured at the end: {end.error}"] if end.error else []
    candidates = [p for p in end_all if p.pid not in ours]
    ambiguous = False
    if not same_ns and candidates:
        mine, how = _find_ours(start_procs, candidates, handshake)
        ambiguous = mine is None
        before = {p.pid for p in start_procs}  # PIDs there before our first context are foreign in any case
        candidates = [p for p in candidates if (p.pid in before if ambiguous else p.pid != mine)]
        notes.append(how)
    names = name_of if same_ns else (lambda _pid: None)
    foreign = merge(start_procs, candidates, visible, names, start.t, end.t)
    if watched is not None:
        foreign = _with_watched(foreign, watched, visible, same_ns)
    if start.error:
        notes.append(f"not measured at the start: {start.error}")
    exclusive, reason = _exclusive(foreign, ambiguous, watched, visible, same_ns, bool(start.error or end.error))
    return Verdict({"exclusive": exclusive, "allowed": allowed, "foreign": foreign, "reason": reason}, tuple(notes))


def _exclusive(foreign: Sequence[Mapping[str, Any]], ambiguous: bool, watched: Optional[Watched],
               visible: Mapping[str, int], same_ns: bool, snapshot_error: bool) -> Tuple[Optional[bool], str]:
    if foreign:
        return False, f"another process used the GPU: {describe(foreign)}"
    if ambiguous:
        return None, "own PID not identified among NVML's processes: exclusivity unknown"
    if watched is None or watched.error or not watched.samples:
        why = watched.error if watched is not None and watched.error else "no sample was taken"
        return None, f"not watched for the whole run ({why})"
    if snapshot_error:
        return None, "a snapshot could not be taken"
    if not same_ns:
        return None, "NVML never listed this run's own processes here (another PID namespace): its lists say nothing of others"
    blind = [u for u in visible if u not in watched.ledgers or not watched.ledgers[u].samples]
    if blind:
        return None, ("this driver gives no per-device memory v2 figures, so memory held by processes this run "
                      "cannot see goes unnoticed")
    return True, (f"no other process listed and every MiB accounted for in {watched.samples} samples "
                  f"(largest gap {watched.largest_gap_s:.2f} s)")


def _with_watched(foreign: List[Dict[str, Any]], watched: Watched, visible: Mapping[str, int],
                  same_ns: bool) -> List[Dict[str, Any]]:
    """The snapshots' tenants with the sampler's: listed ones (in this namespace only) and unseen memory."""
    rows = {(f["uuid"], f["pid"]): f for f in foreign}
    if same_ns:
        for (uuid, pid), seen in watched.listed.items():
            if uuid not in visible:
                continue
            row = rows.setdefault((uuid, pid), record(visible[uuid], uuid, pid, seen["name"], seen["used_bytes"],
                                                      "during", seen["first"], seen["last"]))
            row["first"] = _min(row["first"], seen["first"])
            row["last"] = _max(row["last"], seen["last"])
            if row["used_bytes"] is None:
                row["used_bytes"] = seen["used_bytes"]
    out = sorted(rows.values(), key=lambda r: (r["gpu"], r["pid"] if r["pid"] is not None else -1))
    for uuid, ledger in sorted(watched.ledgers.items()):
        if uuid in visible:
            out += [record(visible[uuid], uuid, None, None, most, "during", first, last)
                    for first, last, most in ledger.episodes()]
    return out


def _min(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b if a is None else a if b is None else min(a, b)


def _max(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b if a is None else a if b is None else max(a, b)


def record(gpu: int, uuid: str, pid: Optional[int], name: Optional[str], used: Optional[int], seen: str,
           first: Optional[float], last: Optional[float], by: str = "payload") -> Dict[str, Any]:
    """One tenant as the report's sharing.foreign lists it (pid None: memory held by processes not listed)."""
    return {"gpu": gpu, "uuid": uuid, "pid": pid, "name": name, "used_bytes": used, "seen": seen,
            "first": _rounded(first), "last": _rounded(last), "by": by}


def _rounded(t: Optional[float]) -> Optional[float]:
    return None if t is None else round(t, 3)


def _unknown(allowed: bool, note: str) -> Verdict:
    return Verdict({"exclusive": None, "allowed": allowed, "foreign": [], "reason": note}, (note,))


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
          name_of: Callable[[int], Optional[str]], t_start: Optional[float] = None,
          t_end: Optional[float] = None) -> List[Dict[str, Any]]:
    """One record per (GPU, PID): seen at the start, the end or both; the latest memory figure."""
    rows: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for when, procs, t in (("start", start, t_start), ("end", end, t_end)):
        for p in procs:
            row = rows.setdefault((p.uuid, p.pid), record(visible[p.uuid], p.uuid, p.pid, name_of(p.pid), None, when, t, t))
            row["seen"] = "both" if row["seen"] != when else when
            row["last"] = _rounded(t) if t is not None else row["last"]
            row["used_bytes"] = p.used_bytes if p.used_bytes is not None else row["used_bytes"]
    return sorted(rows.values(), key=lambda r: (r["gpu"], r["pid"]))


# ------------------------------------------------------------------ judging the checks
def describe(foreign: Any, limit: int = 3) -> str:
    """'GPU 0 shared with PID 4242 python3, 1.6 GiB; GPU 0: 1.0 GiB held by processes this run cannot see'
    (a report's sharing.foreign, from anywhere: every value's type is checked before it is written)."""
    rows = [f for f in foreign if isinstance(f, Mapping)] if isinstance(foreign, (list, tuple)) else []
    parts = []
    for f in rows[:limit]:
        used = f.get("used_bytes")
        size = f"{used / 2**30:.1f} GiB" if isinstance(used, int) and not isinstance(used, bool) else ""
        gpu = _int_text(f.get("gpu"))
        if f.get("pid") is None:
            parts.append(f"GPU {gpu}: {size or 'memory'} held by processes this run cannot see")
            continue
        name = f" {f['name']}" if isinstance(f.get("name"), str) and f["name"] else ""
        parts.append(f"GPU {gpu} shared with PID {_int_text(f.get('pid'))}{name}" + (f", {size}" if size else ""))
    more = f" (and {len(rows) - limit} more)" if len(rows) > limit else ""
    return "; ".join(parts) + more


def _int_text(value: Any) -> str:
    return str(value) if _is_int(value) else "?"


def window_of(entry: Mapping[str, Any]) -> Optional[Tuple[float, float]]:
    """A check entry's window (start, end), wall-clock seconds; None where it has none or a bad one."""
    window = entry.get("window")
    if not isinstance(window, Mapping):
        return None
    times = [window.get("start"), window.get("end")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in times):
        return None
    start, end = float(times[0]), float(times[1])  # type: ignore[arg-type]  # numbers, checked above
    return (start, end) if start <= end else None


def during(window: Optional[Tuple[float, float]], foreign: Iterable[Mapping[str, Any]],
           margin: float = MARGIN_S) -> List[Mapping[str, Any]]:
    """The tenants whose time overlaps ``window``; without a window (or a tenant without times), every one."""
    hit = []
    for f in foreign:
        first, last = f.get("first"), f.get("last")
        if window is None or not isinstance(first, (int, float)) or not isinstance(last, (int, float)) or (first - margin <= window[1] and last + margin >= window[0]):
            hit.append(f)
    return hit


PER_GPU = ("per_gpu_tflops", "per_gpu_gbps")  # a throughput check's figure per GPU (data.<key>: {"0": ...})


def short_gpus(entry: Mapping[str, Any]) -> Optional[Set[int]]:
    """The GPUs a throughput check found short: below its threshold (fail) or its warn line (warn), else the
    slowest; None when the check gives no per-GPU figures."""
    data = entry.get("data")
    per = next((data[k] for k in PER_GPU if isinstance(data, Mapping) and isinstance(data.get(k), Mapping)), None)
    figures = {int(k): float(v) for k, v in (per or {}).items()
               if str(k).isdigit() and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    if not figures:
        return None
    threshold, baseline = entry.get("threshold"), entry.get("baseline")
    warn_line = baseline * DEFAULT_WARN_FRACTION if isinstance(baseline, (int, float)) and _number(baseline) else None
    line: Any = threshold if entry.get("status") == FAIL else warn_line
    short = {i for i, v in figures.items() if _number(line) and v < float(line)}
    return short or {min(figures, key=lambda i: figures[i])}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def judge_entry(entry: Dict[str, Any], foreign: Sequence[Mapping[str, Any]], throughput: Set[str]) -> Dict[str, Any]:
    """A throughput check that fell short of its threshold (fail, or warn with a threshold) while a tenant was on
    every GPU it found short is inconclusive, naming the tenants; a GPU that fell short with nobody on it is blamed
    (the check keeps its status), as are wrong results, crashes, passes and checks with nobody in their window."""
    if entry.get("id") not in throughput or entry.get("status") not in (FAIL, WARN) or entry.get("threshold") is None:
        return entry
    hit = during(window_of(entry), foreign)
    short = short_gpus(entry)
    if short is not None:
        hit = [f for f in hit if f.get("gpu") in short]
        if {f.get("gpu") for f in hit} != short:
            return entry
    if not hit:
        return entry
    return dict(entry, status=INCONCLUSIVE,
                detail=f"inconclusive: {describe(hit)} during this check; measured: {entry['status']}: {entry.get('detail', '')}")


def judge_throughput_entries(entries: Sequence[Dict[str, Any]], sharing: Mapping[str, Any],
                             throughput: Set[str]) -> List[Dict[str, Any]]:
    """Every entry judged against the tenants of ``sharing`` (nothing re-judged when sharing was allowed)."""
    if sharing.get("allowed"):
        return list(entries)
    foreign = [f for f in sharing.get("foreign") or [] if isinstance(f, Mapping)]
    return [judge_entry(entry, foreign, throughput) if foreign else entry for entry in entries]


def verdict_line(sharing: Mapping[str, Any]) -> str:
    """One line for the payload's summary and the host's tables."""
    exclusive = sharing.get("exclusive")
    if exclusive is None:
        reason = sharing.get("reason")
        return "GPU exclusivity not measured" + (f" ({reason})" if isinstance(reason, str) and reason else "")
    if exclusive:
        return "GPUs exclusive to this run"
    how = ("--allow-shared-gpu: throughput is the tenant's share" if sharing.get("allowed")
           else "throughput checks during a tenant inconclusive; not verified")
    return f"not exclusive: {describe(sharing.get('foreign') or [])} ({how})"


SEEN = ("start", "end", "both", "during")
FOREIGN_KEYS = ("gpu", "uuid", "pid", "name", "used_bytes", "seen", "first", "last", "by")
BY = ("payload", "host")


def validate(sharing: Any) -> List[str]:
    """Problems with a report's ``sharing`` key (empty when it has exactly the documented shape)."""
    if not isinstance(sharing, dict):
        return ["report.sharing: expected an object"]
    keys = ("exclusive", "allowed", "foreign", "reason")
    problems = [f"report.sharing: unexpected key {k!r}" for k in sharing if k not in keys]
    if sharing.get("exclusive") not in (True, False, None):
        problems.append("report.sharing.exclusive: expected true, false or null")
    if not isinstance(sharing.get("allowed"), bool):
        problems.append("report.sharing.allowed: expected true or false")
    if not isinstance(sharing.get("reason", ""), (str, type(None))):
        problems.append("report.sharing.reason: expected text or null")
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
    problems = [f"{where}.gpu: expected an integer"] if not _is_int(f["gpu"]) else []
    if f["pid"] is not None and not _is_int(f["pid"]):
        problems.append(f"{where}.pid: expected an integer or null")
    if not isinstance(f["uuid"], str):
        problems.append(f"{where}.uuid: expected text")
    if f["name"] is not None and not isinstance(f["name"], str):
        problems.append(f"{where}.name: expected text or null")
    if f["used_bytes"] is not None and not _is_int(f["used_bytes"]):
        problems.append(f"{where}.used_bytes: expected an integer or null")
    if f["seen"] not in SEEN:
        problems.append(f"{where}.seen: expected one of {', '.join(SEEN)}")
    for key in ("first", "last"):
        value = f[key]
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            problems.append(f"{where}.{key}: expected a time in seconds or null")
    if f["by"] not in BY:
        problems.append(f"{where}.by: expected one of {', '.join(BY)}")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
