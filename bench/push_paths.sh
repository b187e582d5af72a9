#!/usr/bin/env bash
# How long one image takes to reach a registry, and the processor it costs, by three paths, each to an empty
# loopback registry: the engine's push (Docker gzips each layer on one core), skopeo from the engine
# (containers/image compresses with parallel gzip) and imagesmith's staging push from the engine's store
# (imagesmith.stages.building.directpush: each layer's tar read from overlay2, gzipped by ISA-L).
#   bash bench/push_paths.sh [IMAGE]     # default: the CPU nlp image `make release` builds
# Needs: root, a running local Docker engine (overlay2) holding IMAGE, Debian's docker-registry and skopeo, .venv.
# Writes bench/results/push-paths.json (OUT=FILE to write elsewhere). Registries on ports 5097-5099, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-imagesmith/local:2.13.0-cpu-py3.11-debian12-nlp}
OUT=${OUT:-bench/results/push-paths.json}
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"; docker rmi -f 127.0.0.1:5099/bench/engine-push:1 >/dev/null 2>&1 || true' EXIT
for port in 5097 5098 5099; do
  mkdir -p "$W/$port"
  printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' "$W/$port" "$port" > "$W/$port.yml"
  docker-registry serve "$W/$port.yml" > "$W/$port.log" 2>&1 &
done
for port in 5097 5098 5099; do
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.2; done
done
DOCKERD=$(pidof dockerd)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# seconds and processor seconds (the command's own and the engine's) of one command
timed() {
  local t0 d0 own
  t0=$(date +%s.%N); d0=$(ticks "$DOCKERD")
  /usr/bin/time -o "$W/time" -f '%U %S' "$@" >/dev/null
  own=$(tail -1 "$W/time")
  python3 -c 'import sys, os; t0, t1, d0, d1, u, s = map(float, sys.argv[1:]); hz = os.sysconf("SC_CLK_TCK"); print(f"{t1 - t0:.1f} {u + s + (d1 - d0) / hz:.1f}")' \
    "$t0" "$(date +%s.%N)" "$d0" "$(ticks "$DOCKERD")" $own
}
docker tag "$IMAGE" 127.0.0.1:5099/bench/engine-push:1
engine=$(timed docker push 127.0.0.1:5099/bench/engine-push:1)
rm -f /var/lib/containers/cache/blob-info-cache-v1.*  # skopeo would reuse what it compressed before
skopeo_s=$(timed skopeo copy -q --dest-tls-verify=false "docker-daemon:$IMAGE" docker://127.0.0.1:5098/bench/skopeo:1)
own=$(timed .venv/bin/python -c '
import sys, docker
from imagesmith.edges.engine.layerstore import LayerStore
from imagesmith.edges.registry import Registry
from imagesmith.stages.building.directpush import DirectPush
client = docker.from_env()
store = LayerStore.of(client.info())
assert store is not None, "the engine store is not readable here (root, a local overlay2 Docker)"
DirectPush(store, Registry("127.0.0.1:5097"), "bench/own").push(client.images.get(sys.argv[1]).id, "1")' "$IMAGE")
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
python3 - "$OUT" "$IMAGE" "$size" "$engine" "$skopeo_s" "$own" "$(du -sb "$W/5099" | cut -f1)" "$(du -sb "$W/5098" | cut -f1)" "$(du -sb "$W/5097" | cut -f1)" <<'PY'
import json, sys, datetime, os
out, image, size, engine, skopeo, own, engine_b, skopeo_b, own_b = sys.argv[1:]
def path(timing, stored):
    seconds, processor = map(float, timing.split())
    return {"seconds": seconds, "processor_seconds": processor, "registry_bytes": int(stored)}
doc = {"schema": "imagesmith.bench-push-paths/2", "date": datetime.date.today().isoformat(), "image": image,
       "image_bytes": int(size), "cores": os.cpu_count(),
       "engine_push": path(engine, engine_b), "skopeo_from_engine": path(skopeo, skopeo_b),
       "imagesmith_from_store": path(own, own_b)}
open(out, "w").write(json.dumps(doc, indent=2) + "\n")
print(json.dumps(doc))
PY
