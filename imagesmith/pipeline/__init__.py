"""The whole pipeline over the stages' artifacts on disk:

    OUT/report.json (build, all targets of one job)
    OUT/<target>/build.json (build, one target: artifacts.BuildRecord, with its staged digest)
        -> OUT/<target>/verify.json -> OUT/release.json
        -> OUT/run-report.json (all three, one versioned file)

Each step reads what the previous one wrote, so CI can split them over jobs
and machines (`imagesmith build --stage`, `imagesmith verify --build-report`,
`imagesmith publish`): per-target files from many jobs gathered into one
folder are the whole build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from imagesmith import runstate
from imagesmith.atomic import write_text
from imagesmith.edges.credentials import RELEASE_FLAG, STAGE_FLAG, CredentialStore, Declared, check_artifact_host, same_host
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.edges.session import Session
from imagesmith.errors import UsageError, UserError
from imagesmith.model import loader, policy
from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan
from imagesmith.model.ref import DOCKER_HUB, host_of
from imagesmith.progress import Display
from imagesmith.stages import artifacts, build, publish, trust, verify
from imagesmith.stages.artifacts import VERIFY_FILE

if TYPE_CHECKING:
    from imagesmith.edges.signing import Key
    from imagesmith.stages.trust import TrustPolicy

RUN_REPORT = "run-report.json"


@dataclass(frozen=True)
class Rendered:
    """``render``'s outcome: how many build contexts, and (with ``check``) how what is on disk differs."""

    contexts: int
    drift: tuple[str, ...] = ()


def render(matrix: Matrix, date: str, out: Path, check: bool = False) -> Rendered:
    """Plan ``matrix`` and render one build context per target into ``out`` (with ``check``: write nothing, compare)."""
    from imagesmith.model import plan
    from imagesmith.render import contexts

    rendered = contexts.render_all(plan.expand(matrix, date), matrix)
    if check:
        return Rendered(len(rendered), tuple(contexts.check(rendered, out)))
    contexts.write(rendered, out)
    return Rendered(len(rendered))


def validate(matrix: Matrix, date: str) -> Plan:
    """Plan ``matrix`` and render every target in memory (nothing is written), so what passes here renders."""
    from imagesmith.model import plan
    from imagesmith.render import contexts

    planned = plan.expand(matrix, date)
    contexts.render_all(planned, matrix)
    return planned


def options_from(matrix: Matrix, allow_cpu_verification: bool = False, **overrides: Any) -> verify.VerifyOptions:
    """Verify options as the matrix's ``verify:`` section sets them (``require_gpu``
    unset: a GPU for CUDA images); ``allow_cpu_verification`` lets CUDA images be
    verified in CPU mode where no GPU is visible (they are then not GPU-verified)."""
    v = matrix.verify
    base = dict(tier=v.tier, gpus=v.gpus, shm_size=v.shm_size, memory=v.memory,
                timeout_s=float(v.timeout_s), thresholds=v.thresholds, require_gpu=v.require_gpu,
                allow_cpu=True if allow_cpu_verification else None)
    return verify.VerifyOptions(**(base | {k: val for k, val in overrides.items() if val is not None}))


def verify_results(engine: EngineProtocol, results: list[build.TargetResult], options: verify.VerifyOptions, out: Path,
                   display: Display, run: "RunReport | None" = None, auth: Mapping[str, str] | None = None,
                   folders: Mapping[str, Path] | None = None, signer: Key | None = None) -> dict[str, verify.VerifyOutcome]:
    """Verify every image that built; its verify.json (in OUT/<target>/, or in ``folders[target]``: the
    folder of its build artifact) says ``running`` while its image is verified, then ``complete``
    (or ``interrupted``); with the verifier key ``signer``, the signed statement beside it
    (:data:`imagesmith.stages.trust.STATEMENT_FILE`, what publish believes)."""
    outcomes: dict[str, verify.VerifyOutcome] = {}
    for r in results:
        if not r.ok or not r.image_id:
            continue
        outcomes[r.target] = verify_one(engine, r, options, (folders or {}).get(r.target, out / r.target), display, auth, signer)
        if run is not None:
            run.verified(r.target, outcomes[r.target].report)
    return outcomes


