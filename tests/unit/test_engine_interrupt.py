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

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[Container]:
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
