"""The engine gives a container its GPUs by CDI: the RunSpec fields (cdi_devices, devices, mounts, links) become
the docker SDK's containers.create arguments and a put_archive of symbolic links before start, checked with a
fake docker client (the real engine: tests/integration/test_cdi_engine.py)."""

from __future__ import annotations

import io
import tarfile
from typing import Any

from docker.types import DeviceRequest, Mount

from imagesmith.edges.engine import Engine, RunSpec, bind_mounts, cdi_requests, tar_links
from imagesmith.model.cdi import BindMount, DeviceMapping, Symlink

IMAGE = "sha256:" + "1" * 64


class Container:
    id = "c0"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.attrs: dict[str, Any] = {}

    def put_archive(self, path: str, data: bytes) -> bool:
        self.calls.append(("put_archive", (path, members(data))))
        return True

    def start(self) -> None:
        self.calls.append(("start", None))

    def wait(self, timeout: float) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self, **kw: Any) -> Any:
        return iter([b"out\n"] if kw.get("stdout") else [])

    def remove(self, force: bool = False) -> None:
        self.calls.append(("remove", force))


class Containers:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.container = Container()

    def create(self, image: str, args: Any, **kw: Any) -> Container:
        self.created.append(kw)  # a Docker engine: what it was asked is what inspect says
        self.container.attrs = {"HostConfig": {"DeviceRequests": kw.get("device_requests") or None, "Devices": kw.get("devices") or []}}
        return self.container


class Client:
    def __init__(self) -> None:
        self.containers = Containers()

    def version(self) -> dict[str, Any]:
        return {"Version": "20.10.24", "ApiVersion": "1.41", "Components": [{"Name": "Engine", "Version": "20.10.24"}]}

    def info(self) -> dict[str, Any]:
        return {"ServerVersion": "20.10.24", "SecurityOptions": ["name=seccomp,profile=default"]}


def members(data: bytes) -> list[tuple[str, str, str]]:
    """(name, kind, link target) of every member of a tar."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, "link" if m.issym() else "dir" if m.isdir() else "file", m.linkname) for m in tar.getmembers()]


def run(spec: RunSpec) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    client = Client()
    result = Engine(client=client).run(spec)
    assert (result.exit_code, result.stdout) == (0, "out\n")
    (created,) = client.containers.created
    return created, client.containers.container.calls


def test_translated_edits_become_devices_binds_environment_and_links_before_start() -> None:
    spec = RunSpec(image=IMAGE, command=["sh", "-c", "true"], gpus="none", environment={"NVIDIA_VISIBLE_DEVICES": "void"},
                   files={"run.py": b"print()"}, files_dir="/opt/imagesmith",
                   devices=(DeviceMapping("/dev/null", "/dev/imagesmith-gpu0"), DeviceMapping("/dev/nvidiactl", "/dev/nvidiactl", "rw")),
                   mounts=(BindMount("/usr/lib/libcuda.so.580", "/usr/lib/libcuda.so.580"), BindMount("/run/x", "/run/x", read_only=False)),
                   links=(Symlink("/usr/lib/libcuda.so.1", "libcuda.so.580"), Symlink("/usr/lib/libcuda.so", "libcuda.so.1")))
    created, calls = run(spec)
    assert created["devices"] == ["/dev/null:/dev/imagesmith-gpu0:rwm", "/dev/nvidiactl:/dev/nvidiactl:rw"]
    assert created["mounts"] == [Mount("/usr/lib/libcuda.so.580", "/usr/lib/libcuda.so.580", type="bind", read_only=True),
                                 Mount("/run/x", "/run/x", type="bind", read_only=False)]
    assert created["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"} and created["device_requests"] == []
    assert [c[0] for c in calls] == ["put_archive", "put_archive", "start", "remove"]  # the payload, then the links, then start
    assert calls[1][1] == ("/", [("usr/lib/libcuda.so.1", "link", "libcuda.so.580"), ("usr/lib/libcuda.so", "link", "libcuda.so.1")])


def test_an_engine_with_cdi_gets_the_names_as_a_device_request_of_driver_cdi() -> None:
    created, calls = run(RunSpec(image=IMAGE, command=["python3"], gpus="none", cdi_devices=("nvidia.com/gpu=0", "nvidia.com/gpu=1")))
    assert created["device_requests"] == [DeviceRequest(driver="cdi", device_ids=["nvidia.com/gpu=0", "nvidia.com/gpu=1"])]
    assert dict(created["device_requests"][0]) == {"Driver": "cdi", "Count": 0, "DeviceIDs": ["nvidia.com/gpu=0", "nvidia.com/gpu=1"],
                                                   "Capabilities": [], "Options": {}}
    assert "devices" not in created and "mounts" not in created and [c[0] for c in calls] == ["start", "remove"]


def test_gpus_without_cdi_are_the_nvidia_device_request_as_before() -> None:
    created, _ = run(RunSpec(image=IMAGE, command=["python3"], gpus="all"))
    assert created["device_requests"] == [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    assert "devices" not in created and "mounts" not in created


def test_the_pure_helpers() -> None:
    assert cdi_requests(()) == [] and cdi_requests(["", "nvidia.com/gpu=all"]) == [DeviceRequest(driver="cdi", device_ids=["nvidia.com/gpu=all"])]
    assert bind_mounts([]) == []
    assert members(tar_links([Symlink("/a/b/c", "../d")])) == [("a/b/c", "link", "../d")]  # no folder entries: the engine makes them


def test_the_engine_tells_the_container_id_before_start_and_gives_no_network_but_loopback() -> None:
    told: list[str] = []
    created, calls = run(RunSpec(image=IMAGE, command=["python3"], on_created=told.append))
    assert told == ["c0"] and [c[0] for c in calls] == ["start", "remove"]
    assert created["network_mode"] == "none" and "network_disabled" not in created  # /etc/hosts names localhost


def test_a_failing_on_created_removes_the_container_it_was_told_of() -> None:
    client = Client()

    def refuse(_cid: str) -> None:
        raise RuntimeError("watch could not start")
    try:
        Engine(client=client).run(RunSpec(image=IMAGE, command=["python3"], on_created=refuse))
    except RuntimeError:
        pass
    assert client.containers.container.calls == [("remove", True)]
