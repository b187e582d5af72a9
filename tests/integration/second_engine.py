"""A second Docker engine on this machine: another "CI runner" for the
fan-out tests, with nothing shared with the main engine but the kernel.

Its own ``dockerd`` with its own ``--data-root``, ``--exec-root`` (hence its
own managed containerd), ``--pidfile``, unix socket and bridge. Never
``--bridge none``: dockerd then deletes the host's ``docker0``, the main
engine's bridge (seen in another engineer's run). It gets a bridge interface
of its own with a private /24 of its own, and no iptables, masquerading or IP
forwarding rules (builds and the payload use host networking or none). Every
name carries a random suffix; :meth:`stop` always removes the daemon (its
process group), the bridge and the folders.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import docker


def _free_subnet() -> str:
    """A 10.x.y.0/24 no route of this host uses."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    used = [ipaddress.ip_network(w.split()[0], strict=False) for w in routes.splitlines() if w[:1].isdigit()]
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return str(net)
    raise RuntimeError("no free 10.x.y.0/24 for the second engine's bridge")


class SecondEngine:
    def __init__(self) -> None:
        # A short folder: the socket path must stay under 108 characters.
        self.folder = Path(tempfile.mkdtemp(prefix="is14-dockerd-"))
        self.sock = self.folder / "docker.sock"
        self.bridge = f"i14br{uuid.uuid4().hex[:8]}"  # at most 15 characters (IFNAMSIZ)
        self.proc: subprocess.Popen[bytes] | None = None
        self.bridge_made = False

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    def start(self, wait_s: float = 300) -> "SecondEngine":  # a hang guard: dockerd starts slowly on a loaded host
        net = ipaddress.ip_network(_free_subnet())
        subprocess.run(["ip", "link", "add", "name", self.bridge, "type", "bridge"], check=True)
        self.bridge_made = True
        subprocess.run(["ip", "addr", "add", f"{net[1]}/{net.prefixlen}", "dev", self.bridge], check=True)
        (self.folder / "daemon.json").write_text("{}")
        log = (self.folder / "dockerd.log").open("wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--config-file", str(self.folder / "daemon.json"), "--data-root", str(self.folder / "root"),
             "--exec-root", str(self.folder / "exec"), "--pidfile", str(self.folder / "docker.pid"),
             "--host", self.host, "--bridge", self.bridge, "--iptables=false", "--ip-masq=false", "--ip-forward=false"],
            stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                docker.DockerClient(base_url=self.host, timeout=10).ping()
                return self
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        tail = (self.folder / "dockerd.log").read_text(errors="replace")[-1500:]
        self.stop()
        raise RuntimeError(f"the second dockerd did not start: {tail}")

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.host, timeout=900)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        if self.bridge_made:
            subprocess.run(["ip", "link", "delete", self.bridge], check=False, capture_output=True)
            self.bridge_made = False
        for mount in self.mounts():  # what the daemon left mounted (its netns file), deepest first
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)

    def mounts(self) -> list[str]:
        points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        return sorted((p for p in points if p.startswith(f"{self.folder}/")), key=len, reverse=True)