def verify_one(engine: EngineProtocol, r: build.TargetResult, options: verify.VerifyOptions, folder: Path, display: Display,
               auth: Mapping[str, str] | None = None, signer: Key | None = None) -> verify.VerifyOutcome:
    """One built image: a staged one by its digest (pulled when this engine lacks it), else by image ID;
    the report goes to FOLDER/verify.json (``running`` first, so an interrupted run never reads as done).
    With ``signer`` (the verifier key) the report and the image's inventory, measured inside it, are signed
    as a statement about the staged digest (else the image ID) in FOLDER/verify.dsse.json."""
    display.update(r.target, "verifying")
    staged = f"{r.staged['repository']}@{r.staged['digest']}" if r.staged else None
    ref = staged or r.image_id or ""
    (folder / trust.STATEMENT_FILE).unlink(missing_ok=True)  # an earlier run's statement never outlives its report
    with runstate.Tracked(folder / VERIFY_FILE, verify.running_report(ref, options.tier)) as tracked:
        outcome = _verify_ref(engine, ref, staged is not None, options, display, r.target, auth)
        tracked.complete(outcome.report)
    if signer is not None:
        sign_outcome_or_say(lambda: sign_outcome(engine, r, outcome, folder, signer, display),
                            lambda line: display.note(f"{r.target}: {line}"))
    summary = outcome.report.get("summary", {})
    display.update(r.target, "passed" if outcome.ok else "failed",
                   f"{summary.get('pass', 0)} pass, {summary.get('fail', 0)} fail, {summary.get('skip', 0)} skip; "
                   f"{policy.how_verified(outcome.report)}")
    return outcome


def subject_of(staged: Mapping[str, Any] | artifacts.Staged | None, image_id: str | None) -> trust.Subject:
    """What a verification of this image is about: its staged manifest digest, else its image ID (trust.py says why)."""
    if isinstance(staged, artifacts.Staged):
        return trust.Subject(staged.repository, staged.digest)
    if staged:
        return trust.Subject(str(staged["repository"]), str(staged["digest"]))
    return trust.Subject(trust.IMAGE_ID_SUBJECT, image_id or "")


def sign_outcome(engine: EngineProtocol, r: build.TargetResult, outcome: verify.VerifyOutcome, folder: Path, signer: Key,
                 display: Display) -> Path:
    """FOLDER/verify.dsse.json: the report and the inventory measured inside the image, signed by the verifier."""
    return sign_report(engine, outcome.report, subject_of(r.staged, r.image_id), signer, folder / trust.STATEMENT_FILE,
                       lambda line: display.note(f"{r.target}: {line}"))


def sign_report(engine: EngineProtocol, report: Mapping[str, Any], subject: trust.Subject, signer: Key, path: Path,
                note: Callable[[str], None]) -> Path:
    """PATH: ``report`` and the inventory measured inside its image (``facts.py --inventory``), signed by the
    verifier as a statement about ``subject``; an inventory that cannot be measured is said through ``note``."""
    inventory: Mapping[str, Any] | None = None
    image_id = str((report.get("image") or {}).get("id") or "")
    if image_id:
        try:
            inventory = verify.run_facts(engine, image_id, args=["--inventory"])
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
        return verify.verify_image(engine, ref, options, pull=pull, progress=_progress(display, target), auth=auth)
    except UsageError:
        raise
    except UserError as exc:
        report = verify.failed_report("payload.start", str(exc), options.tier) | {"state": runstate.COMPLETE}
        return verify.VerifyOutcome(report)


