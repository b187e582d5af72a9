"""Interrupted while the engine creates a container (Ctrl-C, or SIGTERM when scancel stops a fleet job), the
container may exist though its ID never came back: every container of the run's own label is removed, so none is
left behind in the Created state (seen in the Slurm Ctrl-C test)."""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.edges.engine import Engine, RunSpec


class Container:
    def __init__(self, store: "Containers", labels: dict[str, str]) -> None:
        self.id, self.labels, self.store = f"c{len(store.made)}", labels, store

    def remove(self, force: bool = False) -> None:
        self.store.made.remove(self)


class Containers:
    def __init__(self) -> None:
        self.made: list[Container] = []

    def create(self, image: str, args: Any, **kw: Any) -> Container:
        self.made.append(Container(self, dict(kw.get("labels") or {})))  # the engine made it ...
        raise KeyboardInterrupt("signal 15")  # ... and the answer never arrived

    def list(self, all: bool = False, sparse: bool = False, filters: dict[str, str] | None = None) -> list[Container]:
        key, _, value = (filters or {}).get("label", "").partition("=")
        return [c for c in self.made if c.labels.get(key) == value]


class Client:
    def __init__(self) -> None:
        self.containers = Containers()

    def version(self) -> dict[str, Any]:
        return {"Version": "20.10.24", "ApiVersion": "1.41", "Components": [{"Name": "Engine"}]}

    def info(self) -> dict[str, Any]:
        return {"ServerVersion": "20.10.24"}


@pytest.mark.parametrize("how", ["run", "started"])
def test_a_container_created_as_the_signal_came_is_removed(how: str) -> None:
    client = Client()
    engine = Engine(client=client)
    bystander = Container(client.containers, {"io.imagesmith.run": "verify-other"})
    client.containers.made.append(bystander)  # another process's container: not ours to remove
    spec = RunSpec(image="sha256:" + "1" * 64, command=["python3", "-c", "pass"], labels={"io.imagesmith.run": "verify-42"})
    with pytest.raises(KeyboardInterrupt):
        if how == "run":
            engine.run(spec)
        else:
            with engine.started(spec):
                pass
    assert client.containers.made == [bystander]


class VanishingApi:
    """docker-py's low-level client as a daemon answers while a build's step container goes away: the list still
    names it, but it is gone by the time it would be inspected (the engine removes it once the build's client left)."""

    def __init__(self) -> None:
        self.listed = [{"Id": "a" * 64, "Labels": {"org.opencontainers.image.title": "r"}},
                       {"Id": "b" * 64, "Labels": {"org.opencontainers.image.title": "r"}}]
        self.removed: list[str] = []

    def containers(self, **kw: Any) -> list[dict[str, Any]]:
        return self.listed

    def inspect_container(self, container: str) -> dict[str, Any]:
        if container == "b" * 64:
            raise api_error(404, f"No such container: {container}")
        return {"Id": container, "Config": {"Labels": {}}}

    def remove_container(self, container: str, **kw: Any) -> None:
        self.removed.append(container)


def api_error(status: int, explanation: str) -> Exception:
    import docker.errors
    import requests

    response = requests.Response()
    response.status_code, response.reason = status, "Not Found"
    error: Exception = docker.errors.NotFound(requests.exceptions.HTTPError(response=response), response=response,
                                              explanation=explanation)
    return error


def test_a_container_gone_between_the_list_and_its_inspection_is_no_error() -> None:
    import docker.models.containers

    api = VanishingApi()
    client = type("DockerClient", (), {"api": api})()
    client.containers = docker.models.containers.ContainerCollection(client=client)  # docker-py's own listing code
    engine = Engine(client=client)
    assert engine.containers_with_label("org.opencontainers.image.title", "r") == ["a" * 64, "b" * 64]
    assert engine.remove_containers("org.opencontainers.image.title", "r") == 2 and api.removed == ["a" * 64, "b" * 64]
