"""Promotion benchmark: what a build job's push to staging costs, and what
publishing the same image then costs with imagesmith's registry-side
promotion (no engine), per image.

    python bench/promote.py IMAGE [IMAGE ...] [--json bench/results/promote-local.json]

IMAGE: local images (e.g. the targets of examples/local.yaml after `imagesmith
build`). Two fresh registries (scripts/local-registry.sh, free ports, removed at
the end) stand for the site registry and a second one:

  push     the engine pushes the image to the staging repository (a build job's
           `--stage`; every layer travels);
  mount    `Promoter` into the release repository of the same registry: blob
           mounts and one manifest PUT (what `imagesmith publish` does);
  copy     `Promoter` into the second registry: blobs copied in 64 MiB chunks
           through this process (where the staging repository is on another
           registry, or a registry refuses mounts).

Bytes are counted from the manifests (compressed blob sizes) and from what the
promoter sent; the digests of all three are read back and must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagesmith.edges.engine import Engine  # noqa: E402
from imagesmith.edges.registry import Credentials, Registry  # noqa: E402
from imagesmith.stages.release.promote import Promoter  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalRegistry:
    """scripts/local-registry.sh in a folder of its own, on a free port."""

    def __init__(self, folder: Path) -> None:
        self.env = os.environ | {"IMAGESMITH_REGISTRY_DIR": str(folder), "IMAGESMITH_REGISTRY_PORT": str(free_port())}
        self.host = f"127.0.0.1:{self.env['IMAGESMITH_REGISTRY_PORT']}"
        self.folder = folder

    def __enter__(self) -> "LocalRegistry":
        subprocess.run(["bash", str(ROOT / "scripts" / "local-registry.sh"), "start"], env=self.env, check=True, capture_output=True)
        user, password = (self.folder / "credentials").read_text().strip().split(":", 1)
        self.credentials = Credentials(user, password, "bench")
        self.client = Registry(self.host, self.credentials)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "local-registry.sh"), "stop"], env=self.env, check=False, capture_output=True)


def one(engine: Engine, image: str, site: LocalRegistry, other: LocalRegistry, n: int) -> dict[str, Any]:
    name, tag = f"{site.host}/bench/staging", f"ctx-{n}"
    engine.tag(image, name, tag)
    t0 = time.monotonic()
    try:
        digest = engine.push(name, tag, site.credentials.auth_config(), lambda line: None)
    finally:
        engine.untag(f"{name}:{tag}")
    push_s = time.monotonic() - t0
    manifest = site.client.manifest("bench/staging", digest)
    assert manifest is not None
    doc = json.loads(manifest.raw)
    blob_bytes = sum(int(b["size"]) for b in [doc["config"], *doc["layers"]])
    source = f"{site.host}/bench/staging@{digest}"
    mount = Promoter(site.client, site.client)(source, "bench/release", f"r{n}")
    copy = Promoter(site.client, other.client)(source, "bench/release", f"r{n}")
    read_back = {r.host: r.manifest_digest("bench/release", f"r{n}") for r in (site.client, other.client)}
    assert set(read_back.values()) == {digest}, read_back
    return {"image": image, "digest": digest, "layers": len(doc["layers"]), "blob_bytes": blob_bytes,
            "push_seconds": round(push_s, 2), "mount": mount.to_json(), "copy": copy.to_json(),
            "digests_equal": True}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| image | compressed | push to staging | promote (mount) | bytes moved | promote (copy) | bytes moved | digests |\n"
            "|---|---:|---:|---:|---:|---:|---:|---|")
    lines = [f"| {r['image']} | {r['blob_bytes'] / 1e6:.1f} MB | {r['push_seconds']:.1f} s | {r['mount']['seconds']:.2f} s "
             f"| {r['mount']['bytes_moved'] / 1e3:.1f} kB | {r['copy']['seconds']:.1f} s | {r['copy']['bytes_moved'] / 1e6:.1f} MB "
             f"| {'equal' if r['digests_equal'] else 'DIFFER'} |" for r in rows]
    return "\n".join([head, *lines])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("images", nargs="+")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    engine = Engine()
    with tempfile.TemporaryDirectory(prefix="imagesmith-bench-promote-") as tmp, \
            LocalRegistry(Path(tmp, "site")) as site, LocalRegistry(Path(tmp, "other")) as other:
        rows = [one(engine, image, site, other, n) for n, image in enumerate(args.images)]
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
