"""Walk the plan's DAG and build every target with the engine.

Parents first, independent targets in parallel (``jobs``), each child FROM its
parent's image *ID*. A target whose rendered context (+ build arguments +
parent ID) hashes to an image that already exists is taken from cache. A
failed target skips its descendants; the rest go on (the walk is stdlib
:class:`graphlib.TopologicalSorter`). After each build the
image is measured from inside and compared with the plan. With a stage
(``build --stage``, :mod:`imagesmith.stages.building.staging`) each image is also pushed to a
staging repository by digest, and ancestors built by other jobs come from there.
Every target not taken from another job gets its artifact, OUT/<target>/build.json.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import graphlib
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, TextIO

from imagesmith import runstate
from imagesmith.atomic import write_json
from imagesmith.edges.credentials import CredentialStore
from imagesmith.edges.engine import RUN_LABEL, BuildOutcome, build_progress, registry_host
from imagesmith.edges.protocols import EngineProtocol, ImageInfo
from imagesmith.edges.sources import SourceServer
from imagesmith.errors import BuildError, ImagesmithError, Redactor, UserError
from imagesmith.model import compat, loader
from imagesmith.model.buildreport import BuildReport, Release, TargetResult
from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan, Target
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.ref import ImageRef
from imagesmith.progress import Display, QuietDisplay
from imagesmith.render import contexts as render
from imagesmith.render import cudalayer
from imagesmith.report import log_tail
from imagesmith.stages import artifacts
from imagesmith.stages.artifacts import TargetRun
from imagesmith.stages.building import cudabuild, cudastage
from imagesmith.stages.building.buildreport import not_ok
from imagesmith.stages.building.cache import (
    CACHE_REPOSITORY,
    LABEL_HASH,
    OWNER_REPOSITORY,
    PREBUILD_REPOSITORY,
    context_hash,
    owner_id,
    owner_tag,
)
from imagesmith.stages.building.measured import base_mismatch, compare_facts, emulation_hint
from imagesmith.stages.building.slots import Slots, Ticket, priorities
from imagesmith.units import gb

LABEL_RUN = RUN_LABEL


def _made_last(outcome: BuildOutcome) -> bool:
    """The build's result is an image it made (its last step did not come from cache)."""
    return bool(outcome.image_id and outcome.made and outcome.image_id.split(":", 1)[-1].startswith(outcome.made[-1]))


class StageLike(Protocol):
    """A staging repository (:class:`imagesmith.stages.building.staging.Stage`)."""

    def adopts(self, target_id: str) -> bool: ...
    def adopt(self, t: Target, result: TargetRun) -> None: ...
    def find(self, t: Target, result: TargetRun) -> bool: ...
    def push(self, t: Target, result: TargetRun) -> None: ...
    def cuda_delivery(self) -> cudastage.Delivery: ...


