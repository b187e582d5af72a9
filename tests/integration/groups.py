"""Which integration modules run together on one pytest-xdist worker, and in which order.

`make test` runs the integration tier on three workers with ``--dist loadfile``: every module runs whole on one
worker (its module fixtures made once), as loadfile does, and the modules of a group below run one after another on
one worker, in the order given (tests/conftest.py's scheduler, :class:`GroupScheduling`). Work units go out in this
order: the groups, then the other modules as :data:`REST` lists them (a module named nowhere comes last), each to
whichever worker runs low first. Three workers on two cores: much of the tier waits (on Debian's mirror and PyPI,
on registries, on Slurm, on sleeping containers), and a third worker fills that time. What the run makes once
(bases, the torch CPU base, the CUDA cells: shared.py) is made by the first worker that needs it; a worker that
needs it meanwhile waits for it.

"builds": the modules whose tests build with imagesmith on the torch CPU base. The engine's layer cache only hits
for a build whose arguments match the cold build's, and the package sources' loopback port is one of them: each
worker pins a port of its own (IMAGESMITH_SOURCES_PORT, engine_fixtures.sources_port), so these builds run on the
worker that built the torch CPU base cold (the first that needs it: this group comes first), one after another.
On another worker they would build correctly, but cold.
"""

from __future__ import annotations

from typing import Any

GROUPS: dict[str, tuple[str, ...]] = {
    "builds": ("test_build.py", "test_build_state.py", "test_trust_fanout.py", "test_staging.py"),
}
# The other modules, in the order they go out. First the CUDA cells (the run's longest chain: building them, then
# pushing two to a registry) and the Podman tier (its own engine, its own cold build), then what needs no torch CPU base while the first worker builds it cold, then the long
# ones that do (test_verify also waits for the CUDA cells), then the short ones, which fill the end.
REST = ("test_cuda_layer.py", "test_multiarch.py", "test_podman.py", "test_evidence_registry.py", "test_registry_faults.py",
        "test_verify_entrypoint.py", "test_build_credentials.py", "test_slurm_cluster.py", "test_verify.py",
        "test_verify_trust.py", "test_registry.py", "test_prometheus.py", "test_vulnerability_registry.py",
        "test_image_index.py", "test_recheck_registry.py", "test_credentials_engine.py", "test_cdi_engine.py",
        "test_browser.py")
MODULE_GROUP = {module: group for group, modules in GROUPS.items() for module in modules}
ORDER = {module: i for i, module in enumerate([m for modules in GROUPS.values() for m in modules] + list(REST))}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope(nodeid: str) -> str:
    """The work unit of a test: its module's group, else its module."""
    module = module_of(nodeid)
    return MODULE_GROUP.get(module.rsplit("/", 1)[-1], module) if "/integration/" in f"/{module}" else module


def rank(nodeid: str) -> int:
    """Where a test's module goes in the run's order (a module named nowhere: last, as collected)."""
    module = module_of(nodeid)
    return ORDER.get(module.rsplit("/", 1)[-1], len(ORDER)) if "/integration/" in f"/{module}" else len(ORDER)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's loadfile scheduling, with the groups above as work units (xdist's own loadgroup reads
    ``xdist_group`` marks into node IDs, which pytest 9 no longer lets a plugin rewrite)."""
    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    return GroupScheduling(config, log)
