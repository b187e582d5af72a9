"""Verifying what builds made (``imagesmith verify --build-report``, ``build --verify``): each built or cached
target by its staged digest, else its image ID, its verify.json beside its build artifact, each verification
signed where a verifier key is given, one run report."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from imagesmith import runstate
from imagesmith.atomic import write_text
from imagesmith.edges.credentials import STAGE_FLAG, CredentialStore
from imagesmith.edges.protocols import EngineProtocol
from imagesmith.edges.runcontext import RunContext
from imagesmith.errors import UsageError, UserError
from imagesmith.model import gpupath, policy, verifyreport
from imagesmith.model.buildreport import Staged, TargetResult
from imagesmith.model.ref import host_of
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.pipeline.inputs import BuildInput
from imagesmith.pipeline.runreport import RunOutcome, RunReport
from imagesmith.progress import Display
from imagesmith.stages import artifacts
from imagesmith.stages.artifacts import VERIFY_FILE
from imagesmith.stages.evidence import trust
from imagesmith.stages.verify import incontainer, judge, verify

if TYPE_CHECKING:
    from imagesmith.edges.signing import Key


def verify_results(engine: EngineProtocol, results: Sequence[TargetResult], options: verify.VerifyOptions, out: Path,
                   display: Display, run: "RunReport | None" = None, auth: Mapping[str, str] | None = None,
                   folders: Mapping[str, Path] | None = None, signer: Key | None = None,
                   jobs: int = 1, early: Mapping[str, verify.VerifyOutcome] | None = None) -> dict[str, verify.VerifyOutcome]:
    """Verify every image that built; its verify.json (in OUT/<target>/, or in ``folders[target]``: the
    folder of its build artifact) says ``running`` while its image is verified, then ``complete``
    (or ``interrupted``); with the verifier key ``signer``, the signed statement beside it
    (:data:`imagesmith.stages.evidence.trust.STATEMENT_FILE`, what publish believes). One at a time; with ``jobs``,
    once the first shows that the engine gives containers no GPU (:func:`no_gpu_given`), the rest ``jobs`` at a time.
    ``early``: the outcomes of images verified while the build went on (:class:`EarlyVerify`), taken as they are."""
    outcomes: dict[str, verify.VerifyOutcome] = {}
    todo = [r for r in results if r.ok and r.image_id]
    known = dict(early or {})

    def one(r: TargetResult) -> verify.VerifyOutcome:
        if r.target in known:
            return known[r.target]
        return verify_one(engine, r, options, (folders or {}).get(r.target, out / r.target), display, auth, signer)

    def done(r: TargetResult, outcome: verify.VerifyOutcome) -> None:
        outcomes[r.target] = outcome
        if run is not None:
            run.verified(r.target, outcome.report)

    for i, r in enumerate(todo):
        done(r, one(r))
        if jobs > 1 and no_gpu_given(outcomes[r.target].report):
            _side_by_side(todo[i + 1:], one, done, jobs)
            break
    return outcomes


class EarlyVerify:
    """Verifications that start while the build goes on (``build --verify/--push``), so the release does not wait
    for them after the last build. The first image that builds is verified at once; when its report shows that the
    engine gives containers no GPU (:func:`no_gpu_given`: builds beside a verification change nothing it measures),
    each image that builds after it is verified as soon as it is built (and staged), ``jobs`` at a time. When the
    engine gives a GPU, nothing more starts early and the first outcome is dropped: every GPU verdict comes from a
    host with no build running (:func:`verify_results` after the build, one at a time)."""

    def __init__(self, verify_one: Callable[[TargetResult], verify.VerifyOutcome], jobs: int = 1) -> None:
        self.verify_one = verify_one
        self.pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="verify-early")
        self.lock = threading.Lock()
        self.futures: dict[str, Future[verify.VerifyOutcome]] = {}
        self.waiting: list[TargetResult] = []
        self.side_by_side: bool | None = None  # None until the first outcome says
        self.first = ""
        self.closed = False

    def built(self, r: TargetResult) -> None:
        """A target finished (the builder calls this): an image that built is verified now, or queued."""
        if not r.ok or not r.image_id:
            return
        with self.lock:
            if self.closed or self.side_by_side is False:
                return
            if not self.first:
                self.first = r.target
                self._submit(r).add_done_callback(self._decided)
            elif self.side_by_side:
                self._submit(r)
            else:
                self.waiting.append(r)

    def _submit(self, r: TargetResult) -> Future[verify.VerifyOutcome]:
        self.futures[r.target] = self.pool.submit(self.verify_one, r)
        return self.futures[r.target]

    def _decided(self, first: Future[verify.VerifyOutcome]) -> None:
        with self.lock:
            self.side_by_side = not first.cancelled() and first.exception() is None and no_gpu_given(first.result().report)
            if self.side_by_side and not self.closed:
                for r in self.waiting:
                    self._submit(r)
            self.waiting.clear()

    def outcomes(self) -> dict[str, verify.VerifyOutcome]:
        """After the build: the outcomes of the verifications that started (waited for), none when the first shows a
        GPU; what has not started is left to :func:`verify_results` (side by side there). An error raised by one
        (a UsageError) is the run's."""
        with self.lock:
            self.closed = True
            self.waiting.clear()
            started = [(tid, f) for tid, f in self.futures.items() if not f.cancel()]
        done = {tid: f.result() for tid, f in started}
        if self.first in done and not no_gpu_given(done[self.first].report):
            return {}  # a GPU was given: only the first ran early, and it is verified again with no build beside it
        return done

    def close(self) -> None:
        """Starts no more; a verification already running ends as it would have (its container removed), as
        :func:`_side_by_side`'s do: a stop (an error, Ctrl-C) does not wait for it here."""
        with self.lock:
            self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)