def _progress(display: Display, target: str) -> Callable[[str], None]:
    return lambda line: display.update(target, "verifying", line.strip()[:100])


def read_build(path: Path) -> dict[str, Any]:
    """A build report (OUT/report.json), its schema checked."""
    data = loader.load_json_artifact(path, schema=build.REPORT_SCHEMA, fix=f"run imagesmith build --out {path.parent} first")
    if not runstate.is_complete(data):
        raise UserError(f"{path}: {runstate.not_complete(data, 'this build report')}; "
                        f"run imagesmith build --out {path.parent} again")
    return data


def build_results(data: Mapping[str, Any]) -> list[build.TargetResult]:
    return [build.TargetResult(**t) for t in data["targets"]]


@dataclass(frozen=True)
class BuildInput:
    """What one build job left: its results, and the folder each target's verify.json goes to."""

    data: dict[str, Any]  # as a build report (imagesmith.build-report/1)
    folders: Mapping[str, Path]

    @property
    def results(self) -> list[build.TargetResult]:
        return build_results(self.data)


def read_build_input(path: Path) -> BuildInput:
    """A build report (OUT/report.json: verify.json to OUT/<target>/) or one target's build
    artifact (OUT/<target>/build.json: verify.json beside it)."""
    fix = f"give the report.json or <target>/build.json that imagesmith build --out {path.parent} wrote"
    if loader.load_json_any(path, fix=fix).get("schema") == artifacts.BUILD_SCHEMA:
        return builds_input(complete([artifacts.Found(artifacts.read_build(path), path.parent)]))
    data = read_build(path)
    return BuildInput(data, {t["target"]: path.parent / t["target"] for t in data["targets"]})


def complete(found: list[artifacts.Found]) -> list[artifacts.Found]:
    """``found``, when every artifact's build job completed (a ``running`` or ``interrupted`` one is
    never read as a build, as OUT/report.json is not)."""
    for f in found:
        if not f.record.complete:
            raise UserError(f"{f.folder / artifacts.BUILD_FILE}: {runstate.not_complete(f.record.job_state(), 'this build artifact')}; "
                            f"run its build job (imagesmith build --out {f.folder.parent}) again")
    return found


def builds_input(found: list[artifacts.Found]) -> BuildInput:
    """Build artifacts as one build report (for verify, publish and the run report)."""
    targets = [artifacts.result_fields(f.record) | {"log": str(f.folder / "build.log"), "dockerfile": str(f.folder / "Dockerfile")}
               for f in found]
    first = found[0].record if found else None
    data = {"schema": build.REPORT_SCHEMA, "matrix": first.release.matrix if first else "", "seconds": 0.0,
            "started_at": min((f.record.written_at for f in found), default=""), "base_images": {},
            "ok": all(f.record.ok for f in found), "targets": targets,
            "state": runstate.COMPLETE if all(f.record.complete for f in found) else runstate.INTERRUPTED}
    return BuildInput(data, {f.record.target.id: f.folder for f in found})


def merge_inputs(inputs: list[BuildInput]) -> BuildInput:
    """Several jobs' builds as one (a target built by two jobs: the later input wins)."""
    targets: dict[str, Any] = {}
    for i in inputs:
        targets.update({t["target"]: t for t in i.data["targets"]})
    data = dict(inputs[0].data) | {"targets": list(targets.values()), "ok": all(t["status"] in ("built", "cached") for t in targets.values()),
                                   "seconds": round(sum(float(i.data.get("seconds") or 0) for i in inputs), 2)}
    return BuildInput(data, {k: v for i in inputs for k, v in i.folders.items()})


