"""The release use case: what publish believes (signed verifications only) and the release from the build
artifacts alone (``imagesmith publish``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from imagesmith import runstate
from imagesmith.edges.credentials import RELEASE_FLAG, STAGE_FLAG, CredentialStore, Declared, check_artifact_host, same_host
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.edges.runcontext import RunContext
from imagesmith.errors import UserError
from imagesmith.model.buildreport import BuildRecord, Release
from imagesmith.model.matrix import Matrix
from imagesmith.pipeline.inputs import builds_input, complete
from imagesmith.pipeline.runreport import RunReport
from imagesmith.pipeline.verify_built import subject_of
from imagesmith.progress import Display
from imagesmith.stages import artifacts
from imagesmith.stages.evidence import trust
from imagesmith.stages.release import publish
from imagesmith.stages.verify import incontainer, verify

if TYPE_CHECKING:
    from imagesmith.edges.signing import Key
    from imagesmith.stages.evidence.trust import TrustPolicy


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
    vulnerabilities: Any = None  # an imagesmith.stages.evidence.vulngate.Gate: known vulnerabilities gate the release (sources.advisories)
    release_repository: str | None = None  # publish --registry HOST/REPO: the artifacts must release exactly there
    trust: TrustPolicy | None = None  # which verifier keys the release believes (--trust-policy)
    verifier_key: Key | None = None  # build --verify/--push: signs each verification (--verifier-key)

    @property
    def can_release_verified(self) -> bool:
        """``build --push`` signs its verifications and believes them: it needs both the verifier key and the policy."""
        return self.trust is not None and self.verifier_key is not None


def release_targets(engine: EngineProtocol, spec: Release, records: Sequence[BuildRecord],
             outcomes: Mapping[str, verify.VerifyOutcome], out: Path, display: Display, options: ReleaseOptions,
             date: str | None = None, inventory: Callable[[str], Mapping[str, Any]] | None = None,
             signed: "Signed | None" = None) -> publish.ReleaseRun:
    return publish.release_to(engine, spec, records, outcomes, out, display, date, options.store, options.ca_file,
                              signing_key=options.signing_key, with_evidence=options.with_evidence, inventory=inventory,
                              floating_gate=options.floating_gate, allow_cpu_verification=options.allow_cpu_verification,
                              client=options.registry, vulnerabilities=options.vulnerabilities,
                              trust=signed.to_json() if signed else None)


NEEDS_TRUST = ("a release believes only verifications signed by a verifier its trust policy names: give --trust-policy FILE "
               "(and, where this command verifies, --verifier-key KEY); make release creates both (docs/trust.md)")


@dataclass(frozen=True)
class Signed:
    """The verifications a release accepted (trust.py): per target, what was signed and by whom; the build
    records with their facts replaced by what the signed reports measured."""

    policy: TrustPolicy
    records: list[BuildRecord]
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
                return incontainer.run_facts(engine, image_id, args=["--inventory"])
            raise UserError(f"image {image_id}: its signed verification carries no inventory, so no SBOM is made from "
                            f"an unsigned file; verify it again with --verifier-key (or publish --no-evidence)")
        return inventory


def signed_verifications(found: Sequence[artifacts.Found], policy: TrustPolicy | None) -> Signed:
    """Each built target's verification as ``policy`` judges it: the signed statement beside its build.json, about
    that very image (:func:`imagesmith.stages.evidence.trust.accept`), its facts checked against the build record. A target with
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
            outcomes[tid], accepted[tid] = verify.VerifyOutcome(a.report), a
        elif record.ok and (f.verify_path.exists() or f.verify_path.is_symlink()):  # a file, a link, a FIFO: unsigned all the same
            raise trust.Refused(f"{f.verify_path}: unsigned (no {trust.STATEMENT_FILE} beside it); a verify report is "
                                f"released only as a statement signed by a verifier key the trust policy names: verify "
                                f"{tid} on a runner that holds one (imagesmith verify --verifier-key)")
        records.append(record)
    return Signed(policy, records, outcomes, accepted)


def _same_image(a: trust.Accepted, record: BuildRecord, where: Path) -> None:
    seen = a.report.image.id if a.report.image else None
    if seen is not None and seen != record.image_id:
        raise trust.Refused(f"{where}: the signed report verified image {str(seen)[:80]}, not the built {record.image_id}; "
                            f"verify that image again")


def _with_measured(record: BuildRecord, measured: Mapping[str, str]) -> BuildRecord:
    """The record, its facts' versions as the signed report measured them (``cpu`` is a CPU-only torch: no CUDA)."""
    import dataclasses

    facts = dict(record.facts or {}) | {k: (None if k == "cuda" and v == "cpu" else v or None) for k, v in measured.items()}
    return dataclasses.replace(record, facts=facts)


def publish_artifacts(out: Path, display: Display, release: ReleaseOptions, date: str | None = None,
                      run_report: Path | None = None, matrix: Matrix | None = None, engine: EngineProtocol | None = None) -> publish.ReleaseRun:
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
    engine = RunContext(release.store, display).engine if engine is None else engine  # connects only if an image was not staged (same-host publish)
    with RunReport(out, built.data) as run:
        run.verify = {t: o.report.to_json() for t, o in signed.outcomes.items()}
        rel = release_targets(engine, spec, signed.records, signed.outcomes, out, display, release, date,
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


def check_agrees(matrix: Matrix, spec: Release, out: Path) -> None:
    """A matrix given to publish only cross-checks the artifacts: the same image and tag policy."""
    if (matrix.image.name, matrix.tags) != (spec.image.name, spec.tags):
        raise UserError(f"the build artifacts in {out} release {spec.image.name} ({spec.matrix}), not what {matrix.file.name} "
                        f"says ({matrix.image.name}); publish without --matrix, or build again from {matrix.file.name}")
