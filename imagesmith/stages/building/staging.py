"""Staging: images pass from machine to machine through a registry, by digest.

``imagesmith build --stage REGISTRY/REPO`` pushes every image it builds (or
finds cached) to a staging repository under a *content tag*,
``ctx-<context hash>`` (never a release tag), records the manifest digest in
the target's build artifact (``OUT/<target>/build.json``) and measures the
image's inventory for the SBOM the release will carry (so publishing needs no
engine).

A job that builds only some targets (``--only``/``--layer``) needs their
ancestors' images. Each ancestor is, in order:

1. *adopted* from the build artifact its own job left (``OUT/<parent>/build.json``
   with a staged digest, as CI hands artifacts to the jobs that need them):
   pulled by digest when this engine lacks it, checked to be that image ID;
   its own ancestors are then not needed at all;
2. else found in the engine's cache, or in the staging repository under its
   content tag (which a job anywhere computes the same from the same inputs),
   pulled;
3. else built here (and staged).

The image ID after a pull is the config digest of the staged manifest, so a
child built on another host starts ``FROM`` exactly its parent's staged image
and gets the same context hash (hence the same content tag) there.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

import tenacity

from imagesmith import runstate
from imagesmith.edges.credentials import STAGE_FLAG, CredentialStore, check_artifact_host
from imagesmith.edges.engine.layerstore import LayerStore, StoreUnreadable
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.edges.registry import Credentials, redact
from imagesmith.edges.runcontext import RunContext
from imagesmith.errors import BuildError, ImagesmithError, UserError
from imagesmith.model import loader
from imagesmith.model.buildreport import BuildRecord, Staged, check_repository
from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan, Target
from imagesmith.model.ref import ImageRef
from imagesmith.progress import Display, QuietDisplay
from imagesmith.render import contexts as render
from imagesmith.stages import artifacts
from imagesmith.stages.building.cudastage import Delivery
from imagesmith.stages.building.directpush import DirectPush
from imagesmith.stages.release.push import Backoff, message_of, push_once, retrying, transient

TAG_PREFIX = "ctx-"


def content_tag(context_hash: str) -> str:
    """``sha256:<hex>`` -> ``ctx-<hex>`` (68 characters; a release tag never looks like it)."""
    return TAG_PREFIX + context_hash.split(":", 1)[1]


def parse_repository(name: str, release: str) -> tuple[str, str]:
    """``host[:port]/path`` -> (host, path); the staging repository must not be the release repository."""
    check_repository(name, lambda why: UserError(f"--stage {why}"))
    if name == release:
        raise UserError(f"--stage {name} is the release repository; stage into another repository "
                        f"(e.g. {name.rsplit('/', 1)[0]}/staging): release tags go only where publish puts them")
    ref = ImageRef.parse(name)
    return ref.host, ref.repository


def needed(plan: Plan, picked: set[str], adopted: set[str]) -> Plan:
    """The picked targets and the ancestors they need: up to (and with) the first adopted one."""
    index, keep = plan.by_id(), set()
    for tid in picked:
        while tid and tid not in keep:
            keep.add(tid)
            tid = "" if tid in adopted else (index[tid].parent or "")
    return Plan(plan.matrix, plan.date, tuple(t for t in plan.targets if t.id in keep), plan.warnings)


def adoption_problem(found: artifacts.Found, t: Target, dockerfile: bytes | None) -> str:
    """Why another job's artifact cannot stand for ``t`` here (empty: it can): it must have built and
    staged this very target, from the Dockerfile this checkout renders (another imagesmith or matrix
    would build something else)."""
    rec = found.record
    if not rec.complete:
        return runstate.not_complete(rec.job_state(), "its build job")
    if not rec.ok or rec.staged is None:
        return f"it was not staged ({rec.status})"
    if artifacts.build_identity(rec.target) != artifacts.build_identity(t):
        return "it was planned from another matrix"
    path = found.folder / "Dockerfile"
    if dockerfile is None or _read_dockerfile(path, len(dockerfile)) != dockerfile:
        return f"its Dockerfile ({path}) is not what this checkout renders (another imagesmith version or template?)"
    return ""


class Stage:
    """The staging repository for one build run (what :class:`imagesmith.stages.building.build.Builder` calls)."""

    def __init__(self, engine: EngineProtocol, registry: RegistryProtocol, path: str, out: Path, credentials: Credentials | None = None,
                 display: Display | None = None, measure_inventory: bool = True, backoff: Backoff = Backoff(),
                 sleep: Callable[[float], None] = time.sleep, direct: DirectPush | bool | None = None) -> None:
        self.engine, self.registry, self.path, self.out = engine, registry, path, out
        self.name = f"{registry.host}/{path}"
        self.credentials = credentials
        self.auth = credentials.auth_config() if credentials else None
        self.backoff, self.sleep = backoff, sleep
        self.display = display or QuietDisplay()
        self.measure_inventory = measure_inventory
        self.adopted: dict[str, BuildRecord] = {}
        # imagesmith's own pushes (None: ask the engine once; False: the engine pushes)
        self._asked, self._direct = direct is not None, direct if isinstance(direct, DirectPush) else None

    # -- which targets this job builds ------------------------------------------------------
    def prepare(self, plan: Plan, picked: set[str], matrix: Matrix) -> Plan:
        """Adopt what other jobs staged (their artifacts in OUT) and drop what that makes unneeded."""
        found = artifacts.find_builds(self.out) if self.out.is_dir() else {}
        candidates = [t for t in plan.targets if t.id not in picked and t.id in found]
        dockerfiles = {c.target.id: c.files.get("Dockerfile") for c in render.render_all(plan, matrix)} if candidates else {}
        for t in candidates:
            staged = found[t.id].record.staged
            if staged is not None:  # its pull gets --stage's login: it must name the declared host
                check_artifact_host(staged.host, self.registry.host, str(found[t.id].folder / artifacts.BUILD_FILE),
                                    "staged repository", STAGE_FLAG)
            why = adoption_problem(found[t.id], t, dockerfiles.get(t.id))
            if why:
                self.display.note(f"{t.id}: not taken from {found[t.id].folder / artifacts.BUILD_FILE}: {why}")
            else:
                self.adopted[t.id] = found[t.id].record
        return needed(plan, picked, set(self.adopted))

    def adopts(self, target_id: str) -> bool:
        return target_id in self.adopted

    def adopt(self, t: Target, result: Any) -> None:
        """An ancestor another job built and staged: its image here (pulled by digest if absent)."""
        rec = self.adopted[t.id]
        assert rec.staged and rec.image_id
        self.display.update(t.id, "pulling", rec.staged.reference[-19:])
        info = self._image(rec.staged.reference, rec.image_id)
        result.image_id, result.status, result.context_hash = rec.image_id, "cached", rec.context_hash
        result.facts, result.size_bytes = dict(rec.facts or {}), info.size
        result.staged = replace(rec.staged, pushed=False, adopted=True)

    def find(self, t: Target, result: Any) -> bool:
        """Not in this engine's cache: is it staged under its content tag? Then pull it, don't build."""
        tag = content_tag(result.context_hash)
        have = self.registry.manifest(self.path, tag)
        if have is None or not have.config_digest:
            return False
        self.display.update(t.id, "pulling", f"{tag[:16]}… from {self.name}")
        info = self._image(f"{self.name}@{have.digest}", have.config_digest)
        self.engine.tag(info.id, *t.image.split(":", 1))
        result.image_id, result.status = info.id, "cached"
        result.staged = Staged(self.name, tag, have.digest)
        return True

    def _image(self, reference: str, image_id: str) -> Any:
        info = self.engine.image(image_id) or self.engine.pull(reference, self.auth)
        if info.id != image_id:
            raise BuildError(f"{reference} is image {info.id}, not {image_id} as recorded; the staging repository was changed: build again")
        return info

    # -- after a target built ----------------------------------------------------------------
    def push(self, t: Target, result: Any) -> None:
        """Stage a measured image under its content tag (unless it is there), read the digest back,
        measure its inventory for the SBOM."""
        if not result.staged:
            result.staged = self._push(t, result.image_id, content_tag(result.context_hash))
        if self.measure_inventory:
            self._inventory(t, result.image_id)

    def cuda_delivery(self) -> Delivery:
        """The CUDA layer's route through this repository (:mod:`imagesmith.stages.building.cudastage`)."""
        direct = self.direct()
        return Delivery(self.engine, self.registry, self.path, self.name, self.auth, self._push_image,
                        direct.learn if direct else lambda diff_id, blob: None)

    def direct(self) -> DirectPush | None:
        """imagesmith's own pushes from the engine's store, where it can read it (asked once); None: the engine's."""
        if not self._asked:
            store = None if self.engine.kind().podman else LayerStore.of(self.engine.info())
            self._asked, self._direct = True, DirectPush(store, self.registry, self.path) if store else None
        return self._direct

    def _push(self, t: Target, image_id: str, tag: str) -> Staged:
        have = self.registry.manifest(self.path, tag)
        if have is not None and have.config_digest == image_id:
            return Staged(self.name, tag, have.digest)
        if have is not None:  # another host's build of the same content holds the tag: keep both, tagged
            tag = f"{tag[:112]}-{image_id.split(':', 1)[1][:12]}"
        self.display.update(t.id, "pushing", f"staging {tag[:16]}…")
        digest = self._push_image(image_id, tag)
        back = self.registry.manifest(self.path, tag)
        if back is None or back.digest != digest or back.config_digest != image_id:
            raise BuildError(f"staged {self.name}:{tag} but the registry serves {back.digest if back else 'nothing'} "
                             f"(pushed {digest} of image {image_id}); something else writes to the staging repository")
        return Staged(self.name, tag, digest, pushed=True)

    def _push_image(self, image_id: str, tag: str) -> str:
        """``image_id`` into the staging repository as ``tag``: by imagesmith from the engine's store where it can
        (:mod:`imagesmith.stages.building.directpush`), else (or when the store does not give that image's bytes)
        by the engine; retried while retrying may help. The manifest's digest."""
        direct = self.direct()
        if direct is not None:
            try:
                return self._retried(tag, partial(direct.push, image_id, tag))
            except StoreUnreadable as exc:
                self.display.note(f"staging push {self.name}:{tag}: through the engine: its store did not give "
                                  f"the image's bytes ({exc})")
        self.engine.tag(image_id, self.name, tag)
        try:
            return self._retried(tag, partial(push_once, self.engine, self.registry, self.path, self.name, tag,
                                              self.auth, lambda line: None))
        finally:
            self.engine.untag(f"{self.name}:{tag}")

    def _retried(self, tag: str, push: Callable[[], str]) -> str:
        """One push path's retries (:mod:`imagesmith.stages.release.push`): the registry's own detail on a server
        error, retried with backoff while retrying may help; then one error saying how often it was tried."""
        ref, tries = f"{self.name}:{tag}", max(1, self.backoff.tries)

        def note(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            self.display.note(f"staging push {ref}: {redact(message_of(exc or Exception()), self.credentials)}; "
                              f"retry {state.attempt_number} of {tries - 1} in {wait:g}s")
        try:
            return retrying(self.backoff, self.sleep, note)(push)
        except (ImagesmithError, OSError) as exc:
            if not transient(exc) or tries == 1:
                raise
            last = redact(message_of(exc), self.credentials)
        raise BuildError(f"staging push {ref} failed {tries} times; last error: {last}. The staging registry "
                         f"{self.registry.host} looks down or overloaded: check it, then build again (what was staged stays)")

    def _inventory(self, t: Target, image_id: str) -> None:
        from imagesmith.stages.evidence.evidence import INVENTORY_FILE, cached_inventory
        from imagesmith.stages.verify.incontainer import run_facts

        self.display.update(t.id, "pushing", "measuring the inventory for the SBOM")
        cached_inventory(self.out / t.id / INVENTORY_FILE, image_id, partial(run_facts, self.engine, args=["--inventory"]))


def open_stage(name: str, release: str, engine: EngineProtocol, out: Path, store: CredentialStore | None = None,
               ca_file: Path | None = None, display: Display | None = None) -> Stage:
    """A :class:`Stage` for ``--stage host/path``: the operator declared that host, so it gets the
    store's login for it (--credentials, the environment pair, the docker config, each for its host)."""
    host, path = parse_repository(name, release)
    context = RunContext(store or CredentialStore())
    credentials = context.store.for_host(host)
    return Stage(engine, context.registry(host, credentials, ca_file=ca_file), path, out, credentials, display)


def _read_dockerfile(path: Path, size: int) -> bytes | None:
    """Another build job's rendered Dockerfile (in OUT: a regular file inside its folder, read up to one byte more
    than the one this checkout renders); None when there is none or it is refused."""
    if not path.is_file():
        return None
    try:
        return loader.read_confined(path, cap=size + 1)
    except UserError:
        return None
