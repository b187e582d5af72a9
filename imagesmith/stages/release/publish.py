"""Publish verified images: immutable tags from measured versions, push with
the docker engine, digests read back from the registry, floating tags moved
by semver, and a release manifest (release.json + release.md).

Only targets that built *and* passed verification (of that very image ID) are
tagged and pushed. An immutable tag already in the registry with the same
image (manifest config digest == image ID) is "unchanged" and not pushed
again; with a different image it is never overwritten.

Floating tags are registry-side retags of the pushed, digest-checked
manifest (GET the manifest, PUT it under the floating tag), so a floating tag
is byte-for-byte the verified immutable one and no layer is sent twice. A
floating tag moves only to an image of this release whose torch is at least
as new (semver) as the newest eligible image of its line already in the
registry: never backwards, never to an unverified image, pre-releases only
when ``tags.prerelease`` says so. On a tie (same torch, rebuilt) the new
build takes it.

After the digest check, an optional ``evidence`` step (:mod:`imagesmith.stages.evidence.evidence`)
attaches an SBOM, a verification attestation and signatures to every released
digest; what it attached is recorded per target in the release report.

Side effects are constructor parameters with real defaults (engine, registry
client, sleep, a before-push hook, the evidence step), so tests pass doubles.
This module never imports docker.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar

import tenacity

from imagesmith import runstate
from imagesmith.atomic import write_json, write_text
from imagesmith.edges.credentials import RELEASE_FLAG, CredentialStore
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.edges.registry import Credentials, Manifest, redact
from imagesmith.errors import ImagesmithError, RegistryError, UserError
from imagesmith.model import tags
from imagesmith.model.buildreport import BuildRecord, Release
from imagesmith.model.matrix.records import ImageSpec, Matrix
from imagesmith.model.ref import ImageRef
from imagesmith.model.tags import TagPolicy
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.progress import Display, QuietDisplay
from imagesmith.report import markdown as release_markdown
from imagesmith.stages.release import indexes, push
from imagesmith.stages.release.indexes import IndexRelease
from imagesmith.stages.release.push import Backoff as Backoff  # re-exported: the release's retry schedule is the one push path's
from imagesmith.stages.release.push import message_of as message_of
from imagesmith.stages.release.push import transient as transient
from imagesmith.stages.release.releases import DONE, FloatingRelease, ReleaseStopped, RemoteImage, index_floating
from imagesmith.stages.release.releases import Item as Item
from imagesmith.stages.release.releases import ReleaseRun as ReleaseRun
from imagesmith.stages.release.releases import TargetRelease as TargetRelease
from imagesmith.stages.release.releases import Traffic as Traffic
from imagesmith.stages.release.releases import Verified as Verified
from imagesmith.stages.release.releases import items_from as items_from
from imagesmith.stages.release.releases import label_fields as label_fields
from imagesmith.stages.release.releases import tag_fields as tag_fields
from imagesmith.stages.release.releases import traffic as traffic
from imagesmith.stages.release.tagplan import TagPlanner

if TYPE_CHECKING:
    from imagesmith.edges.signing import Key

SWAP_ROUNDS = 5  # a floating tag rewritten this often under one release: stop, say so
T = TypeVar("T")


# -- the publisher --------------------------------------------------------------------------------


class Publisher:
    def __init__(self, engine: EngineProtocol, registry: RegistryProtocol, image: ImageSpec, policy: TagPolicy, date: str,
                 out_dir: Path, display: Display | None = None, credentials: Credentials | None = None,
                 backoff: Backoff = Backoff(), sleep: Callable[[float], None] = time.sleep,
                 before_push: Callable[[str], None] | None = None,
                 evidence: Callable[[TargetRelease], dict[str, Any]] | None = None,
                 promote: Callable[[str, str, str], Any] | None = None,
                 floating_gate: Callable[[str | None], str | None] | None = None, allow_cpu_verification: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 vulnerability_gate: Callable[[TargetRelease], str | None] | None = None,
                 trust: Mapping[str, Any] | None = None, index_evidence: Callable[[str], dict[str, Any]] | None = None) -> None:
        if not image.registry:
            raise UserError("image.registry is not set in the matrix: a release needs the registry to push to (e.g. harbor.example.com)")
        self.engine, self.registry, self.policy, self.date, self.out = engine, registry, policy, date, out_dir
        self.repo, self.name = image.repository, image.name
        self.display = display or QuietDisplay()
        self.credentials, self.backoff, self.sleep, self.clock = credentials, backoff, sleep, clock
        self.before_push = before_push or (lambda ref: None)
        self.evidence, self.promote = evidence, promote
        self.index_evidence = index_evidence  # an image index's digest -> what was attached to it (its signature)
        self.plan = TagPlanner(self.name, policy, date, self._fail, allow_cpu_verification, vulnerability_gate, floating_gate)
        self.trust = trust
        self._uploads_checked = False
        self._indexes: dict[str, list[TargetRelease]] = {}  # index tag -> its platforms' targets
        self.log: list[str] = []

    # -- public ---------------------------------------------------------------------
    def run(self, items: Sequence[Item]) -> ReleaseRun:
        """Release ``items``; release.json says ``running`` from the start, ``complete`` at
        the end, ``interrupted`` when a signal or an error ends the run early."""
        t0 = time.monotonic()
        report = ReleaseRun(self.registry.host, self.repo, self.date,
                               dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               [self.plan.prepare(i) for i in items], trust=self.trust)
        tracked = runstate.Tracked(self.out / "release.json", report.to_json(), lambda doc: doc | {"ok": False})
        self._indexes = {}
        try:
            self._indexes = self.plan.name_indexes(report.targets, {i.target: i.group for i in items})
            self.plan.check_unique(report.targets)
            self._release(report)
        except BaseException as exc:
            report.seconds = time.monotonic() - t0
            for r in report.targets:
                if r.status == "queued":
                    r.status, r.error = "not-pushed", f"not pushed: the release was interrupted ({runstate.stopped_by(exc)})"
            tracked.stop(exc, report.to_json())
            raise
        report.seconds = time.monotonic() - t0
        self._write(report)
        return report

    def _release(self, report: ReleaseRun) -> None:
        try:
            remote = self._remote()
            self._release_all(report)
            report.indexes = [self._write_index(tag, members) for tag, members in self._indexes.items()]
            report.floating = self._floating(report.targets, remote)
            self._attach_evidence(report)
            self._settle(report)
            index_floating(report)
        except ReleaseStopped as exc:
            report.errors.append(self._clean(str(exc)))
            for r in report.targets:
                if r.status == "queued":
                    self._fail(r, "not-pushed", "not pushed: the release stopped before it (see errors)")

    # -- preparation ------------------------------------------------------------------
    def _fail(self, r: TargetRelease, status: str, error: str) -> TargetRelease:
        r.status, r.error = status, self._clean(error)
        self.display.update(r.target, "skipped" if status.startswith("not-") else "failed", r.error[:120])
        return r

    # -- what the registry has ----------------------------------------------------------
    def _remote(self) -> dict[str, RemoteImage]:
        """Every tag of the repository with its digest, image ID and label fields."""
        names = self._retry(f"listing tags of {self.name}", lambda: self.registry.tags(self.repo))
        cache: dict[str, Mapping[str, str] | None] = {}
        out: dict[str, RemoteImage] = {}
        for tag in names:
            found = self._retry(f"reading {self.name}:{tag}", partial(self.registry.manifest, self.repo, tag))
            if found is None:
                continue
            key = found.config_digest or ""
            if key and key not in cache:
                labels = self._retry(f"reading the config of {self.name}:{tag}", partial(self.registry.labels_of_config, self.repo, key))
                cache[key] = label_fields(labels)
            out[tag] = RemoteImage(tag, found.digest, found.config_digest, cache.get(key))
        return out

    # -- immutable tags ----------------------------------------------------------------
    def _release_all(self, report: ReleaseRun) -> None:
        for r in report.targets:
            if r.status != "queued":
                continue
            try:
                self._release_one(r)
            except ReleaseStopped as exc:
                self._fail(r, "failed", str(exc))
                raise

    def _release_one(self, r: TargetRelease) -> None:
        assert r.image_id
        have = self._retry(f"reading {r.reference}", lambda: self.registry.manifest(self.repo, r.tag))
        if have is not None and have.config_digest == r.image_id:
            r.status, r.digest = "unchanged", have.digest
            self.display.update(r.target, "done", f"unchanged {r.tag}")
            return
        if have is not None:
            self._fail(r, "failed", f"{r.reference} already exists with another image ({have.config_digest}, this build "
                                    f"{r.image_id}); immutable tags are never overwritten: release with another --date, "
                                    f"or delete that tag in the registry if it is wrong")
            return
        if r.source:
            r.digest = self._promote(r)
        else:
            r.digest, r.traffic = self._push(r.image_id, r.tag, r.target)
        r.status = "pushed"
        self.display.update(r.target, "pushed", f"{r.tag} {r.digest[:19]}")

    def _push(self, image_id: str, tag: str, target: str) -> tuple[str, Traffic]:
        """Tag, push (with retries), then read the digest back and compare; what the push
        sent. A push that fails (or is interrupted) removes the engine-side tag it created."""
        ref = f"{self.name}:{tag}"
        self.display.update(target, "pushing", tag)
        self.before_push(ref)
        self._check_uploads()
        created = self.engine.image(ref) is None
        self._retry(f"tagging {image_id[:19]} as {ref}", lambda: self.engine.tag(image_id, self.name, tag))
        auth = self.credentials.auth_config() if self.credentials else None
        lines: list[str] = []
        log = self._logger(ref)

        def on_line(line: str) -> None:
            lines.append(line)
            log(line)
        try:
            digest = self._retry(f"push {ref}", lambda: self._push_once(tag, auth, ref, on_line))
        except BaseException:
            if created:
                self._untag(ref)
            raise
        back = self._check_digest(ref, tag, digest, image_id)
        config = self._retry(f"reading the config of {ref}", lambda: self.registry.config(self.repo, image_id))
        return back.digest, traffic(back.raw, (config.get("rootfs") or {}).get("diff_ids") or [], lines)  # the registry's, read back

    def _promote(self, r: TargetRelease) -> str:
        """Registry to registry, no engine (:mod:`imagesmith.stages.release.promote`); the release digest is the staged one."""
        assert r.source and r.image_id
        ref, promote, source = f"{self.name}:{r.tag}", self.promote, r.source
        if promote is None:
            raise ReleaseStopped(f"{r.target} is staged ({r.source}) but this release cannot promote (no registry client for it)")
        self.display.update(r.target, "pushing", f"promoting {str(ImageRef.parse(source).digest)[:19]} to {r.tag}")
        self.before_push(ref)
        done = self._retry(f"promote {source} to {ref}", lambda: promote(source, self.repo, r.tag))
        r.promotion = done.to_json()
        self._check_digest(ref, r.tag, done.digest, r.image_id)
        return str(done.digest)

    def _push_once(self, tag: str, auth: Mapping[str, str] | None, ref: str, on_line: Callable[[str], None]) -> str:
        return push.push_once(self.engine, self.registry, self.repo, self.name, tag, auth, on_line)

    def _check_uploads(self) -> None:
        """Once per release, before the first push: does the registry take uploads? A full
        or read-only registry answers at once, with its reason, instead of after the
        engine's own minute of retrying every layer."""
        if not self._uploads_checked:
            self._retry(f"starting an upload to {self.name}", lambda: self.registry.check_upload(self.repo))
            self._uploads_checked = True

    def _untag(self, ref: str) -> None:
        try:
            self.engine.untag(ref)
        except (ImagesmithError, OSError) as exc:
            self.display.note(f"could not remove the engine-side tag {ref}: {exc}")

    def _check_digest(self, ref: str, tag: str, digest: str, image_id: str) -> Manifest:
        back = self._retry(f"reading {ref} back", lambda: self.registry.manifest(self.repo, tag))
        if back is None or back.digest != digest or (back.config_digest and back.config_digest != image_id):
            seen = f"{back.digest} (image {back.config_digest})" if back else "nothing"
            raise ReleaseStopped(f"digest mismatch for {ref}: the push reported {digest} (image {image_id}) but the "
                                 f"registry serves {seen}; something else writes to this repository: stop it and run the release again")
        return back

    def _write_index(self, tag: str, members: list[TargetRelease]) -> IndexRelease:
        """The image index of one multi-platform tag, when every platform was released; else why not."""
        try:
            out = indexes.write(self.registry, self.repo, self.name, tag, members, self._retry)
        except ReleaseStopped as exc:
            out = indexes.IndexRelease(tag, f"{self.name}:{tag}", "failed", {}, reason=self._clean(str(exc)))
        out.reason = self._clean(out.reason)
        self.display.note(f"{out.reference}: image index {out.action}" + (f" ({out.reason})" if out.reason else "")
                          + (f" {out.digest[:19]}" if out.digest else ""))
        return out

    def _logger(self, ref: str) -> Callable[[str], None]:
        return lambda line: self.log.append(self._clean(f"{ref}: {line}"))

    # -- floating tags -------------------------------------------------------------------
    def _floating(self, releases: list[TargetRelease], remote: Mapping[str, RemoteImage]) -> list[FloatingRelease]:
        done = {r.target: r for r in releases if r.status in DONE and r.may_float and r.floating_digest}
        held = self.plan.held_back(done, self._indexes)
        mine = tags.assign(self.policy, [tags.Candidate(r.target, r.fields) for r in done.values() if r.target not in held])
        theirs = tags.assign(self.policy, self.plan.remote_candidates(remote))
        moved = [self._float(ftag, done[c.ref], theirs.get(ftag), remote.get(ftag)) for ftag, c in sorted(mine.items())]
        return moved + self._kept_by_gate(done, held, set(mine), remote)

    def _kept_by_gate(self, done: Mapping[str, TargetRelease], held: Mapping[str, str], taken: set[str],
                      remote: Mapping[str, RemoteImage]) -> list[FloatingRelease]:
        """The floating tags a held-back image would have taken and nobody else did: kept, with the reason."""
        would = tags.assign(self.policy, [tags.Candidate(t, done[t].fields) for t in held])
        out = []
        for ftag, c in sorted(would.items()):
            if ftag in taken:
                continue
            current = remote.get(ftag)
            out.append(FloatingRelease(ftag, "kept", f"{self.name}:{ftag}", None, done[c.ref].fields["torch"],
                                       current.digest if current else None, current.digest if current else None,
                                       f"{c.ref} ({(done[c.ref].floating_digest or '')[:19]}) {held[c.ref]}"))
            self.display.note(f"{self.name}:{ftag}: kept ({held[c.ref]})")
        return out

    def _float(self, ftag: str, r: TargetRelease, rival: tags.Candidate | None, current: RemoteImage | None) -> FloatingRelease:
        f = FloatingRelease(ftag, "kept", f"{self.name}:{ftag}", r.target, r.fields["torch"], r.floating_digest,
                            current.digest if current else None)
        if rival is not None and rival.version > tags.to_semver(r.fields["torch"]):
            f.target, f.torch, f.digest = None, rival.fields["torch"], f.previous
            f.reason = f"the registry has newer torch {rival.fields['torch']} ({self.name}:{rival.ref}); a floating tag never moves back"
            return f
        if current is not None and current.digest == r.floating_digest:
            f.action, f.reason = "unchanged", "already points at this image"
        else:
            f.action = self._retag(f, r)
        if f.action not in ("failed", "kept"):
            r.floating.append(ftag)
        self.display.note(f"{f.reference}: {f.action}{' (' + f.reason + ')' if f.reason else ''}")
        return f

    def _retag(self, f: FloatingRelease, r: TargetRelease) -> str:
        """PUT the immutable tag's manifest (or image index) under the floating tag; check the digest."""
        ref = f"{self.name}:{r.floating_tag}"
        try:
            source = self._retry(f"reading {ref}", lambda: self.registry.manifest(self.repo, r.floating_tag))
            if source is None or source.digest != r.floating_digest:
                raise ReleaseStopped(f"{ref} no longer has digest {r.floating_digest}; run the release again")
            self.before_push(f.reference)
            swapped = self._swap(f, r, source)
        except RegistryError as exc:
            f.reason = self._clean(str(exc))
            return "failed"
        return swapped or ("created" if f.previous is None else "moved")

    def _swap(self, f: FloatingRelease, r: TargetRelease, source: Manifest) -> str | None:
        """Compare-and-swap on the registry (which has no conditional PUT): the floating tag is read
        again right before the PUT, and when another release moved it since this one looked, semver
        decides again (a newer torch there: kept); after the PUT it is read back, and a write that raced
        in between is judged the same way. None: written; "kept" or "unchanged": not written."""
        wrote = False
        for _ in range(SWAP_ROUNDS):
            now = self._retry(f"reading {f.reference}", lambda: self.registry.manifest(self.repo, f.tag))
            if now is not None and now.digest == source.digest:
                return None if wrote else "unchanged"
            if now is not None and now.digest != f.previous and self._newer_there(f, r, now):
                return "kept"
            f.previous = now.digest if now else None
            self._retry(f"tagging {f.reference}", lambda: self.registry.put_manifest(self.repo, f.tag, source))
            wrote = True
            back = self._retry(f"reading {f.reference} back", lambda: self.registry.manifest(self.repo, f.tag))
            if back is not None and back.digest == source.digest:
                return None
        raise ReleaseStopped(f"{f.reference} changed {SWAP_ROUNDS} times while this release wrote it: other releases are "
                             f"moving it at the same time; run one release at a time (a CI resource group) and run this again")

    def _newer_there(self, f: FloatingRelease, r: TargetRelease, now: Manifest) -> bool:
        """Another release moved ``f`` meanwhile: is what it holds now newer than ``r``? (Then ``f`` is kept.)"""
        fields = self._holder(f, now)
        if fields is None or tags.to_semver(fields["torch"]) <= tags.to_semver(r.fields["torch"]):
            return False
        f.action, f.target, f.torch, f.digest, f.previous = "kept", None, fields["torch"], now.digest, now.digest
        f.reason = (f"another release moved it to newer torch {fields['torch']} ({now.digest[:19]}) while this one ran; "
                    f"a floating tag never moves back")
        return True

    def _holder(self, f: FloatingRelease, now: Manifest) -> dict[str, str] | None:
        """Tag fields of the image a floating tag holds now (its config labels)."""
        if not now.config_digest:
            return None
        config = now.config_digest
        return label_fields(self._retry(f"reading the config of {f.reference}", lambda: self.registry.labels_of_config(self.repo, config)))

    def _settle(self, report: ReleaseRun) -> None:
        """A last look at every floating tag this release wrote (after the evidence, seconds later): a
        concurrent release that moved one to an *older* torch in the instant between its own check and
        its write is undone here; a newer one stays (the tag is then reported kept)."""
        targets = {t.target: t for t in report.targets}
        for f in [f for f in report.floating if f.action in ("moved", "created", "unchanged") and f.target]:
            r = targets[f.target or ""]
            self._settle_one(f, r)
            if f.action in ("kept", "failed"):
                r.floating = [t for t in r.floating if t != f.tag]

    def _settle_one(self, f: FloatingRelease, r: TargetRelease) -> None:
        now = self._retry(f"reading {f.reference}", lambda: self.registry.manifest(self.repo, f.tag))
        if now is None or now.digest == f.digest or self._newer_there(f, r, now):
            return
        held = self._holder(f, now)
        if held is not None and tags.to_semver(held["torch"]) == tags.to_semver(r.fields["torch"]):
            return  # the same torch, rebuilt by another release: either is right, no tug of war
        self.display.note(f"{f.reference}: moved back to {now.digest[:19]} by another release; moving it forward again")
        f.previous, f.action = now.digest, self._retag(f, r)

    # -- evidence ------------------------------------------------------------------------
    def _attach_evidence(self, report: ReleaseRun) -> None:
        """After the digest check: SBOM, attestation and signature for each released digest."""
        attach = self.evidence
        for r in (t for t in report.targets if t.status in DONE and t.digest and attach is not None):
            assert attach is not None
            self.display.update(r.target, "pushing", f"evidence for {(r.digest or '')[:19]}")
            try:
                r.evidence = self._retry(f"attaching evidence to {r.reference}", partial(attach, r))
            except ReleaseStopped as exc:
                report.errors.append(f"{r.target}: evidence not attached: {exc}")
                continue
            pushed = sum(a["status"] == "pushed" for a in r.evidence.get("artifacts", []))
            self.display.update(r.target, "done", f"evidence: {pushed} pushed, {len(r.evidence.get('artifacts', [])) - pushed} unchanged")
        sign_index = self.index_evidence
        for i in (i for i in report.indexes if i.action in DONE and i.digest and sign_index is not None):
            assert i.digest and sign_index is not None
            sign = partial(sign_index, i.digest)
            try:
                i.evidence = self._retry(f"signing the image index {i.reference}", sign)
            except ReleaseStopped as exc:
                report.errors.append(f"{i.reference}: the image index's signature not attached: {exc}")

    # -- retries, redaction, files ----------------------------------------------------------
    def _retry(self, what: str, action: Callable[[], T]) -> T:
        """``action`` with backoff (tenacity) on :func:`transient` errors; a permanent or final one stops the release."""
        t0, tries = self.clock(), max(1, self.backoff.tries)

        def note(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            self.display.note(f"{what}: {self._clean(message_of(exc or Exception()))}; "
                              f"retry {state.attempt_number} of {tries - 1} in {wait:g}s")

        retrying = push.retrying(self.backoff, self.sleep, note)
        try:
            return retrying(action)
        except (ImagesmithError, OSError) as exc:
            last = self._clean(message_of(exc))
            if not transient(exc):
                raise ReleaseStopped(self._with_source(last if what in last else f"{what}: {last}")) from None
            waited = float(retrying.statistics.get("idle_for", 0.0))
        last = last.removeprefix(f"{what} failed: ")
        raise ReleaseStopped(f"{what} failed {tries} times in {self.clock() - t0:.1f}s "
                             f"({waited:g}s of it waiting between tries); last error: {last}. "
                             f"The registry {self.registry.host} looks down or overloaded: check it, then run the release again "
                             f"(what was pushed stays; a re-run pushes only the rest)")

    def _with_source(self, message: str) -> str:
        """A login failure also says which credentials were tried (never their value)."""
        if not re.search(r"\b(?:docker|podman) login\b", message) or "[credentials used:" in message:
            return message
        return f"{message} [credentials used: {self.credentials.source if self.credentials else 'none given (the engine used its own)'}]"

    def _clean(self, text: str) -> str:
        return redact(text, self.credentials)

    def _write(self, report: ReleaseRun) -> None:
        paths = {"json": self.out / "release.json", "markdown": self.out / "release.md", "log": self.out / "push.log"}
        doc = report.to_json() | {"state": runstate.COMPLETE}
        write_json(paths["json"], doc)
        write_text(paths["markdown"], release_markdown.release_markdown(report.model(doc)))  # the typed release, not its JSON read back
        write_text(paths["log"], "\n".join(self.log) + ("\n" if self.log else ""))
        report.paths = {k: str(v) for k, v in paths.items()}


def publish(engine: EngineProtocol, registry: RegistryProtocol, matrix: Matrix, items: Sequence[Item], date: str, out_dir: Path,
            display: Display | None = None, credentials: Credentials | None = None, **seams: Any) -> ReleaseRun:
    """Tag, push and record every verified item of ``items``; see :class:`Publisher` (``seams``:
    backoff, sleep, before_push, allow_cpu_verification)."""
    return Publisher(engine, registry, matrix.image, matrix.tags, date, out_dir, display, credentials, **seams).run(items)


def release_to(engine: EngineProtocol, spec: Release, records: Sequence[BuildRecord], outcomes: Mapping[str, Verified],
               out_dir: Path, display: Display | None = None, date: str | None = None, store: CredentialStore | None = None,
               ca_file: Path | None = None, signing_key: Key | None = None,
               with_evidence: bool = True, inventory: Callable[[str], Mapping[str, Any]] | None = None,
               floating_gate: Callable[[str | None], str | None] | None = None,
               allow_cpu_verification: bool = False, client: RegistryProtocol | None = None,
               vulnerabilities: Any = None, trust: Mapping[str, Any] | None = None) -> ReleaseRun:
    """Release what the build saved (its records carry the plan's targets; ``spec`` the registry, repository,
    tag policy and build date, ``date`` overriding the latter): the store's login for the release registry when
    the operator declared that host (``store.declared.release``; anonymous when nothing was declared, refused when
    another was), a registry client, then :class:`Publisher`. Staged items are promoted registry to registry
    (:mod:`imagesmith.stages.release.promote`) under the same release policy as pushed ones (GPU-verified CUDA images only
    float; ``floating_gate`` holds back digests the fleet did not pass). With ``with_evidence`` each released
    digest gets its SBOM, attestation and (with ``signing_key``) signatures (:mod:`imagesmith.stages.evidence.evidence`);
    ``inventory`` (image ID -> inventory) replaces running the image for the SBOM; ``client`` replaces the
    registry client made for ``spec``'s registry (a test's double); ``vulnerabilities`` (an imagesmith.stages.evidence.vulngate.Gate)
    matches every image's SBOM before it is pushed: findings at or above the matrix's threshold keep the target back
    (status ``vulnerable``), and each released digest gets the CycloneDX vulnerability document as evidence; ``trust``
    (the trust policy and who signed each accepted verification, :class:`imagesmith.pipeline.Signed`) is recorded in
    release.json and release.md."""
    from imagesmith.edges.runcontext import RunContext
    from imagesmith.stages.release.promote import registry_promoter

    image, store = spec.image, store or CredentialStore()
    if not image.registry:
        raise UserError(f"{spec.matrix}: image.registry is not set; a release needs the registry to push to")
    credentials = store.for_artifact(image.registry, store.declared.release, f"the release of {spec.matrix}",
                                     "release registry", RELEASE_FLAG)
    client = client or RunContext(store).registry(image.registry, credentials, ca_file=ca_file,
                                               anonymous_hint=store.anonymous_hint(image.registry, store.declared.release, RELEASE_FLAG))
    items = items_from(records, outcomes)
    signers = (trust or {}).get("targets") or {}
    items = [replace(i, verification=dict(i.verification) | {"signed": signers[i.target]}) if i.target in signers else i
             for i in items]
    bases = {r.target.id: r.target.base_image for r in records}
    reports = {t: o.report for t, o in outcomes.items()}
    measure = _once(inventory or partial(_run_inventory, engine))  # the gate and the evidence ask for the same image
    step = evidence_step(engine, client, image.repository, bases, reports, signing_key, out_dir, measure, vulnerabilities) if with_evidence else None
    sign_index = index_evidence_step(client, image.repository, signing_key) if with_evidence else None
    gate = vulnerability_step(vulnerabilities, image.name, bases, measure, out_dir) if vulnerabilities is not None else None
    promote = registry_promoter(client, store, ca_file)
    return Publisher(engine, client, image, spec.tags, date or spec.date, out_dir, display, credentials, evidence=step,
                     promote=promote, floating_gate=floating_gate, allow_cpu_verification=allow_cpu_verification,
                     vulnerability_gate=gate, trust=trust, index_evidence=sign_index).run(items)


def _once(measure: Callable[[str], Mapping[str, Any]]) -> Callable[[str], Mapping[str, Any]]:
    """``measure`` asked at most once per image ID."""
    seen: dict[str, Mapping[str, Any]] = {}

    def inventory(image_id: str) -> Mapping[str, Any]:
        if image_id not in seen:
            seen[image_id] = measure(image_id)
        return seen[image_id]
    return inventory


def _run_inventory(engine: EngineProtocol, image_id: str) -> Mapping[str, Any]:
    from imagesmith.stages.verify import incontainer

    return incontainer.run_facts(engine, image_id, args=["--inventory"])


def vulnerability_step(check: Any, name: str, base_images: Mapping[str, str], inventory: Any,
                       out_dir: Path) -> Callable[[TargetRelease], str | None]:
    """Before a target is pushed: its image's SBOM (from the inventory measured once per image ID,
    the same one the evidence uses) matched by ``check``; the result lands in the release record."""
    from imagesmith.stages.evidence import sbom

    def gate(r: TargetRelease) -> str | None:
        assert r.image_id
        inv = sbom.inventory_from(inventory(r.image_id))  # as the evidence gets it: signed, or measured here; never a file in OUT
        identity = sbom.ImageIdentity(name, r.image_id, r.image_id, base_images.get(r.target, ""), "", r.versions)
        found = check(json.loads(sbom.build_bom(inv, identity)))
        r.vulnerabilities = found.to_json()
        return found.reason()  # type: ignore[no-any-return]
    return gate


def index_evidence_step(client: Any, repo: str, key: Any) -> Callable[[str], dict[str, Any]]:
    """What an image index gets (its platforms' images carry their SBOM and verification): the release key's
    signature on the index digest, as ``cosign sign`` signs an index; nothing without a key."""
    from imagesmith.stages.evidence import evidence

    return lambda digest: evidence.Attacher(client, repo, key).attach(digest, []).to_json()


def evidence_step(engine: EngineProtocol, client: Any, repo: str, base_images: Mapping[str, str], reports: Mapping[str, VerifyReport],
                  key: Any, out_dir: Path, inventory: Any = None, vulnerabilities: Any = None) -> Callable[[TargetRelease], dict[str, Any]]:
    """The evidence stage for one released target: its digest, image, base image and verify report
    (and, with ``vulnerabilities``, the CycloneDX vulnerability document of its SBOM)."""
    from imagesmith.stages.evidence import evidence
    from imagesmith.stages.verify import incontainer

    step = evidence.ReleaseEvidence(client, repo, key, inventory or partial(incontainer.run_facts, engine, args=["--inventory"]), out_dir,
                                    vulnerabilities)

    def attach(r: TargetRelease) -> dict[str, Any]:
        assert r.digest and r.image_id
        created = str(client.config(repo, r.image_id).get("created") or "")
        return step(evidence.Subject(r.target, r.digest, r.image_id, base_images.get(r.target, ""), created, r.versions,
                                     reports.get(r.target)))
    return attach