class RunReport:
    """OUT/run-report.json (build + verify + release in one versioned file), written
    when the run starts (``running``), as each stage ends, and at the end
    (``complete``); leaving the ``with`` block by an exception marks it ``interrupted``."""

    def __init__(self, out: Path, build_data: Mapping[str, Any] | None = None) -> None:
        self.path = out / RUN_REPORT
        self.build_data = dict(build_data) if build_data is not None else None
        self.verify: dict[str, Mapping[str, Any]] = {}
        self.release: Mapping[str, Any] | None = None
        self.tracked = runstate.Tracked(self.path, self._doc())

    def _doc(self) -> dict[str, Any]:
        from imagesmith import report

        return report.run_report(self.build_data, self.verify, self.release)

    def built(self, build_data: Mapping[str, Any]) -> None:
        self.build_data = dict(build_data)
        self.tracked.update(self._doc())

    def verified(self, target: str, report: Mapping[str, Any]) -> None:
        self.verify[target] = report
        self.tracked.update(self._doc())

    def released(self, release: Mapping[str, Any]) -> None:
        self.release = release
        self.tracked.update(self._doc())

    def complete(self) -> Path:
        self.tracked.complete(self._doc())
        return self.path

    def __enter__(self) -> "RunReport":
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.tracked.stop(exc)


def write_run_report(out: Path, build_data: Mapping[str, Any], outcomes: Mapping[str, verify.VerifyOutcome],
                     release: Mapping[str, Any] | None) -> Path:
    """The whole run report at once (complete)."""
    run = RunReport(out, build_data)
    run.verify = {t: o.report for t, o in outcomes.items()}
    run.release = release
    return run.complete()


# -- the stage sequence --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseOptions:
    """How a release is made (``imagesmith publish``, ``imagesmith build --push``); ``store`` (the run's
    credentials, by host, and the hosts the operator declared) also serves verify's pull of staged images."""

    store: CredentialStore = field(default_factory=CredentialStore)
    ca_file: Path | None = None
    signing_key: Key | None = None
    with_evidence: bool = True
    floating_gate: Callable[[str | None], str | None] | None = None
    allow_cpu_verification: bool = False
    registry: RegistryProtocol | None = None  # instead of a client for the release's registry (a test's double)
    vulnerabilities: Any = None  # an imagesmith.stages.vulngate.Gate: known vulnerabilities gate the release (sources.advisories)
    release_repository: str | None = None  # publish --registry HOST/REPO: the artifacts must release exactly there
    trust: TrustPolicy | None = None  # which verifier keys the release believes (--trust-policy)
    verifier_key: Key | None = None  # build --verify/--push: signs each verification (--verifier-key)


@dataclass(frozen=True)
class RunOutcome:
    """What the stages after a build made of it: each verified image's outcome, the release (when
    one ran) and the run report that holds all of it."""

    results: tuple[build.TargetResult, ...]
    outcomes: Mapping[str, verify.VerifyOutcome]
    release: publish.ReleaseReport | None
    run_report: Path

    @property
    def failed(self) -> list[str]:
        """Targets whose verification failed."""
        return [t for t, o in self.outcomes.items() if not o.ok]

    @property
    def unbuilt(self) -> int:
        return sum(not r.ok for r in self.results)


@dataclass(frozen=True)
class BuildJob:
    """One ``imagesmith build``: the targets of ``plan`` (the whole plan) that ``only``/``layers`` pick, built into
    ``out``; with ``stage_repo``, pushed to that staging repository and ancestors adopted from other jobs' artifacts."""

    matrix: Matrix
    plan: Plan
    out: Path
    only: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    jobs: int = 2
    prune: bool = True
    stage_repo: str | None = None
    store: CredentialStore = field(default_factory=CredentialStore)
    ca_file: Path | None = None

    @property
    def whole(self) -> bool:
        return not self.only and not self.layers


