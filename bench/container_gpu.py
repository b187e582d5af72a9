#!/usr/bin/env python3
"""`imagesmith verify IMAGE` for real on a GPU host: a real engine, a real container, the GPU by CDI.

Run on the GPU host by bench/container_gpu.sh (which starts dockerd first):

    python3 bench/container_gpu.py cdi-spec --out /etc/cdi/nvidia.yaml
    python3 bench/container_gpu.py image --tag imagesmith-bench/gpu-host:1
    python3 bench/container_gpu.py run --image imagesmith-bench/gpu-host:1 --out-dir DIR

cdi-spec   writes a CDI spec for this host's GPUs the way `nvidia-ctk cdi generate` does: the device nodes
           (per GPU by index, by UUID and `all`; nvidiactl and the UVM nodes for every request), the driver's
           compute libraries and nvidia-smi as read-only bind mounts at their host paths, and nvidia-ctk's two
           hooks (create-symlinks for libcuda.so, update-ldcache for the library folder).
image      makes an image of this host's own userland and torch (/usr, /etc, /opt/torch) WITHOUT the driver
           (no /usr/local/nvidia, no libcuda or libnvidia-*): a container of it finds no GPU unless the CDI
           spec's edits put the driver in. Streamed into `docker import`; prints the seconds it took.
run        the figures docs/benchmarks.md quotes, each through the real CLI (`python3 -m imagesmith.cli verify
           IMAGE ...`), each report kept in DIR:
             bare          the bare PyTorch loop of bench/verify_h200.py on the host, same run
             quick-cold    the quick tier, the first container of the image
             shared-start  standard --only gemm,bandwidth with a neighbour (a process looping bf16 GEMMs on
                           the host, 1 GiB) there from before the start to after the end
             shared-during the same, the neighbour only while gemm.fp16 and gemm.tf32 run (started when the
                           gemm.bf16 line is printed, stopped when the gemm.tf32 line is)
             quick-warm    the quick tier again, nobody else on the GPU
             standard      the standard tier, nobody else on the GPU (no false alarm)
           and summary.json: exit codes, wall times, verdicts, payload/bare ratios.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
DRIVER_DIR = "/usr/local/nvidia/lib64"
# nvidia-ctk's compute and utility libraries (internal/discover: the "compute" and "utility" capabilities)
DRIVER_LIBS = ("libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
               "libnvidia-gpucomp.so", "libnvidia-cfg.so", "libnvidia-opencl.so")
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
HOOK = "/usr/bin/nvidia-cdi-hook"
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1", "PYTHONUNBUFFERED": "1"}
THROUGHPUT = ("gemm.bf16", "gemm.fp16", "gemm.tf32", "gemm.fp32", "bandwidth.d2d", "bandwidth.h2d")


# -- the CDI spec ---------------------------------------------------------------------------------------------
def cdi_spec() -> Dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        gpus.append((str(i), uuid.decode() if isinstance(uuid, bytes) else str(uuid), f"/dev/nvidia{pynvml.nvmlDeviceGetMinorNumber(h)}"))
    devices = [{"name": name, "containerEdits": {"deviceNodes": [{"path": node}]}} for i, uuid, node in gpus for name in (i, uuid)]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": node} for _i, _u, node in gpus]}})
    libs = sorted({os.path.realpath(p) for name in DRIVER_LIBS for p in glob.glob(f"{DRIVER_DIR}/{name}.*")})
    mounts = [{"hostPath": lib, "containerPath": lib, "options": ["ro", "nosuid", "nodev", "bind"]} for lib in libs]
    smi = shutil.which("nvidia-smi")
    if smi:
        mounts.append({"hostPath": os.path.realpath(smi), "containerPath": "/usr/bin/nvidia-smi", "options": ["ro", "nosuid", "nodev", "bind"]})
    hooks = [{"hookName": "createContainer", "path": HOOK,
              "args": ["nvidia-cdi-hook", "create-symlinks", "--link", f"libcuda.so.1::{DRIVER_DIR}/libcuda.so"]},
             {"hookName": "createContainer", "path": HOOK, "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", DRIVER_DIR]}]
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
            "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                               "deviceNodes": [{"path": n} for n in CONTROL_NODES if os.path.exists(n)],
                               "mounts": mounts, "hooks": hooks}}


# -- the image ------------------------------------------------------------------------------------------------
EXCLUDE = ("usr/local/nvidia", "usr/local/cuda*", "usr/lib/x86_64-linux-gnu/libcuda.so*", "usr/lib/x86_64-linux-gnu/libnvidia-*",
           "usr/share/doc", "usr/share/man", "*/site-packages/jax*", "*/site-packages/cupy*", "*/site-packages/onnxruntime*",
           "*/__pycache__")


def make_image(tag: str) -> Dict[str, Any]:
    import docker

    skel = Path(tempfile.mkdtemp(prefix="skel-"))
    for d in ("tmp", "var/tmp", "root", "run", "home"):
        (skel / d).mkdir(parents=True, exist_ok=True)
    (skel / "tmp").chmod(0o1777)
    (skel / "var/tmp").chmod(0o1777)
    argv = ["tar", "-c", "--numeric-owner", *[f"--exclude={e}" for e in EXCLUDE],
            "-C", "/", "usr", "etc", "opt/torch", "bin", "lib", "lib64", "sbin", "-C", str(skel), "tmp", "var", "root", "run", "home"]
    repo, _, version = tag.rpartition(":")
    changes = ["ENV PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "ENV LANG=C.UTF-8", "WORKDIR /root"]
    t0 = time.monotonic()
    tar = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    client = docker.APIClient(timeout=1200)
    assert tar.stdout is not None
    chunks = iter(lambda: tar.stdout.read(1 << 20), b"")  # 1 MiB chunks (a file object would be sent line by line)
    answer = client.import_image(src=chunks, repository=repo, tag=version, changes=changes, stream_src=True)
    tar.wait()
    seconds = time.monotonic() - t0
    size = client.inspect_image(tag)["Size"]
    return {"tag": tag, "seconds": round(seconds, 1), "size_bytes": size, "tar_exit": tar.returncode, "answer": str(answer)[-200:]}


# -- the runs -------------------------------------------------------------------------------------------------
NEIGHBOUR = r"""
import os, sys, time
import torch
go, stop = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.02)
keep = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
print("neighbour on the GPU", time.time(), flush=True)
while not os.path.exists(stop):
    for _ in range(4):
        a @ b
    torch.cuda.synchronize()
