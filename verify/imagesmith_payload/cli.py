"""Entry point: flags + config -> checks -> report (file, marker line, exit code)."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import checks  # noqa: F401  (registers every check)
from .checks.devices import run_mode
from .config import Config, ConfigError, load_config_file, parse_config, with_expectations, with_overrides
from .context import Context
from .environment import collect
from .gpumode import Mode
from .offload import Offload, write_entries
from .parsers import parse_expect
from .registry import REGISTRY, select
from .report import build_report, emit_marker, write_report
from .runner import progress_printer, run_checks, run_soak
from .sharing import judge_entry, judge_throughput_entries, verdict_line
from .watch import SharingWatch

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
THROUGHPUT = {s.id for s in REGISTRY.values() if s.throughput}
SERIAL = "IMAGESMITH_PAYLOAD_SERIAL"  # set: every check in this process, one after another (no workers)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verify/run.py",
                                description="imagesmith verification and stress payload")
    p.add_argument("--config", help="verify-config JSON (imagesmith.verify-config/1)")
    p.add_argument("--tier", choices=("quick", "standard", "soak"))
    p.add_argument("--require-gpu", action="store_true", default=None,
                   help="fail (not skip) when no GPU is visible")
    p.add_argument("--gpus", help="what was asked for: all, none (CPU mode) or a list such as 0,1; "
                                  "fewer visible GPUs than asked fails gpu.devices (default: auto, "
                                  "whatever is visible)")
    p.add_argument("--allow-cpu", action="store_true", default=None,
                   help="with --gpus all and no GPU visible: CPU mode instead of a failure")
    p.add_argument("--allow-shared-gpu", action="store_true", default=None,
                   help="judge throughput even when another process uses the GPU (measures the tenant's share)")
    p.add_argument("--expect", help="NAME=VERSION,... e.g. torch=2.9.1,cuda=12.8,torchvision=0.24")
    p.add_argument("--out", help="write the report JSON here")
    p.add_argument("--emit-marker", action="store_true",
                   help="print the report on one stdout line prefixed @@IMAGESMITH-REPORT@@")
    p.add_argument("--only", help="comma-separated check ids, groups (gemm) or patterns")
    p.add_argument("--skip", help="comma-separated check ids, groups or patterns to leave out")
    p.add_argument("--soak-minutes", type=float)
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--worker-checks", help=argparse.SUPPRESS)  # offload.py: run these checks, write entries
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    return p


def _ids(text: Optional[str]) -> Optional[Tuple[str, ...]]:
    return None if text is None else tuple(s.strip() for s in text.split(",") if s.strip())


def _gpus_flag(text: Optional[str]) -> Optional[str]:
    return None if text is None else parse_config({"gpus": text}).gpus


def make_config(args: argparse.Namespace) -> Config:
    config = load_config_file(args.config)
    gpus = _gpus_flag(args.gpus)
    config = with_overrides(config, tier=args.tier, require_gpu=args.require_gpu, gpus=gpus,
                            allow_cpu=args.allow_cpu, allow_shared_gpu=args.allow_shared_gpu,
                            soak_minutes=args.soak_minutes, only=_ids(args.only),
                            skip=_ids(args.skip))
    if args.expect:
        try:
            config = with_expectations(config, parse_expect(args.expect))
        except ValueError as exc:
            raise ConfigError(f"--expect {exc}") from exc
    return config


def chosen(config: Config) -> List[Any]:
    """The host's exact list (config.checks) or the tier's checks with --only/--skip."""
    if config.checks is None:
        return select(config.tier, config.only, config.skip)
    unknown = [c for c in config.checks if c not in REGISTRY]
    if unknown:
        raise ConfigError(f"config key 'checks': unknown check {unknown[0]!r} (verify/run.py --list names them)")
    return [REGISTRY[c] for c in config.checks]


def list_checks() -> int:
    for spec in REGISTRY.values():
        flags = " (optional)" if spec.optional else ""
        print(f"{spec.id:<26} {spec.tier:<9} needs {spec.needs:<9} {spec.title}{flags}")
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(raw)
    if args.list:
        return list_checks()
    try:
        config = make_config(args)
        specs = chosen(config)
    except ConfigError as exc:
        print(f"verify/run.py: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.worker_checks:
        return run_worker(config, args.worker_checks.split(","), args.worker_out)
    if not specs and config.checks is None:  # the host may ask for none (it runs its own checks)
        print("verify/run.py: error: --only/--skip leave no check to run", file=sys.stderr)
        return EXIT_USAGE
    return Session(config, args.out, args.emit_marker, raw).run(specs)


def run_worker(config: Config, ids: Sequence[str], out: Optional[str]) -> int:
    """A worker process (offload.py): these checks, their entries to `out`, nothing on stdout."""
    if not out or any(i not in REGISTRY for i in ids):
        print("verify/run.py: error: --worker-checks needs known check ids and --worker-out", file=sys.stderr)
        return EXIT_USAGE
    ctx = Context(config)

    def hung(entries: List[Dict[str, Any]]) -> None:
        write_entries(out, entries)
        os._exit(EXIT_FAILED)
    write_entries(out, run_checks([REGISTRY[i] for i in ids], ctx, lambda *_: None, hung))
    return EXIT_OK


class Session:
    """One payload run: environment, checks, report."""

    def __init__(self, config: Config, out: Optional[str], marker: bool, args: Sequence[str] = ()) -> None:
        self.config, self.out, self.marker, self.args = config, out, marker, list(args)
        self.offload: Optional[Offload] = None
        self._finished = threading.Lock()  # the watchdog and the main thread: one report only
        self.ctx = Context(config)
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.monotonic()
        self.environment: Dict[str, Any] = {}
        self.watch = SharingWatch(self.ctx)

    def run(self, specs: Sequence[Any]) -> int:
        self.watch.begin()  # before any CUDA context of ours: whatever NVML lists now is foreign
        if self.config.tier != "soak" and not os.environ.get(SERIAL):  # soak repeats each check in this process
            self.offload = Offload(specs, self.ctx, self.args)  # their workers start now, beside torch's import
        self.environment = collect(self.ctx)
        self._header(len(specs))
        progress = progress_printer()
        if self.config.tier == "soak":
            entries = run_soak(specs, self.ctx, self.config.soak_minutes, progress, self._hung, self._judge)
        else:
            entries = run_checks(specs, self.ctx, progress, self._hung, self.offload, self._judge)
        return self._finish(entries)

    def _judge(self, entry: Dict[str, Any]) -> Dict[str, Any]:
        """A throughput check as it ends, against the tenants seen so far: its live line says what the report will."""
        if self.config.allow_shared_gpu or entry.get("id") not in THROUGHPUT:
            return entry
        return judge_entry(entry, self.watch.foreign_now(), THROUGHPUT)

    def _finish(self, entries: List[Dict[str, Any]]) -> int:
        self.watch.end()
        self._finished.acquire()  # held for good: if the watchdog has it, it reports and exits
        return self._report(entries)

    def _report(self, entries: List[Dict[str, Any]]) -> int:
        sharing, detail = self.watch.verdict()
        entries = judge_throughput_entries(entries, sharing, THROUGHPUT)
        self.environment["gpu_sharing"] = detail
        report = build_report(self.config.tier, self.started, time.monotonic() - self.t0,
                              self.environment, entries, self.config.nonce, sharing)
        report["mode"] = mode_summary(run_mode(self.ctx), entries)
        if self.out:
            write_report(self.out, report)
        if self.marker:
            emit_marker(report)
        s = report["summary"]
        verdict = outcome_word(s["ok"], sharing)
        print(f"imagesmith payload: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail, "
              f"{s['skip']} skip, {s['inconclusive']} inconclusive in {report['duration_s']:.1f} s; "
              f"{verdict_line(sharing)} -> {verdict}", file=sys.stderr, flush=True)
        return EXIT_OK if verdict == "OK" else EXIT_FAILED

    def _hung(self, entries: List[Dict[str, Any]]) -> None:
        """Called by the watchdog thread: report what we have, then stop hard
        (unless the main thread is reporting already)."""
        if not self._finished.acquire(blocking=False):
            return
        if self.offload is not None:
            self.offload.kill_all()
        try:
            self._report(entries)
        finally:
            os._exit(EXIT_FAILED)

    def _header(self, n: int) -> None:
        env = self.environment
        gpus = ", ".join(f"{g['name']} ({g['capability']})" for g in env.get("gpus") or []) or "none"
        print(f"imagesmith payload: {run_mode(self.ctx).reason}", file=sys.stderr, flush=True)
        print(f"imagesmith payload: tier {self.config.tier}, {n} checks; python {env['python']}, "
              f"torch {env['torch']}, cuda {env['cuda']}, driver {env['driver']}; GPUs: {gpus}",
              file=sys.stderr, flush=True)


def outcome_word(ok: bool, sharing: Dict[str, Any]) -> str:
    """The summary's last word, as the exit code says it: a shared GPU is not verified, whatever passed."""
    if not ok:
        return "FAILED"
    if sharing.get("exclusive") is False and not sharing.get("allowed"):
        return "NOT VERIFIED (the GPU was shared)"
    return "OK"


def mode_summary(mode: Mode, entries: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The run's mode and how its GPU checks (needs gpu / multi_gpu) ended."""
    counts = {status: 0 for status in ("pass", "warn", "fail", "skip", "inconclusive")}
    for entry in entries:
        spec = REGISTRY.get(entry["id"])
        if spec is not None and spec.needs in ("gpu", "multi_gpu"):
            counts[entry["status"]] += 1
    return dict(mode.to_json(), gpu_checks=counts)
