#!/usr/bin/env bash
# How long one image takes to reach a registry by the engine's push (Docker gzips each layer on one core) and by
# skopeo from the engine (containers/image compresses with parallel gzip), each to an empty loopback registry.
#   bash bench/push_paths.sh [IMAGE]     # default: the CPU nlp image `make release` builds
# Needs: a running Docker engine holding IMAGE, Debian's docker-registry and skopeo. Writes bench/results/push-paths.json
# (OUT=FILE to write elsewhere). Two runs of the registry on ports 5098 and 5099, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-imagesmith/local:2.13.0-cpu-py3.11-debian12-nlp}
OUT=${OUT:-bench/results/push-paths.json}
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"; docker rmi -f 127.0.0.1:5099/bench/engine-push:1 >/dev/null 2>&1 || true' EXIT
for port in 5098 5099; do
  mkdir -p "$W/$port"
  printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' "$W/$port" "$port" > "$W/$port.yml"
  docker-registry serve "$W/$port.yml" > "$W/$port.log" 2>&1 &
done
for _ in $(seq 50); do curl -sf http://127.0.0.1:5098/v2/ >/dev/null && curl -sf http://127.0.0.1:5099/v2/ >/dev/null && break; sleep 0.2; done
timed() { local t0; t0=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $t0" | bc; }
docker tag "$IMAGE" 127.0.0.1:5099/bench/engine-push:1
engine=$(timed docker push 127.0.0.1:5099/bench/engine-push:1)
rm -f /var/lib/containers/cache/blob-info-cache-v1.*  # skopeo would reuse what it compressed before
skopeo_s=$(timed skopeo copy -q --dest-tls-verify=false "docker-daemon:$IMAGE" docker://127.0.0.1:5098/bench/skopeo:1)
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
python3 - "$OUT" "$IMAGE" "$size" "$engine" "$skopeo_s" "$(du -sb "$W/5099" | cut -f1)" "$(du -sb "$W/5098" | cut -f1)" <<'PY'
import json, sys, datetime, os
out, image, size, engine, skopeo, engine_b, skopeo_b = sys.argv[1:]
doc = {"schema": "imagesmith.bench-push-paths/1", "date": datetime.date.today().isoformat(), "image": image,
       "image_bytes": int(size), "cores": os.cpu_count(),
       "engine_push": {"seconds": round(float(engine), 1), "registry_bytes": int(engine_b)},
       "skopeo_from_engine": {"seconds": round(float(skopeo), 1), "registry_bytes": int(skopeo_b)}}
open(out, "w").write(json.dumps(doc, indent=2) + "\n")
print(json.dumps(doc))
PY