def build_stage(engine: EngineProtocol, job: BuildJob, display: Display, run: RunReport | None = None) -> tuple[Plan, build.BuildReport]:
    """Build what ``job`` picks (OUT/report.json, OUT/<target>/build.json); after a build of the whole plan the
    artifacts of targets it no longer has are removed. The plan built (less what staging adopted) and its
    report; a stop (an error, Ctrl-C) marks ``run`` interrupted."""
    try:
        p, stage = job.plan.select(job.only, job.layers), None
        if job.stage_repo:
            from imagesmith.stages import staging

            stage = staging.open_stage(job.stage_repo, job.matrix.image.name, engine, job.out, job.store, job.ca_file, display)
            p = stage.prepare(p, job.plan.picked(job.only, job.layers), job.matrix)
        report = build.Builder(p, job.matrix, engine, job.out, job.jobs, display, prune=job.prune, stage=stage,
                               store=job.store).run()
        for gone in artifacts.remove_stale(job.out, {t.id for t in job.plan.targets}) if job.whole else []:
            display.note(f"{gone}: no longer planned; its build artifact in {job.out} was removed (publish will not release it)")
    except BaseException as exc:
        if run is not None:
            run.tracked.stop(exc)
        raise
    return p, report


def records_of(report: build.BuildReport, plan: Plan, spec: artifacts.Release) -> list[artifacts.BuildRecord]:
    """A build job's results as the records it saved (OUT/<target>/build.json), in plan order."""
    results = {r.target: r for r in report.results}
    return [artifacts.record_of(results[t.id], t, spec) for t in plan.targets if t.id in results]


def verify_and_release(engine: EngineProtocol, report: build.BuildReport, plan: Plan, spec: artifacts.Release, out: Path,
                       display: Display, run: RunReport, options: verify.VerifyOptions, release: ReleaseOptions,
                       push: bool) -> RunOutcome:
    """After a build of ``plan`` (``imagesmith build --verify/--push``): verify every image it made
    (OUT/<target>/verify.json), then, with ``push``, release what passed (OUT/release.json) as ``spec``
    says. ``run`` records each stage and ends ``complete`` (``interrupted`` when a stage raises)."""
    with run:
        run.built(report.to_json() | {"state": runstate.COMPLETE})  # as the build wrote it to report.json
        if push and (release.trust is None or release.verifier_key is None):
            raise UserError(NEEDS_TRUST)
        auth = staging_auth(report.results, release.store, {r.target: out / r.target for r in report.results})
        outcomes = verify_results(engine, report.results, options, out, display, run, auth, signer=release.verifier_key)
        rel = None
        if push:
            found = [artifacts.Found(r, out / r.target.id) for r in records_of(report, plan, spec)]
            signed = signed_verifications(found, release.trust)
            rel = _release(engine, spec, signed.records, signed.outcomes, out, display, release, None,
                           signed.inventories(engine), signed)
        if rel is not None:
            run.released(rel.to_json() | {"state": runstate.COMPLETE})  # as the release wrote it to release.json
        return RunOutcome(tuple(report.results), outcomes, rel, run.complete())


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
    engine = Session(store, display).engine if engine is None else engine
    with artifacts.locked(out, "imagesmith verify", display.note):
        with RunReport(out, built.data) as run:
            outcomes = verify_results(engine, results, options, out, display, run, auth, built.folders, signer)
            path = run.complete()
        if json_out and json_out.resolve() != path.resolve():
            write_text(json_out, path.read_text())
    return RunOutcome(tuple(results), outcomes, None, path)


@dataclass(frozen=True)
class AttachedEvidence:
    """What ``imagesmith verify IMAGE`` found attached to IMAGE's digest, and whether a signed verification there
    stands for a fresh run (:func:`attached_evidence`); the command prints it, in this order."""

    found: Any = None  # an imagesmith.stages.evidence.Evidence; None: nothing read (``note`` says why, when there is a why)
    note: str | None = None  # why the registry gave no evidence
    reused: dict[str, Any] | None = None  # the verify report of the attestation that stands for a fresh run
    why_not: tuple[str, ...] = ()  # --reuse-evidence asked, nothing reusable: the reasons, one per attestation
    match: Any = None  # the reused attestation (imagesmith.stages.evidence.Attestation)
    gpu_model: str | None = None  # this host's GPU model as --gpus selects them (None: CPU mode)


