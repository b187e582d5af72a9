#!/usr/bin/env bash
# `imagesmith verify IMAGE` in a real container on a GPU host with no NVIDIA container runtime: the GPU by CDI.
#   bash bench/container_gpu.sh prepare   # here (Debian 12, network): Debian's engine binaries and the runtime
#                                         # wheels imagesmith needs, into .device/ (ignored; name it in carry)
#   bash bench/container_gpu.sh run       # on the GPU host (root, no network): starts dockerd, writes a CDI spec
#                                         # the way nvidia-ctk does, imports the host's userland and torch as an
#                                         # image without the driver, runs bench/container_gpu.py's scenarios
#                                         # (SKIP=standard: all but the 5-minute standard tier)
# Results: $OUT (default bench/results/container-gpu): summary.json, each run's report and log, dockerd.log.
set -o pipefail
cd "$(dirname "$0")/.."
D=.device
if [ "$1" = prepare ]; then
  set -e
  mkdir -p "$D/whl" /tmp/imagesmith-engine && cd /tmp/imagesmith-engine
  apt-get download docker.io containerd runc libdevmapper1.02.1
  for f in *.deb; do dpkg -x "$f" x; done
  tar -cJf "$OLDPWD/$D/engine.tar.xz" --transform 's,.*/,engine/,' -C x usr/sbin/dockerd usr/bin/containerd \
    usr/bin/containerd-shim-runc-v2 usr/sbin/runc usr/sbin/docker-proxy lib/x86_64-linux-gnu/libdevmapper.so.1.02.1
  cd "$OLDPWD"
  # imagesmith's runtime dependencies as the lock pins them for the device's Python 3.12 (no deps: named one by one)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --platform any -d "$D/whl" \
    $(.venv/bin/python bench/device_wheels.py)
  du -sh "$D"/*
  exit 0
fi
O=${OUT:-bench/results/container-gpu}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$D"/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/eng && tar -xJf "$D/engine.tar.xz" -C /tmp/eng || exit 1
( export PATH=/tmp/eng/engine:$PATH LD_LIBRARY_PATH=/tmp/eng/engine
  setsid dockerd --storage-driver=overlay2 --iptables=false --ip-masq=false --bridge=none --data-root /tmp/docker \
    </dev/null >"$O/dockerd.log" 2>&1 & )
for _ in $(seq 60); do python3 -c "import docker; docker.from_env().ping()" 2>/dev/null && break; sleep 0.5; done
python3 bench/container_gpu.py cdi-spec --out /etc/cdi/nvidia.yaml > "$O/cdi-spec.txt" || exit 1
timeout 90 python3 -m imagesmith.cli doctor > "$O/doctor.txt" 2>&1; grep -i -E "gpu|cdi|engine" "$O/doctor.txt" | head -8
TIMEFORMAT='image import: %R s'
time python3 bench/container_gpu.py image --tag imagesmith-bench/gpu-host:1 | tee "$O/image.json"
python3 bench/container_gpu.py run --image imagesmith-bench/gpu-host:1 --out-dir "$O" ${SKIP:+--skip "$SKIP"}
