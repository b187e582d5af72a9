#!/usr/bin/env bash
# What the evidence runs did on the device machine (bench/results/*), in one call each.
#   bash bench/run_device.sh x2    # nvidia-h200-x2: 2-GPU standard + short soak, then GPU 0 alone
#   bash bench/run_device.sh h200  # nvidia-h200: bare loop + `imagesmith verify --local` quick and
#                                  # standard, an injected leak, tests/gpu
# Host deps missing there (semver) travel as wheels in .whl (see the device README).
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-bench/results}
if [ "$1" = x2 ]; then
  timeout 330 python3 verify/run.py --tier standard --require-gpu --config bench/configs/h200x2.json \
    --out "$OUT/h200x2-standard.json" 2>&1 | tee "$OUT/h200x2-standard.log" | grep -v "^\[.*skip"
  timeout 120 python3 verify/run.py --tier soak --soak-minutes 0.5 --require-gpu \
    --config bench/configs/h200x2.json --only gemm.bf16,nccl.allreduce,leak,bandwidth.d2d \
    --out "$OUT/h200x2-soak.json" 2>&1 | tail -8
  export CUDA_VISIBLE_DEVICES=0
  timeout 400 python3 bench/verify_h200.py --tiers quick,standard --out-dir "$OUT" --label h200 \
    --config bench/configs/h200.json 2>&1 | tee "$OUT/h200.log" | grep -v "^\[.*skip"
  exit
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
timeout 400 python3 bench/verify_h200.py --via-cli --tiers quick,standard --out-dir "$OUT" --label h200 \
  2>&1 | tee "$OUT/h200.log" | grep -v "^\[.*skip\|^| .* | skip "
echo '{"leak_inject_mib": 1}' > /tmp/leak.json
timeout 60 python3 verify/run.py --tier standard --only leak --config /tmp/leak.json \
  --out "$OUT/h200-leak-injected.json" 2>&1 | tail -3
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/gpu 2>&1 | tail -4