def attached_evidence(image: str, public_keys: Sequence[Path], store: CredentialStore, options: verify.VerifyOptions,
                      reuse: bool, max_age_days: int | None = None, read: Callable[..., Any] | None = None,
                      gpus: Callable[[str], tuple[str | None, int]] | None = None) -> AttachedEvidence:
    """The evidence attached to IMAGE's digest (a registry reference; none read from Docker Hub), its signatures
    checked with the public keys in ``public_keys``; with ``reuse`` (--reuse-evidence), the verify report of a signed attestation that stands for a fresh
    run with ``options`` (:func:`imagesmith.stages.evidence.reusable`), else the reasons none does. ``read`` and
    ``gpus`` are the registry read and this host's GPU inventory (a test passes doubles)."""
    from imagesmith.edges import signing
    from imagesmith.edges.engine import registry_host
    from imagesmith.stages import evidence

    if registry_host(image) == DOCKER_HUB:
        return AttachedEvidence()
    keys = [signing.load_public_key(k) for k in public_keys]
    try:
        found = (read or evidence.read)(image, keys, store)
    except UserError as exc:
        return AttachedEvidence(note=f"no evidence read from the registry ({exc})")
    if not reuse:
        return AttachedEvidence(found)
    model, count = (gpus or gpu_model)(options.gpus)
    wanted = evidence.Wanted(options.tier, model, count, dict(options.expect), bool(options.require_gpu),
                             options.require_non_root, bool(options.only or options.skip), max_age_days)
    match, why = evidence.reusable(found, wanted)
    if match is None:
        return AttachedEvidence(found, why_not=tuple(why), gpu_model=model)
    return AttachedEvidence(found, reused=evidence.reused_report(found, match, image), match=match, gpu_model=model)


def gpu_model(gpus: str) -> tuple[str | None, int]:
    """This host's GPU model and count as --gpus selects them (None: CPU mode)."""
    from imagesmith.edges.hostinfo import inventory
    from imagesmith.stages.attestation import model_name

    found = inventory().gpus if gpus != "none" else ()
    wanted = {g.strip() for g in gpus.split(",")} if gpus not in ("all", "none") else None
    names = [g.name for g in found if wanted is None or str(g.index) in wanted or g.uuid in wanted]
    return (model_name(names), len(names)) if names else (None, 0)


def read_builds(paths: Sequence[Path]) -> BuildInput:
    """Build reports (OUT/report.json) and build artifacts (OUT/<target>/build.json) of any number of jobs, as one."""
    return merge_inputs([read_build_input(p) for p in paths])


def out_of(path: Path) -> Path:
    """The output folder of a build report (OUT/report.json) or artifact (OUT/<target>/build.json)."""
    return path.parent.parent if path.name == artifacts.BUILD_FILE else path.parent


def staged_host(r: build.TargetResult) -> str:
    return host_of(str((r.staged or {}).get("repository", "")))