class Builder:
    def __init__(self, plan: Plan, matrix: Matrix, engine: EngineProtocol, out: Path, jobs: int = 2,
                 display: Display | None = None, environ: Mapping[str, str] | None = None, prune: bool = True,
                 stage: StageLike | None = None, store: CredentialStore | None = None,
                 on_finished: Callable[[TargetResult], None] | None = None) -> None:
        self.prune, self.stage = prune, stage
        self.on_finished = on_finished  # told of each target as it finishes (built and staged, or not)
        self.store = store or CredentialStore()  # the run's credentials, by host (none: pull anonymously)
        self.plan, self.matrix, self.engine, self.out = plan, matrix, engine, out
        self.jobs = max(1, jobs)
        self.display = display or QuietDisplay()
        self.environ = environ
        self.cancel = threading.Event()
        self.slots = Slots(self.jobs, self.cancel)
        self.priority = priorities(plan)
        self.run_id = f"build-{time.time_ns()}"
        self.results = {t.id: TargetRun(t.id, image=t.image) for t in plan.targets}
        self.contexts: dict[str, render.Context] = {}
        self.base_ids: dict[str, str] = {}
        self.base_infos: dict[str, ImageInfo] = {}
        self.base_bytes: dict[str, int] = {}
        self.server: SourceServer | None = None
        self.cuda: cudabuild.CudaImages | None = None
        self._pending_server: SourceServer | None = None
        self._lock = threading.Lock()
        self.redact = Redactor([])
        self.owner = owner_id(matrix.file, out)
        self.released: list[str] = []  # image IDs this checkout's owner tags pointed at before this run
        self.stages: list[str] = []  # builder-stage images this run made
        self.made: dict[str, list[str]] = {}  # target -> the images its builds made that nothing tags (dropped if it fails)
        self._handing: dict[str, threading.Event] = {}  # finished targets holding their slot until their children queue

    # -- public ---------------------------------------------------------------------
    def run(self) -> BuildReport:
        """Build the plan; OUT/report.json says ``running`` from the start (replacing the
        last run's), is rewritten as targets finish, and ends ``complete`` or
        ``interrupted`` (Ctrl-C, SIGTERM, an error)."""
        started, t0 = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), time.monotonic()
        tracked = runstate.Tracked(self.out / "report.json", self._report(started, t0).to_json(), not_ok)
        try:
            order = self._order()
            self._artifacts(runstate.RUNNING)
            self._prepare()
            try:
                self._schedule(order, lambda: tracked.update(self._report(started, t0).to_json()))
            finally:
                if self.server:
                    self.server.stop()
                self.engine.remove_containers(LABEL_RUN, self.run_id)
            report = self._report(started, t0)
            self._own_cuda_images()
            if self.prune and report.ok and (self.released or any(r.status == "built" for r in report.results)):
                self._prune()
        except BaseException as exc:  # Ctrl-C, SIGTERM, an error: the report says so, with each target's state
            tracked.stop(exc, self._report(started, t0).to_json())
            self._artifacts(runstate.INTERRUPTED, quiet=True, interrupted_by=runstate.stopped_by(exc))
            raise
        self._artifacts(runstate.COMPLETE)
        tracked.complete(report.to_json())
        return report

    def _report(self, started: str, t0: float) -> BuildReport:
        return BuildReport(self.matrix.file.name, started, time.monotonic() - t0, dict(self.base_ids),
                           tuple(self.results[t.id].model() for t in self.plan.targets),
                           tuple(self.cuda.report()) if self.cuda else (), dict(self.base_bytes), self.engine.kind().record())

    def _artifacts(self, state: str, quiet: bool = False, interrupted_by: str | None = None) -> None:
        """OUT/<target>/build.json of every target this job builds, in the run's state (``running`` from
        the start, so a stale artifact of an earlier run is never taken for this one's)."""
        release = Release.of(self.matrix, self.plan.date)
        records = [artifacts.record_of(self.results[t.id].model(), t, release, state, interrupted_by)
                   for t in self.plan.targets if not self._adopted(t)]
        try:
            artifacts.write_builds(self.out, records)
        except OSError:
            if not quiet:
                raise  # interrupted: the artifacts stay "running", which no reader takes for success either

    def _adopted(self, t: Target) -> bool:
        """Taken from another job's staged artifact (that job's record stays as it is)."""
        return self.stage is not None and self.stage.adopts(t.id)

    # -- disk -----------------------------------------------------------------------
    def _prune(self) -> None:
        """After a fully successful run: drop the builder stages this run made (never
        another run's: a concurrent build may be using its own) and the cache entries
        this checkout stopped using, unless another checkout (owner) still uses them."""
        freed = sum(self.engine.remove_unused(stage) for stage in self.stages)
        for stale in self.engine.tags_in(self._prebuild_repository()):  # left by an earlier run that failed
            self.engine.untag(stale)
        for old_id in self.released:
            info = self.engine.image(old_id)
            if info is None or any(tag.startswith(OWNER_REPOSITORY) for tag in info.tags):
                continue  # gone already, or another checkout's entry too
            for tag in (tag for tag in info.tags if tag.startswith(f"{CACHE_REPOSITORY}:")):
                self.engine.untag(tag)
        if freed:
            self.display.note(f"pruned {freed} builder stages this run made")

    def _drop_made(self, target_id: str) -> None:
        """A failed target leaves no image behind: the builder stages and the last step image its builds made, which
        nothing tags (removed with their untagged parents; one that is tagged, has children or is in use stays).
        ``--no-prune`` keeps them, for a look inside."""
        if not self.prune:
            return
        with self._lock:
            made = self.made.pop(target_id, [])
        for image in reversed(made):
            try:
                self.engine.remove_unused(image)
            except ImagesmithError as exc:  # the target has failed already: say it, do not replace its error
                self.display.note(f"could not remove {image[:19]} that the failed {target_id} made: {exc}")

    def _own(self, name: str, image_id: str) -> None:
        """Point this checkout's owner tag for ``name`` (a target, or a CUDA image) at
        ``image_id``; remember what it pointed at."""
        repository, tag = f"{OWNER_REPOSITORY}{self.owner}", owner_tag(name)
        before = self.engine.image(f"{repository}:{tag}")
        if before is not None and before.id == image_id:
            return
        self.engine.tag(image_id, repository, tag)
        if before is not None:
            with self._lock:
                self.released.append(before.id)

    def _own_cuda_images(self) -> None:
        """The CUDA images (OS base + CUDA layer) this run made or found are this checkout's too:
        one it used before and no longer does is pruned like a target's old image."""
        for r in self.cuda.results.values() if self.cuda else ():
            if r.image_id:
                self._own(str(ImageRef.parse(r.image).tag), r.image_id)

    def _prebuild_repository(self) -> str:
        return f"{PREBUILD_REPOSITORY}/{self.owner}"

    # -- preparation --------------------------------------------------------------
    def _prepare(self) -> None:
        contexts = render.render_all(self.plan, self.matrix)
        render.write(contexts, self.out)
        self.contexts = {c.folder: c for c in contexts}
        for t in self.plan.targets:
            self.results[t.id].dockerfile = str(self.out / t.id / "Dockerfile")
            self.results[t.id].log = str(self.out / t.id / "build.log")
        bases = {t.base_image: t.versions.os for t in self.plan.targets if not t.parent and not self._adopted(t)}
        self.base_ids = {ref: self._base_id(ref, os_key) for ref, os_key in sorted(bases.items())}
        self._refuse_foreign_bases()
        server = SourceServer(self.matrix.sources, self.environ)
        if server.needed:
            if self.matrix.sources.network != "host":
                raise UserError("sources use local folders or credentials, which the build reaches on 127.0.0.1: set sources.network: host")
            self._pending_server = server  # started by the first target that really builds
            self.redact = Redactor(server.redactions())
        self._start_cuda()

    def _refuse_foreign_bases(self) -> None:
        """Every root target's base, as the engine holds it, against the target's platform, before any build step:
        a base of another platform fails its cell now (its descendants are skipped), never after a build that the
        classic builder would run on it anyway (moby/moby#47823)."""
        for t in self.plan.targets:
            info = self.base_infos.get(t.base_image)
            from_os = self.matrix.layer("base").base_from == "os"
            why = base_mismatch(t, info, from_os) if info is not None and not t.parent and not self._adopted(t) else None
            if why:
                self.results[t.id].status, self.results[t.id].error = "failed", why
                self.display.update(t.id, "failed", why[:120])

    def _start_cuda(self) -> None:
        """Make the CUDA images (OS base + shared CUDA layer) beside the DAG (not for a cell already failed)."""
        if any(t.cuda_set for t in self.plan.targets):
            epoch = cudalayer.source_date_epoch(dict(self.environ) if self.environ is not None else None)
            wanted = replace(self.plan, targets=tuple(t for t in self.plan.targets if self.results[t.id].status != "failed"))
            self.cuda = cudabuild.CudaImages(wanted, self.matrix.image.repository, self.engine, self.out, self.base_ids,
                                             self._download_wheels, self.display, epoch, CACHE_REPOSITORY,
                                             self.stage.cuda_delivery() if self.stage is not None else None)
            self.cuda.start()

    def _download_wheels(self, t: Target, pins: Sequence[str], dest: Path, log_path: Path) -> None:
        """A CUDA wheel set's download, with imagesmith's own pip on this host, from ``t``'s package
        sources as its build reaches them (local folders and credentials through the loopback server)."""
        argv = cudabuild.download_argv(sys.executable, pins, dest, self._source_args(t), compat.load().os[t.versions.os].glibc,
                                       t.versions.python, self.matrix.sources.ca_bundle, t.platform.uname)
        env = dict(os.environ if self.environ is None else self.environ, PIP_CONFIG_FILE=os.devnull, **self._proxy_args())
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log:
            log.write("$ pip download " + " ".join(argv[4:]) + "\n")
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)
            pump = threading.Thread(target=self._pump, args=(proc, log), daemon=True)
            pump.start()
            while proc.poll() is None:
                if self.cancel.wait(0.2):
                    proc.terminate()
                    proc.wait()
                    raise BuildError("cancelled")
            pump.join()  # every line is in the log before it closes and its tail is read
        if proc.returncode:
            tail = "; ".join(log_tail(str(log_path))[-3:])
            raise BuildError(f"pip download of the CUDA wheels failed (exit {proc.returncode}): {tail}; log: {log_path}")

    def _pump(self, proc: "subprocess.Popen[str]", log: TextIO) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(self.redact(line.rstrip("\n")) + "\n")
            log.flush()

    def _sources(self) -> SourceServer | None:
        with self._lock:
            if self.server is None and self._pending_server is not None:
                self.server = self._pending_server.start()
            return self.server

    def _base_id(self, ref: str, os_key: str) -> str:
        info = self.engine.image(ref)
        if info is None:
            self.display.note(f"pulling base image {ref}")
            try:
                login = self.store.for_host(registry_host(ref))  # the matrix names the base image: its host's login only
                info = self.engine.pull(ref, login.auth_config() if login else None)
            except UserError as exc:
                raise UserError(f"base image {ref} is not in the engine and cannot be pulled ({exc}); "
                                f"on a host with no registry make it: imagesmith base bootstrap --os {os_key} --tag {ref}") from None
        self.base_bytes[ref] = info.size
        self.base_infos[ref] = info
        return info.id

    # -- the DAG ---------------------------------------------------------------------
    def _order(self) -> graphlib.TopologicalSorter[str]:
        """The plan's DAG, ready to walk (parent -> child); a cycle is a broken plan, said in one line."""
        ids = {t.id for t in self.plan.targets}
        order = graphlib.TopologicalSorter({t.id: [t.parent] if t.parent in ids else [] for t in self.plan.targets})
        try:
            order.prepare()
        except graphlib.CycleError as exc:
            raise BuildError(f"the plan's targets form a cycle ({' -> '.join(exc.args[1])}); "
                             "each target's parent must be built before it: check the layers' parent keys") from None
        return order

    def _schedule(self, order: graphlib.TopologicalSorter[str], progressed: Callable[[], None] = lambda: None) -> None:
        """Walk ``order`` (:meth:`_order`): a target's worker starts once its parent is done and
        builds when :class:`Slots` admits it (``jobs`` at once, by priority); the descendants of a target that did not succeed are skipped, everything else goes on."""
        done: queue.Queue[str] = queue.Queue()
        rank = {t.id: i for i, t in enumerate(self.plan.targets)}
        running: set[str] = set()
        finished = ""
        try:
            while order.is_active():
                ready = [tid for tid in order.get_ready() if not self._failed_already(tid, order) and not self._skipped(tid, order)]
                for tid in sorted(ready, key=self.priority.__getitem__):  # the slots (jobs) admit them by priority
                    running.add(self._start(tid, done))
                self._let_go(finished)  # what its end made ready has queued: its slot goes to the best waiting
                if not running:
                    continue  # only skipped targets came ready: their children may be ready now
                finished = done.get()
                running.discard(finished)
                order.done(finished)
                progressed()
                if self.on_finished is not None:
                    self.on_finished(self.results[finished].model())
        except KeyboardInterrupt:
            self.cancel.set()
            self._let_go(*list(self._handing))
            for tid in sorted(running | {tid for tid, r in self.results.items() if r.status == "queued"}, key=rank.__getitem__):
                self.results[tid].status, self.results[tid].error = "cancelled", "interrupted"
                self.display.update(tid, "cancelled")
            raise

    def _failed_already(self, tid: str, order: graphlib.TopologicalSorter[str]) -> bool:
        """A target failed before the walk (its base is of another platform): never started, its descendants skipped."""
        if self.results[tid].status != "failed":
            return False
        order.done(tid)
        return True

    def _skipped(self, tid: str, order: graphlib.TopologicalSorter[str]) -> bool:
        """Skip ``tid`` (and so, in turn, its descendants) when its parent did not succeed."""
        parent = self.plan.by_id()[tid].parent
        if parent is None or parent not in self.results or self.results[parent].ok:
            return False
        result, why = self.results[tid], self.results[parent].status
        result.status, result.error = "skipped", f"parent {parent} {why}"
        self.display.update(tid, "skipped", f"parent {why}")
        order.done(tid)
        return True

    def _start(self, tid: str, done: "queue.Queue[str]") -> str:
        ticket = self.slots.enter(self.priority[tid])  # queued now, in the scheduler's order
        threading.Thread(target=self._worker, args=(self.plan.by_id()[tid], done, ticket), name=f"build-{tid}",
                         daemon=True).start()
        return tid

    def _worker(self, t: Target, done: "queue.Queue[str]", ticket: Ticket | None = None) -> None:
        result = self.results[t.id]
        t0 = time.monotonic()
        try:
            with self.slots.held(self.priority[t.id], ticket):
                t0 = time.monotonic()  # a target's seconds count from its admission
                self._build_one(t, result)
                if result.ok and self.plan.children(t.id):  # it keeps its slot until its children have queued
                    handing = self._handing[t.id] = threading.Event()
                    self._finished(t, result, t0, done)
                    handing.wait(timeout=60)  # a hang guard: the scheduler lets go at once (_let_go)
                    return
        except Exception as exc:  # isolate: one target's failure never stops the others
            if self.cancel.is_set():
                result.status, result.error = "cancelled", "interrupted"
            else:
                result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
        if result.status == "failed":
            self._drop_made(t.id)
        self._finished(t, result, t0, done)

    def _finished(self, t: Target, result: TargetRun, t0: float, done: "queue.Queue[str]") -> None:
        result.seconds = round(time.monotonic() - t0, 2)
        self.display.update(t.id, result.status, self._summary(result))
        done.put(t.id)

    def _let_go(self, *targets: str) -> None:
        """A finished target with children held its slot (:meth:`_worker`) until the scheduler queued what its end
        made ready: the slot now goes to the best of those by priority (a child on the longest chain), not to a
        target that merely waited longer."""
        for tid in targets:
            handing = self._handing.pop(tid, None)
            if handing is not None:
                handing.set()

    @staticmethod
    def _summary(r: TargetRun) -> str:
        if r.status == "failed":
            return (r.error or "").splitlines()[0][:120]
        return gb(r.size_bytes) if r.size_bytes else ""

    # -- one target ------------------------------------------------------------------
    def logical_args(self, t: Target) -> dict[str, str]:
        """Build arguments as the plan states them (hashed; no ports, no secrets)."""
        pip = t.pip
        return {"PIP_INDEX_URL": pip.torch_index_url, "PIP_EXTRA_INDEX_URL": " ".join(pip.extras()),
                "PIP_FIND_LINKS": " ".join(pip.find_links), "PIP_TRUSTED_HOST": " ".join(pip.trusted_hosts)}

    def _source_args(self, t: Target) -> dict[str, str]:
        """The PIP_* arguments as the build reaches them: local folders and indexes with credentials
        rewritten to the loopback server."""
        args = self.logical_args(t)
        server = self._sources()
        if server:
            rewrite = server.rewrite
            args = {k: " ".join(rewrite(u) for u in v.split()) if k != "PIP_TRUSTED_HOST" else v for k, v in args.items()}
            args["PIP_TRUSTED_HOST"] = " ".join(filter(None, [args["PIP_TRUSTED_HOST"], "127.0.0.1"]))
        return args

    def _real_args(self, t: Target, parent_id: str) -> dict[str, str]:
        args = self._source_args(t) | self._proxy_args()
        args["PARENT_IMAGE" if t.parent else "BASE_IMAGE"] = parent_id
        in_place = self.contexts[t.id].in_place
        if t.cuda_set is not None and not in_place:  # the builder stage runs on the OS base, the final stage on the CUDA image
            args["OS_IMAGE"] = self.base_ids[t.base_image]
        server = self._sources()
        if in_place and server is not None and self.matrix.sources.ca_on_loopback:  # fetched, used and deleted in one step
            args["IMAGESMITH_CA_URL"] = server.ca_url()
        return args

    def _proxy_args(self) -> dict[str, str]:
        s, out = self.matrix.sources, {}
        for key, value in (("HTTP_PROXY", s.http_proxy), ("HTTPS_PROXY", s.https_proxy)):
            if value:
                out[key] = out[key.lower()] = value
        if out:
            out["NO_PROXY"] = out["no_proxy"] = ",".join(filter(None, [s.no_proxy, "127.0.0.1", "localhost"]))
        return out

    def _parent_id(self, t: Target) -> str:
        if t.cuda_set is not None and self.cuda is not None:
            return self.cuda.image_for(t)
        if t.parent:
            parent = self.results[t.parent].image_id
            assert parent, "children start only after their parent succeeded"
            return parent
        return self.base_ids[t.base_image]

    def _parent_key(self, t: Target) -> str:
        """What ``t`` is built FROM, for its context hash. A shared-CUDA base: its OS base
        and its CUDA image's cache key, known before that image is made."""
        if t.cuda_set is not None and self.cuda is not None:
            return f"{self.base_ids[t.base_image]}+cuda:{self.cuda.key_for(t)}"
        return self._parent_id(t)

    def _build_one(self, t: Target, result: TargetRun) -> None:
        if self.stage is not None and self._adopted(t):
            self.stage.adopt(t, result)
            return
        ctx = self.contexts[t.id]
        result.context_hash = context_hash(ctx.files, self.logical_args(t), self._parent_key(t),
                                           "" if t.platform is DEFAULT_PLATFORM else t.platform.value)
        cache_tag = result.context_hash.split(":", 1)[1]
        cached = self.engine.image(f"{CACHE_REPOSITORY}:{cache_tag}")
        if cached:
            result.image_id, result.status = cached.id, "cached"
            self.engine.tag(cached.id, *t.image.split(":", 1))
        elif not (self.stage is not None and self.stage.find(t, result)):
            shared = t.cuda_set is not None and self.cuda is not None
            ahead = f"{self._prebuild_repository()}:{cache_tag}" if shared and not ctx.in_place else None
            if ahead:  # its builder stage, while its CUDA image is made
                self._docker_build(t, result, self.base_ids[t.base_image], stage="builder", tag=ahead)
                if result.status in ("failed", "cancelled"):
                    return
            with self.slots.lent(self.priority[t.id]) if shared else contextlib.nullcontext():
                parent_id = self._parent_id(t)  # a shared-CUDA base waits for its CUDA image without a slot
            # the full build takes the stage made ahead from that stage, never from a target's built beside it
            self._docker_build(t, result, parent_id, cache_from=[ahead] if ahead else [])
            if ahead:
                self.engine.untag(ahead)
            if result.status != "built":
                return
        self._measure(t, result)
        if result.ok and result.image_id:
            self.engine.tag(result.image_id, CACHE_REPOSITORY, cache_tag)
            self._own(t.id, result.image_id)
            if self.stage is not None:
                if self.cuda is not None:  # a CUDA image's target: once the engine knows the staged CUDA blob
                    self.cuda.wait_known(t)
                self.stage.push(t, result)

    def _docker_build(self, t: Target, result: TargetRun, parent_id: str, stage: str | None = None,
                      tag: str | None = None, cache_from: Sequence[str] = ()) -> None:
        """Build ``t`` as ``tag`` (else its image); with ``stage``, only up to that stage, tagged (so that no prune
        takes it) for the full build to take from (``cache_from``)."""
        self.display.update(t.id, "building", f"{stage} stage" if stage else "")
        log_path = Path(result.log)
        labels = {LABEL_HASH: result.context_hash, "org.opencontainers.image.created": self._created()}
        with log_path.open("a" if stage is None and t.cuda_set is not None else "w") as log:
            def on_line(line: str) -> None:
                clean = self.redact(line)
                log.write(clean + "\n")
                log.flush()
                step = build_progress(clean)
                if step is not None:
                    self.display.update(t.id, "building", step)
            outcome = self.engine.build(self.out / t.id, tag or t.image, self._real_args(t, parent_id), labels,
                                        "host" if self.matrix.sources.network == "host" else None, on_line, self.cancel,
                                        target=stage, platform=t.platform.docker, cache_from=cache_from)
        result.steps, result.cached_steps = outcome.steps, outcome.cached_steps
        with self._lock:  # a stage built ahead is this run's too (untagged after the full build)
            self.stages += outcome.stages + (outcome.made[-1:] if stage and _made_last(outcome) else [])
            self.made.setdefault(t.id, []).extend(outcome.stages + outcome.made[-1:])
        if outcome.error or outcome.image_id is None:  # an error wins over any image ID seen before it
            result.status = "cancelled" if outcome.error == "cancelled" else "failed"
            result.error = self.redact(outcome.error or "the engine reported no image")
            return
        if stage is None:
            result.image_id, result.status = outcome.image_id, "built"

    def _created(self) -> str:
        """The created label: SOURCE_DATE_EPOCH when set (reproducible builds), else now."""
        epoch = cudalayer.source_date_epoch(dict(self.environ) if self.environ is not None else None)
        when = dt.datetime.fromtimestamp(epoch, dt.timezone.utc) if epoch is not None else dt.datetime.now(dt.timezone.utc)
        return when.isoformat(timespec="seconds")

    def _measure(self, t: Target, result: TargetRun) -> None:
        """Run facts.py inside the image; a mismatch with the plan fails the target."""
        assert result.image_id
        info = self.engine.image(result.image_id)
        if info is not None and info.architecture and info.architecture != t.platform.arch:
            # the classic builder takes a local base of another architecture as it is (moby/moby#47823)
            result.status, result.error = "failed", (
                f"wrong architecture: the image is {info.platform}, the cell is {t.platform.docker}; its base "
                f"{t.base_image} is a {info.platform} image: name a {t.platform.docker} base for it (base_images."
                f"{t.versions.os}.{t.platform.docker}, e.g. imagesmith base bootstrap --os {t.versions.os} --arch "
                f"{t.platform.arch}), or build on a native {t.platform.arch} runner")
            self.engine.remove_image(result.image_id)  # never reused from cache
            return
        facts_file = Path(self.out / t.id / "facts.json")
        cached = loader.read_cache(facts_file)
        if cached.get("image_id") != result.image_id or not isinstance(cached.get("facts"), dict):
            cached = {"image_id": result.image_id, "facts": self._measured(t, result.image_id, info.platform if info else "")}
            write_json(facts_file, cached)
        result.facts = cached["facts"]
        result.size_bytes = info.size if info else 0
        declared = (info.labels.get("io.imagesmith.packages", "") if info else "").split()
        result.mismatches = compare_facts(t, result.facts or {}, declared)
        if result.mismatches:
            result.status, result.error = "failed", "image differs from the plan: " + "; ".join(result.mismatches)
            facts_file.unlink(missing_ok=True)
            self.engine.remove_image(result.image_id)  # never reused from cache

    def _measured(self, t: Target, image_id: str, image_platform: str) -> dict[str, Any]:
        """The image's facts; a measurement that failed under emulation says where it can be measured."""
        try:
            return self._run_facts(image_id)
        except BuildError as exc:
            raise BuildError(str(exc) + emulation_hint(str(exc), image_platform or t.platform.docker, self._engine_platform())) from None

    def _engine_platform(self) -> str:
        from imagesmith.stages.verify.incontainer import engine_platform

        return engine_platform(self.engine)

    def _run_facts(self, image_id: str) -> dict[str, Any]:
        from imagesmith.stages.verify.incontainer import run_facts

        return run_facts(self.engine, image_id, labels={LABEL_RUN: self.run_id})