print("neighbour off the GPU", time.time(), flush=True)
"""


class Neighbour:
    """A process on the host that takes the GPU when told (a file appears) and leaves when told."""

    def __init__(self, folder: Path, name: str) -> None:
        self.go, self.stop, self.log = folder / f"{name}.go", folder / f"{name}.stop", folder / f"{name}.log"
        with open(self.log, "w") as fh:
            self.proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(self.go), str(self.stop)],
                                         stdout=fh, stderr=subprocess.STDOUT, env=os.environ | ENV)
        self.on: Optional[float] = None
        self.off: Optional[float] = None

    def start(self) -> None:
        self.go.touch()
        self.on = time.time()

    def end(self) -> None:
        if self.off is None:
            self.stop.touch()
            self.off = time.time()
            self.proc.wait(timeout=60)

    def times(self) -> Dict[str, Any]:
        return {"pid": self.proc.pid, "told_on": self.on, "told_off": self.off, "log": self.log.read_text()[-400:]}


def verify(image: str, out: Path, args: List[str], on_line: Any = None) -> Dict[str, Any]:
    """The real CLI; every stderr line echoed (and handed to ``on_line``); the report and the wall time."""
    argv = [sys.executable, "-m", "imagesmith.cli", "verify", image, "--no-pull", "--json", str(out), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ | ENV)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
        if on_line is not None:
            on_line(line)
    code = proc.wait()
    wall = time.monotonic() - t0
    (out.with_suffix(".log")).write_text("".join(lines))
    report = json.loads(out.read_text()) if out.exists() else {}
    return {"exit": code, "wall_s": round(wall, 2), "report": report, "rendered": render(out) if out.exists() else None}


def render(report: Path) -> Dict[str, Any]:
    """``imagesmith report`` of what the run wrote (--json), as a user reads it afterwards: Markdown beside it."""
    argv = [sys.executable, "-m", "imagesmith.cli", "report", str(report), "--format", "md", "--out", str(report.with_suffix(".md"))]
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ | ENV)
    return {"exit": done.returncode, "said": (done.stderr.strip().splitlines() or [""])[-1][:400]}


def summarize(name: str, got: Dict[str, Any], bare: Dict[str, Any]) -> Dict[str, Any]:
    report = got["report"]
    checks = {c["id"]: c for c in report.get("checks") or []}
    sharing = report.get("sharing") or {}
    ratios = {}
    for cid in THROUGHPUT:
        value, ref = (checks.get(cid) or {}).get("value"), (bare.get(cid) or {}).get("median")
        if isinstance(value, (int, float)) and ref:
            ratios[cid] = round(value / ref, 3)
    return {"name": name, "exit": got["exit"], "wall_s": got["wall_s"], "payload_s": report.get("duration_s"), "rendered": got["rendered"],
            "summary": report.get("summary"), "gpu_path": report.get("gpu_path"),
            "exclusive": sharing.get("exclusive"), "reason": sharing.get("reason"),
            "foreign": sharing.get("foreign"),
            "statuses": {cid: (checks.get(cid) or {}).get("status") for cid in THROUGHPUT if cid in checks},
            "windows": {cid: (checks.get(cid) or {}).get("window") for cid in THROUGHPUT if cid in checks},
            "payload_over_bare": ratios, "watch": {k: v for k, v in ((report.get("nvml") or {}).get("watch") or {}).items()
                                                   if k in ("samples", "largest_gap_s", "own_seen", "error")}}


def bare_loop() -> Dict[str, Any]:
    """bench/verify_h200.py's bare loop in a process of its own: a CUDA context this driver kept would be a tenant
    of every run after it (the first session's clean runs were 'not exclusive' for exactly that: 0.6 GiB, idle)."""
    code = "import json, sys; sys.path.insert(0, 'bench'); import verify_h200; print(json.dumps(verify_h200.bare_loop()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=os.environ | ENV)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_all(image: str, folder: Path, skip: Sequence[str] = ()) -> List[Dict[str, Any]]:
    bare = bare_loop()
    (folder / "bare.json").write_text(json.dumps(bare, indent=2))
    rows: List[Dict[str, Any]] = []

    def keep(name: str, got: Dict[str, Any], extra: Optional[Dict[str, Any]] = None) -> None:
        rows.append(summarize(name, got, bare) | (extra or {}))
        (folder / "summary.json").write_text(json.dumps({"bare": bare, "runs": rows}, indent=2))

    quick, only = ["--tier", "quick", "--timeout", "150"], ["--tier", "standard", "--only", "gemm,bandwidth", "--timeout", "150"]
    keep("quick-cold", verify(image, folder / "quick-cold.json", quick))

    early = Neighbour(folder, "early")
    early.start()
    time.sleep(8)  # its context and first GEMMs before the container starts
    got = verify(image, folder / "shared-start.json", only)
    early.end()
    keep("shared-start", got, {"neighbour": early.times()})

    during = Neighbour(folder, "during")
    time.sleep(3)  # it has imported torch; it holds no context until told

    def cue(line: str) -> None:
        if "] gemm.bf16 " in line and during.on is None:
            during.start()
        elif "] gemm.tf32 " in line:
            during.end()
    got = verify(image, folder / "shared-during.json", only, cue)
    during.end()
    keep("shared-during", got, {"neighbour": during.times()})

    keep("quick-warm", verify(image, folder / "quick-warm.json", quick))
    if "standard" not in skip:
        keep("standard", verify(image, folder / "standard.json", ["--tier", "standard", "--timeout", "300"]))
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("cdi-spec")
    s.add_argument("--out", required=True)
    s = sub.add_parser("image")
    s.add_argument("--tag", required=True)
    s = sub.add_parser("run")
    s.add_argument("--image", required=True)
    s.add_argument("--out-dir", required=True)
    s.add_argument("--skip", default="", help="scenarios left out, comma-separated (standard: the 5-minute tier)")
    args = p.parse_args()
    if args.what == "cdi-spec":
        import yaml

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(yaml.safe_dump(cdi_spec(), sort_keys=False))
        print(Path(args.out).read_text()[:3000])
    elif args.what == "image":
        print(json.dumps(make_image(args.tag)))
    else:
        folder = Path(args.out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for row in run_all(args.image, folder, [x for x in args.skip.split(",") if x]):
            print(json.dumps({k: row[k] for k in ("name", "exit", "wall_s", "exclusive", "statuses", "payload_over_bare", "rendered")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