def no_gpu_given(report: VerifyReport) -> bool:
    """The engine gave this verification's container no GPU (``--gpus none``, or it refused every GPU path): it gives
    none to any container, so verifications may run side by side; none shares a GPU with another (sharing would
    change a GPU verdict: a neighbour's process on the GPU)."""
    return report.gpu_path == gpupath.NONE


def _side_by_side(todo: Sequence[TargetResult], one: Callable[[TargetResult], verify.VerifyOutcome],
                  done: Callable[[TargetResult, verify.VerifyOutcome], None], jobs: int) -> None:
    """``one`` of each of ``todo``, ``jobs`` at a time, each ``done`` in ``todo``'s order. A stop (an error, Ctrl-C)
    starts no more; a verification already running ends as it would have, removing its container."""
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="verify")
    try:
        futures = [(r, pool.submit(one, r)) for r in todo]
        for r, future in futures:
            done(r, future.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def verify_one(engine: EngineProtocol, r: TargetResult, options: verify.VerifyOptions, folder: Path, display: Display,
               auth: Mapping[str, str] | None = None, signer: Key | None = None) -> verify.VerifyOutcome:
    """One built image: a staged one by its digest (pulled when this engine lacks it), else by image ID;
    the report goes to FOLDER/verify.json (``running`` first, so an interrupted run never reads as done).
    With ``signer`` (the verifier key) the report and the image's inventory, measured inside it, are signed
    as a statement about the staged digest (else the image ID) in FOLDER/verify.dsse.json."""
    display.update(r.target, "verifying")
    staged = r.staged.reference if r.staged else None
    ref = staged or r.image_id or ""
    (folder / trust.STATEMENT_FILE).unlink(missing_ok=True)  # an earlier run's statement never outlives its report
    with runstate.Tracked(folder / VERIFY_FILE, judge.running_report(ref, options.tier)) as tracked:
        outcome = _verify_ref(engine, ref, staged is not None, options, display, r.target, auth)
        tracked.complete(outcome.report.to_json())
    if signer is not None:
        sign_outcome_or_say(lambda: sign_outcome(engine, r, outcome, folder, signer, display),
                            lambda line: display.note(f"{r.target}: {line}"))
    summary = outcome.report.summary
    display.update(r.target, "passed" if outcome.ok else "failed",
                   f"{summary.get('pass', 0)} pass, {summary.get('fail', 0)} fail, {summary.get('skip', 0)} skip; "
                   f"{policy.how_verified(outcome.report)}")
    return outcome


def subject_of(staged: Mapping[str, Any] | Staged | None, image_id: str | None) -> trust.Subject:
    """What a verification of this image is about: its staged manifest digest, else its image ID (trust.py says why)."""
    if isinstance(staged, Staged):
        return trust.Subject(staged.repository, staged.digest)
    if staged:
        return trust.Subject(str(staged["repository"]), str(staged["digest"]))
    return trust.Subject(trust.IMAGE_ID_SUBJECT, image_id or "")


def sign_outcome(engine: EngineProtocol, r: TargetResult, outcome: verify.VerifyOutcome, folder: Path, signer: Key,
                 display: Display) -> Path:
    """FOLDER/verify.dsse.json: the report and the inventory measured inside the image, signed by the verifier."""
    return sign_report(engine, outcome.report, subject_of(r.staged, r.image_id), signer, folder / trust.STATEMENT_FILE,
                       lambda line: display.note(f"{r.target}: {line}"))


def sign_report(engine: EngineProtocol, report: VerifyReport, subject: trust.Subject, signer: Key, path: Path,
                note: Callable[[str], None]) -> Path:
    """PATH: ``report`` and the inventory measured inside its image (``facts.py --inventory``), signed by the
    verifier as a statement about ``subject``; an inventory that cannot be measured is said through ``note``."""
    inventory: Mapping[str, Any] | None = None
    image_id = (report.image.id or "") if report.image else ""
    if image_id:
        try:
            inventory = incontainer.run_facts(engine, image_id, args=["--inventory"])
        except UserError as exc:  # a BuildError too
            note(f"the inventory (the SBOM's input) was not measured: {exc}; the statement carries none")
    write_text(path, trust.sign(report, inventory, subject, signer).decode() + "\n")
    return path


def sign_outcome_or_say(sign: Callable[[], Path], note: Callable[[str], None]) -> Path | None:
    """``sign()``, or, for a report the verifier does not sign (:class:`trust.Unsignable`), nothing, said through
    ``note``: publish then refuses the unsigned verify.json, as it refuses any."""
    try:
        return sign()
    except trust.Unsignable as exc:
        note(str(exc))
        return None


def _verify_ref(engine: EngineProtocol, ref: str, pull: bool, options: verify.VerifyOptions, display: Display, target: str,
                auth: Mapping[str, str] | None) -> verify.VerifyOutcome:
    try:
        return incontainer.verify_image(engine, ref, options, pull=pull, progress=_progress(display, target), auth=auth)
    except UsageError:
        raise
    except UserError as exc:
        report = judge.failed_report("payload.start", str(exc), options.tier) | {"state": runstate.COMPLETE}
        return verify.VerifyOutcome(verifyreport.parse(report))


def _progress(display: Display, target: str) -> Callable[[str], None]:
    return lambda line: display.update(target, "verifying", line.strip()[:100])


def verify_builds(built: BuildInput, out: Path, options: verify.VerifyOptions, display: Display,
                  store: CredentialStore | None = None, json_out: Path | None = None, engine: EngineProtocol | None = None,
                  signer: Key | None = None) -> RunOutcome:
    """``imagesmith verify --build-report``: verify each built/cached target of ``built`` (a staged image by its
    digest, else by image ID), its verify.json in the folder of its build artifact, one run report in ``out``
    (``running`` until every image is verified), copied to ``json_out`` when given."""
    results, store = built.results, store or CredentialStore()
    auth = staging_auth(results, store, built.folders)  # a host not declared: refused before any pull
    for host in [] if store.declared.staging else sorted({staged_host(r) for r in results if r.staged}):
        display.note(f"staged images on {host} are pulled without credentials: {store.anonymous_hint(host, None, STAGE_FLAG)}")
    engine = RunContext(store, display).engine if engine is None else engine
    with artifacts.locked(out, "imagesmith verify", display.note):
        with RunReport(out, built.data) as run:
            outcomes = verify_results(engine, results, options, out, display, run, auth, built.folders, signer)
            path = run.complete()
        if json_out and json_out.resolve() != path.resolve():
            write_text(json_out, path.read_text())
    return RunOutcome(tuple(results), outcomes, None, path)


def staged_host(r: TargetResult) -> str:
    return host_of(r.staged.repository if r.staged else "")


def staging_auth(results: Sequence[TargetResult], store: CredentialStore,
                 folders: Mapping[str, Path]) -> dict[str, str] | None:
    """Pull credentials for the staging registry the results name: the store's login for the declared staging
    host (--stage) when every staged repository is on it; none when no staging host was declared (the hosts
    were read from build artifacts); a UserError, before anything is pulled, when one names another host."""
    creds = None
    for r in results:
        if r.staged:
            where = str(folders[r.target] / artifacts.BUILD_FILE) if r.target in folders else f"the build result of {r.target}"
            creds = store.for_artifact(staged_host(r), store.declared.staging, where,
                                       "staged repository", STAGE_FLAG)
    return creds.auth_config() if creds else None
