#!/usr/bin/env python3
"""Evidence on a GPU host for issue 10: planted faults and clean runs of the payload.

    OUT=bench/results python3 bench/gpu_evidence.py [--out-dir DIR] [--clean-runs 10]

Runs verify/run.py (host mode, no Docker, no imagesmith install; the knowledge
base's CUDA release table is read with PyYAML) once per scenario and checks the
verdict each must give:

  quick tier            --tier quick --gpus all --require-gpu: GPU mode, libs.integrity
                        over the host's nvidia-* wheels, the driver judged by the CUDA
                        runtime measured in this Python, the leak probe; its wall time
  hidden GPU            CUDA_VISIBLE_DEVICES="" with --gpus 0: gpu.devices must fail
  module outputs kept   sitecustomize keeps every nn.Module output alive (~0.09 MiB/step
                        in the leak loop): leak.device must fail in the standard tier
  0.05 MiB/step         config leak_inject_mib 0.05: leak.device must fail
  1 MiB/step, quick     config leak_inject_mib 1, the whole quick tier: its leak.probe
                        must fail within 3 s
  clean xN              the standard leak checks N times: no alarm

Each report goes to DIR/gpu-<scenario>.json, the summary to DIR/gpu-evidence.json,
and a table is printed. Exit 0 when every scenario gave its expected verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT = os.path.join(ROOT, "imagesmith", "model", "compat", "data", "compat.yaml")
RUN = os.path.join(ROOT, "verify", "run.py")

# The planted fault of the issue: a patched library that keeps each nn.Module output alive.
KEEP_OUTPUTS = '''\
import torch

_kept = []
_call = torch.nn.Module.__call__


def _keep(self, *args, **kwargs):
    out = _call(self, *args, **kwargs)
    _kept.append(out)
    return out


torch.nn.Module.__call__ = _keep
'''


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    args: Sequence[str]
    expect: Mapping[str, str]  # check id -> status it must have
    config: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    sitecustomize: str = ""
    max_check_s: Mapping[str, float] = field(default_factory=dict)  # check id -> most seconds it may take


LEAK = ["--tier", "standard", "--gpus", "all", "--require-gpu", "--only", "leak.device,leak.host"]


def scenarios(clean_runs: int) -> List[Scenario]:
    fixed = [
        Scenario("quick", "quick tier, 1 GPU", ["--tier", "quick", "--gpus", "all", "--require-gpu"],
                 {"gpu.devices": "pass", "libs.integrity": "pass", "driver": "pass", "leak.probe": "pass"},
                 max_check_s={"leak.probe": 3.0}),
        Scenario("hidden-gpu", 'CUDA_VISIBLE_DEVICES="" with --gpus 0',
                 ["--gpus", "0", "--only", "gpu.devices,driver"], {"gpu.devices": "fail"},
                 env={"CUDA_VISIBLE_DEVICES": ""}),
        Scenario("module-outputs-kept", "planted: every nn.Module output kept alive (sitecustomize)", LEAK,
                 {"leak.device": "fail"}, sitecustomize=KEEP_OUTPUTS),
        Scenario("leak-0.05", "injected 0.05 MiB/step, standard tier", LEAK, {"leak.device": "fail"},
                 config={"leak_inject_mib": 0.05}),
        # The whole quick tier, as users run it: alone (--only leak.probe) the probe would also
        # pay for creating the CUDA context (~4 s on an H200), which the tier's earlier checks do.
        Scenario("probe-1mib", "injected 1 MiB/step, quick tier (its leak.probe)",
                 ["--tier", "quick", "--gpus", "all", "--require-gpu"], {"gpu.devices": "pass", "leak.probe": "fail"},
                 config={"leak_inject_mib": 1.0}, max_check_s={"leak.probe": 3.0}),
    ]
    clean = [Scenario(f"clean-{i}", f"clean leak run {i}", LEAK, {"leak.device": "pass", "leak.host": "pass"})
             for i in range(1, clean_runs + 1)]
    return fixed + clean


def driver_releases(path: str = COMPAT) -> List[Dict[str, str]]:
    """The knowledge base's release table, as imagesmith hands it to the payload."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        cuda = yaml.safe_load(fh)["cuda"]
    return [dict(u, min_driver=info["min_driver"]) for info in cuda.values() for u in info.get("updates", ())]