def staging_auth(results: Sequence[build.TargetResult], store: CredentialStore,
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


def _release(engine: EngineProtocol, spec: artifacts.Release, records: Sequence[artifacts.BuildRecord],
             outcomes: Mapping[str, verify.VerifyOutcome], out: Path, display: Display, options: ReleaseOptions,
             date: str | None = None, inventory: Callable[[str], Mapping[str, Any]] | None = None,
             signed: "Signed | None" = None) -> publish.ReleaseReport:
    return publish.release_to(engine, spec, records, outcomes, out, display, date, options.store, options.ca_file,
                              signing_key=options.signing_key, with_evidence=options.with_evidence, inventory=inventory,
                              floating_gate=options.floating_gate, allow_cpu_verification=options.allow_cpu_verification,
                              client=options.registry, vulnerabilities=options.vulnerabilities,
                              trust=signed.to_json() if signed else None)


# -- what publish believes ------------------------------------------------------------------------

NEEDS_TRUST = ("a release believes only verifications signed by a verifier its trust policy names: give --trust-policy FILE "
               "(and, where this command verifies, --verifier-key KEY); make release creates both (docs/trust.md)")


@dataclass(frozen=True)
class Signed:
    """The verifications a release accepted (trust.py): per target, what was signed and by whom; the build
    records with their facts replaced by what the signed reports measured."""

    policy: TrustPolicy
    records: list[artifacts.BuildRecord]
    outcomes: dict[str, verify.VerifyOutcome]
    accepted: dict[str, trust.Accepted]

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy.to_json(), "targets": {t: a.to_json() for t, a in self.accepted.items()}}

    def inventories(self, engine: EngineProtocol) -> Callable[[str], Mapping[str, Any]]:
        """Image ID -> its inventory as the verifier measured it inside the image (covered by its signature);
        a local image whose statement carries none is measured now in this engine; a staged one never
        takes an inventory from an unsigned file."""
        signed = {a.subject.digest if a.subject.image_id_bound else r.image_id: a
                  for r in self.records if (a := self.accepted.get(r.target.id)) is not None}
        local = {r.image_id for r in self.records if r.staged is None}

        def inventory(image_id: str) -> Mapping[str, Any]:
            found = signed.get(image_id)
            if found is not None and found.inventory is not None:
                return found.inventory
            if image_id in local:
                return verify.run_facts(engine, image_id, args=["--inventory"])
            raise UserError(f"image {image_id}: its signed verification carries no inventory, so no SBOM is made from "
                            f"an unsigned file; verify it again with --verifier-key (or publish --no-evidence)")
        return inventory


def signed_verifications(found: Sequence[artifacts.Found], policy: TrustPolicy | None) -> Signed:
    """Each built target's verification as ``policy`` judges it: the signed statement beside its build.json, about
    that very image (:func:`imagesmith.stages.trust.accept`), its facts checked against the build record. A target with
    neither verify.json nor a statement is not verified; an unsigned verify.json, a statement signed by a key the
    policy does not name or about another image stops the release before anything is tagged (UserError)."""
    if policy is None:
        raise UserError(NEEDS_TRUST)
    records, outcomes, accepted = [], {}, {}
    for f in found:
        record, tid = f.record, f.record.target.id
        statement = f.folder / trust.STATEMENT_FILE
        if record.ok and record.image_id and (statement.exists() or statement.is_symlink()):
            a = trust.read_statement(statement, policy, subject_of(record.staged, record.image_id), f.folder.parent)
            _same_image(a, record, statement)
            record = _with_measured(record, trust.check_facts(record.facts, a.report, str(f.folder / artifacts.BUILD_FILE),
                                                              str(statement)))
            outcomes[tid], accepted[tid] = verify.VerifyOutcome(dict(a.report)), a
        elif record.ok and (f.verify_path.exists() or f.verify_path.is_symlink()):  # a file, a link, a FIFO: unsigned all the same
            raise trust.Refused(f"{f.verify_path}: unsigned (no {trust.STATEMENT_FILE} beside it); a verify report is "
                                f"released only as a statement signed by a verifier key the trust policy names: verify "
                                f"{tid} on a runner that holds one (imagesmith verify --verifier-key)")
        records.append(record)
    return Signed(policy, records, outcomes, accepted)


def _same_image(a: trust.Accepted, record: artifacts.BuildRecord, where: Path) -> None:
    image = a.report.get("image")
    seen = image.get("id") if isinstance(image, Mapping) else None
    if seen is not None and seen != record.image_id:
        raise trust.Refused(f"{where}: the signed report verified image {str(seen)[:80]}, not the built {record.image_id}; "
                            f"verify that image again")


