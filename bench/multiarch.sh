#!/usr/bin/env bash
# Issue 24's benchmark: a GH200 cell (bench/configs/gh200.yaml) built for linux/arm64 under emulation and for
# linux/amd64 natively, one after the other, each from no cache; wall time and image size of each, as a table.
# Needs the two bases: imagesmith base bootstrap --os debian12 [--arch arm64]. Usage: bench/multiarch.sh [OUT]
set -euo pipefail
OUT=${1:-build/bench-gh200}
BIN=${BIN:-.venv/bin}
MATRIX=bench/configs/gh200.yaml
mkdir -p "$OUT"
echo "| platform | target | build (s) | image size (GB) |"
echo "| --- | --- | ---: | ---: |"
for target in 2.14.1-cu130-py3.11-debian12-base 2.14.1-cu130-py3.11-debian12-arm64-base; do
  "$BIN/imagesmith" build --matrix "$MATRIX" --out "$OUT/$target" --only "$target" --jobs 1 --no-prune \
    --allow-root /etc/ssl/certs > "$OUT/$target.log" 2>&1 || { echo "build of $target failed: $OUT/$target.log" >&2; exit 1; }
  read -r ref seconds size < <("$BIN/python" -c 'import sys
from pathlib import Path
from imagesmith.model import loader, schemas
doc = loader.load_json_artifact(Path(sys.argv[1]), schema=schemas.BUILD_REPORT)  # the one strict reader
t = next(t for t in doc["targets"] if t["target"] == sys.argv[2])
print(t["image"], t["seconds"], t["size_bytes"])' "$OUT/$target/report.json" "$target")
  arch=$(docker image inspect --format '{{.Architecture}}' "$ref")
  printf '| linux/%s | %s | %.0f | %.2f |\n' "$arch" "$target" "$seconds" "$(echo "$size / 1000000000" | bc -l)"
done