def payload_config(scenario: Scenario, releases: Sequence[Mapping[str, str]]) -> Dict[str, Any]:
    config: Dict[str, Any] = {"schema": "imagesmith.verify-config/1", "driver": {"releases": list(releases)},
                              "security": {"expect_non_root": False}}
    config.update(scenario.config)
    return config


def judge(scenario: Scenario, report: Mapping[str, Any]) -> Dict[str, Any]:
    """What each expected check said, and whether the scenario gave its verdict."""
    by_id = {c["id"]: c for c in report.get("checks") or ()}
    got = {cid: (by_id.get(cid) or {}).get("status", "missing") for cid in scenario.expect}
    slow = {cid: by_id[cid]["duration_s"] for cid, limit in scenario.max_check_s.items()
            if cid in by_id and by_id[cid]["duration_s"] > limit}
    details = {cid: (by_id.get(cid) or {}).get("detail", "") for cid in scenario.expect}
    return {"ok": got == dict(scenario.expect) and not slow, "got": got, "expect": dict(scenario.expect),
            "too_slow": slow, "details": details, "mode": (report.get("mode") or {}).get("reason"),
            "durations": {cid: (by_id.get(cid) or {}).get("duration_s") for cid in scenario.expect}}


def run(scenario: Scenario, out_dir: str, releases: Sequence[Mapping[str, str]]) -> Dict[str, Any]:
    out = os.path.join(out_dir, f"gpu-{scenario.key}.json")
    with tempfile.TemporaryDirectory(prefix="gpu-evidence-") as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w", encoding="utf-8") as fh:
            json.dump(payload_config(scenario, releases), fh)
        env = dict(os.environ, PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0", **scenario.env)
        if scenario.sitecustomize:
            with open(os.path.join(tmp, "sitecustomize.py"), "w", encoding="utf-8") as fh:
                fh.write(scenario.sitecustomize)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [tmp, env.get("PYTHONPATH")]))
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, RUN, "--config", config, "--out", out, *scenario.args],
                              env=env, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t0
    report = json.loads(Path(out).read_text(encoding="utf-8")) if os.path.exists(out) else {}
    return dict(judge(scenario, report), key=scenario.key, title=scenario.title, wall_s=round(wall, 2),
                exit_code=proc.returncode, stderr_tail=proc.stderr[-1500:])


def table(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    lines = [f"{'scenario':<58} {'expect':<28} {'got':<28} {'wall s':>7}  verdict"]
    for r in rows:
        expect = ",".join(f"{k}={v}" for k, v in r["expect"].items())
        got = ",".join(f"{k}={v}" for k, v in r["got"].items())
        verdict = "OK" if r["ok"] else ("TOO SLOW " + json.dumps(r["too_slow"]) if r["too_slow"] else "WRONG")
        lines.append(f"{r['title'][:58]:<58} {expect[:28]:<28} {got[:28]:<28} {r['wall_s']:>7.1f}  {verdict}")
    return lines


def summary(rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    clean = [r for r in rows if r["key"].startswith("clean-")]
    return {"scenarios": len(rows), "as_expected": sum(r["ok"] for r in rows),
            "clean_runs": len(clean), "clean_false_alarms": sum(not r["ok"] for r in clean),
            "total_wall_s": round(sum(r["wall_s"] for r in rows), 1)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.environ.get("OUT") or os.path.join(ROOT, "bench", "results"))
    p.add_argument("--clean-runs", type=int, default=10)
    p.add_argument("--only", default="", help="comma-separated scenario keys")
    a = p.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    chosen = [s for s in scenarios(a.clean_runs) if not a.only or s.key in a.only.split(",")]
    releases = driver_releases()
    rows = []
    for scenario in chosen:
        rows.append(run(scenario, a.out_dir, releases))
        print("\n".join(table(rows[-1:])[1:]), flush=True)
    result = {"summary": summary(rows), "scenarios": rows}
    with open(os.path.join(a.out_dir, "gpu-evidence.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
    print("\n" + "\n".join(table(rows)))
    print(json.dumps(result["summary"]))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