def _with_measured(record: artifacts.BuildRecord, measured: Mapping[str, str]) -> artifacts.BuildRecord:
    """The record, its facts' versions as the signed report measured them (``cpu`` is a CPU-only torch: no CUDA)."""
    import dataclasses

    facts = dict(record.facts or {}) | {k: (None if k == "cuda" and v == "cpu" else v or None) for k, v in measured.items()}
    return dataclasses.replace(record, facts=facts)


# -- publish from the build artifacts alone ------------------------------------------------------


def publish_artifacts(out: Path, display: Display, release: ReleaseOptions, date: str | None = None,
                      run_report: Path | None = None, matrix: Matrix | None = None, engine: EngineProtocol | None = None) -> publish.ReleaseReport:
    """Publish what OUT's build artifacts (``*/build.json``, gathered from any number of build jobs) and
    the ``verify.json`` beside each say passed: no matrix needed (one given must agree with them). Staged
    images are promoted registry to registry (no engine); the SBOM's inventory comes from the build job's
    measurement. An artifact whose build job did not complete stops the release; a verify report whose run
    did not complete counts as not verified. Writes OUT/release.json and OUT/run-report.json (``running``
    until the release ends, then ``complete`` or ``interrupted``); returns the release report."""
    if run_report is not None:
        raise UserError(f"--run-report {run_report}: a run report is a file another job wrote, not evidence; publish "
                        f"reads the signed statement ({trust.STATEMENT_FILE}) beside each build.json in {out}")
    found = artifacts.find_builds(out)
    check_declared_hosts(found, release.store.declared)
    spec = artifacts.one_release(found)
    if release.release_repository and spec.image.name != release.release_repository:
        raise UserError(f"the build artifacts in {out} release {spec.image.name}, but --registry declares "
                        f"{release.release_repository}; nothing was sent: publish them with --registry {spec.image.name} "
                        f"if that is yours")
    if matrix is not None:
        check_agrees(matrix, spec, out)
    ordered = complete(sorted(found.values(), key=lambda f: f.record.target.depth))
    built = builds_input(ordered)
    signed = signed_verifications(ordered, release.trust)
    engine = Session(release.store, display).engine if engine is None else engine  # connects only if an image was not staged (same-host publish)
    with RunReport(out, built.data) as run:
        run.verify = {t: o.report for t, o in signed.outcomes.items()}
        rel = _release(engine, spec, signed.records, signed.outcomes, out, display, release, date,
                       signed.inventories(engine), signed)
        run.released(rel.to_json() | {"state": runstate.COMPLETE})  # as the release wrote it to release.json
        run.complete()
    return rel


def check_declared_hosts(found: Mapping[str, artifacts.Found], declared: Declared) -> None:
    """Every build artifact's release registry and staged repository on the host the operator declared
    (``publish --registry``/``--matrix``, ``--stage``): else a UserError naming both hosts and the file, before
    anything is sent. Hosts not declared are only read (anonymously), never sent a credential."""
    for f in found.values():
        where, rec = str(f.folder / artifacts.BUILD_FILE), f.record
        if rec.release.registry:
            check_artifact_host(rec.release.registry, declared.release, where, "release registry", RELEASE_FLAG)
        if rec.staged is not None and not same_host(rec.staged.host, declared.release or ""):
            check_artifact_host(rec.staged.host, declared.staging, where, "staged repository", STAGE_FLAG)


def check_agrees(matrix: Matrix, spec: artifacts.Release, out: Path) -> None:
    """A matrix given to publish only cross-checks the artifacts: the same image and tag policy."""
    if (matrix.image.name, matrix.tags) != (spec.image.name, spec.tags):
        raise UserError(f"the build artifacts in {out} release {spec.image.name} ({spec.matrix}), not what {matrix.file.name} "
                        f"says ({matrix.image.name}); publish without --matrix, or build again from {matrix.file.name}")
