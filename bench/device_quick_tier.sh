#!/usr/bin/env bash
# Issue 23 on the device machine (one H200), in one call, from a copy of this checkout:
#   bash bench/device_quick_tier.sh LABEL [quick]     (quick: steps 1 and 2, then serial vs workers on the same machine)
# 1. the quick tier cold then warm (bench/quick_tier.py) -> $OUT/quick-tier-LABEL.json
# 2. where the quick tier's time goes (imports, CUDA init, cProfile of the payload) -> $OUT/profile-LABEL.txt
# 3. a noisy neighbour (a second process looping bf16 GEMMs on GPU 0): quick, standard (no burn/contention)
#    and --allow-shared-gpu -> $OUT/shared-*.json; NVML's process list through ctypes vs pynvml
# 4. a clean standard run afterwards (no burn): no false alarm -> $OUT/clean-standard.json
# Host deps missing there travel as wheels in .whl (see the device README).
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LABEL=${1:-h200}
O=${OUT:-bench/results}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
V="python3 -m imagesmith.cli verify --local"

timeout 200 python3 bench/quick_tier.py --runs 3 --label "$LABEL" --out "$O/quick-tier-$LABEL.json"

P="$O/profile-$LABEL.txt"
{
  for what in "import imagesmith.cli" "import torch" "import torch; torch.cuda.init()" \
              "import torch; torch.zeros(1, device='cuda')"; do
    echo "python3 -c \"$what\": wall s:"
    TIMEFORMAT=%R; time python3 -c "$what"
  done
  echo "--- cProfile of the payload, quick tier (main thread, cumulative)"
  timeout 90 python3 -m cProfile -s cumtime verify/run.py --tier quick --out /tmp/p.json 2>/dev/null | head -60
  echo "--- topology"
  nvidia-smi topo -m 2>&1 | head -20
  nvidia-smi nvlink -s 2>&1 | head -25
  python3 -c "
import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
for link in range(18):
    try: print('nvlink', link, n.nvmlDeviceGetNvLinkState(h, link))
    except n.NVMLError as e: print('nvlink', link, 'error', e)
"
} > "$P" 2>&1
if [ "$2" = quick ]; then  # the same machine, caches dropped, .pyc written: every check in one process, then workers
  IMAGESMITH_PAYLOAD_SERIAL=1 timeout 100 python3 bench/quick_tier.py --runs 2 --label "$LABEL-serial" --out "$O/quick-tier-$LABEL-serial.json"
  timeout 100 python3 bench/quick_tier.py --runs 2 --label "$LABEL-again" --out "$O/quick-tier-$LABEL-again.json"
  exit 0
fi

setsid python3 -c "
import time, torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)
t = time.time()
while time.time() - t < 420:
    for _ in range(20): a @ b
    torch.cuda.synchronize()
" >/dev/null 2>&1 &
NB=$!
sleep 10
python3 - <<'EOF' >> "$P" 2>&1
import sys; sys.path.insert(0, "verify")
from imagesmith_payload.nvml import open_nvml
n = open_nvml(); d = n.handle(0)
print("--- neighbour: ctypes", n.processes(d), "util", n.utilization_pct(d))
import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
print("--- neighbour: pynvml", [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)])
EOF
timeout 120 $V --tier quick --json "$O/shared-quick.json" 2>&1 | tail -6
timeout 240 $V --tier standard --skip burn.gemm,contention.shared_gpu --json "$O/shared-standard.json" 2>&1 | tail -12
timeout 120 $V --tier standard --only gemm,bandwidth --allow-shared-gpu --json "$O/shared-allowed.json" 2>&1 | tail -5
kill -- -"$NB" 2>/dev/null || kill "$NB"
sleep 3
timeout 200 $V --tier standard --skip burn.gemm --json "$O/clean-standard.json" 2>&1 | tail -6
