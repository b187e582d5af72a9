"""The command line. Commands are thin: parse, call a stage, print, exit code.

Exit codes: 0 success; 1 a user error or a failed check (one clear message);
2 bad usage (click); 3 a bug (traceback written to a log file).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import click

from imagesmith import __version__
from imagesmith.cli.fleet import fleet_group, floating_gate, gate_options
from imagesmith.errors import ImagesmithError, UsageError, UserError
from imagesmith.model import compat
from imagesmith.model import matrix as matrix_mod
from imagesmith.model import plan as plan_mod
from imagesmith.render import contexts as render_mod
from imagesmith.table import print_table
from imagesmith.units import gb

if TYPE_CHECKING:  # the stages import docker (through the engine) only when a command needs them
    from imagesmith.edges.credentials import CredentialStore
    from imagesmith.edges.engine import Engine
    from imagesmith.edges.signing import Key
    from imagesmith.pipeline import ReleaseOptions, RunReport
    from imagesmith.stages.build import BuildReport
    from imagesmith.stages.publish import ReleaseReport
    from imagesmith.stages.trust import TrustPolicy
    from imagesmith.stages.verify import VerifyOptions, VerifyOutcome

MATRIX_OPTION = click.option("--matrix", "-m", "matrix_file", default="matrix.yaml", show_default=True,
                             type=click.Path(dir_okay=False, path_type=Path), help="The matrix file.")
ALLOW_ROOT_OPTION = click.option(
    "--allow-root", "allow_roots", multiple=True, envvar="IMAGESMITH_ALLOW_ROOT",
    type=click.Path(file_okay=False, path_type=Path),
    help="A folder outside the matrix's own that paths in the matrix (requirements, ca_bundle, template, "
         "wheel folders, credential files) may lead into, after symlinks; repeatable "
         "(IMAGESMITH_ALLOW_ROOT: folders separated by ':').")


def today() -> str:
    """The build date for tags: SOURCE_DATE_EPOCH if set (reproducible), else today (UTC)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc) if epoch else dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d")


def load_matrix(path: Path, allow_roots: Sequence[Path] = ()) -> matrix_mod.Matrix:
    m = matrix_mod.load(path, allowed_roots=allow_roots)
    for warning in m.warnings:
        click.secho(str(warning), fg="yellow", err=True)
    return m


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagesmith")
def cli() -> None:
    """Matrix in, vetted PyTorch/CUDA images out: validate, plan, render,
    build, verify, tag and push."""


# -- matrix / plan / render / compat ----------------------------------------------------


@cli.group("matrix")
def matrix_group() -> None:
    """Work with matrix files."""


@matrix_group.command("validate")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today.")
@ALLOW_ROOT_OPTION
def validate_cmd(file: Path, date: str | None, allow_roots: tuple[Path, ...]) -> None:
    """Check FILE against the schema and the knowledge base, and render every
    target in memory (nothing is written), so what passes here renders.

    Lists the templates of the matrix's own folder it ran: they are code."""
    m = load_matrix(file, allow_roots)
    p = plan_mod.expand(m, date or today())
    render_mod.render_all(p, m)
    _early_vulnerabilities(m, p, dt.datetime.strptime(date or today(), "%Y%m%d").date())
    click.echo(f"OK: {len(m.cells)} cells, {len(p.targets)} targets")
    for layer, path, refs in render_mod.user_templates(m):
        uses = f" (with {', '.join(refs)})" if refs else ""
        click.echo(f"runs template {path}{uses} for layer {layer}: code from the matrix's folder, rendered in Jinja's sandbox")


def _early_vulnerabilities(m: matrix_mod.Matrix, p: plan_mod.Plan, on: dt.date) -> None:
    """The advisories of sources.advisories that hit the plan's pins: warnings, or errors (exit 1)
    at or above vulnerabilities.threshold and not allowed."""
    from imagesmith.errors import ValidationError
    from imagesmith.stages import vulngate

    if not m.sources.advisories and not m.vulnerabilities.allow:
        return
    found = vulngate.early(m, p, on, vulngate.load_snapshots(m))  # no snapshots: only the allowances' expiry is checked
    for s in found.snapshots:
        click.echo(f"advisories: {s.location} ({s.digest}, {len(s.advisories)} records, newest {s.date or 'none'})"
                   + "".join(f"; {n}" for n in s.notes))
    for w in found.warnings:
        click.secho(str(w), fg="yellow", err=True)
    if found.errors:
        raise ValidationError(problems=list(found.errors))


@cli.command("plan")
@MATRIX_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json", "gitlab-ci", "github-matrix"]), default="table",
              show_default=True, help="gitlab-ci: a GitLab child pipeline (one build job per target needing its parent's, "
                                      "verify jobs on GPU runners, one publish job); github-matrix: JSON for fromJSON (targets by depth).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write plan.json here.")
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today. CI formats pin it for every job.")
@click.option("--layers", "show_layers", is_flag=True, help="Each target's CUDA layer (shared by how many cells) and own bytes.")
@click.option("--build-report", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="With --layers: measured bytes from this build report (build/report.json) instead of estimates.")
@click.option("--stage", "stage_repo", default=None, metavar="REGISTRY/REPO",
              help="gitlab-ci: the staging repository the build jobs push to and the verify jobs pull from.")
@click.option("--build-tag", "build_tags", multiple=True, help="gitlab-ci: runner tag of the build jobs (repeat; default self-hosted, linux, docker).")
@click.option("--gpu-tag", "gpu_tags", multiple=True, help="gitlab-ci: runner tag of the verify jobs (repeat; default self-hosted, linux, gpu).")
@click.option("--tier", type=click.Choice(["quick", "standard", "soak"]), default="standard", show_default=True,
              help="gitlab-ci: the verify jobs' tier.")
@ALLOW_ROOT_OPTION
def plan_cmd(matrix_file: Path, fmt: str, out: Path | None, date: str | None, show_layers: bool, build_report: Path | None,
             stage_repo: str | None, build_tags: tuple[str, ...], gpu_tags: tuple[str, ...], tier: str,
             allow_roots: tuple[Path, ...]) -> None:
    """Every build target with its parent, resolved versions and tags (or the CI fan-out that builds them)."""
    m = load_matrix(matrix_file, allow_roots)
    p = plan_mod.expand(m, date or today())
    if out:
        plan_mod.write(p, out)
    if fmt in ("gitlab-ci", "github-matrix"):
        click.echo(_ci_document(p, m, matrix_file, fmt, stage_repo, build_tags, gpu_tags, tier, allow_roots), nl=False)
        return
    if show_layers:
        print_layers(p, _read_build(build_report) if build_report else None, fmt)
        return
    if fmt == "json":
        click.echo(json.dumps(plan_mod.to_json(p), indent=2, sort_keys=True))
        return
    several = len({t.platform for t in p.targets}) > 1  # a platform column only where there is a choice
    print_table(
        f"{len(p.targets)} targets from {matrix_file}",
        ["target", "parent", "torch", "vision", "cuda", "cudnn", "nccl", "py", "os", *(["platform"] if several else []),
         "base image", "torch index", "tag", "floating"],
        [[t.id, t.parent or "-", t.versions.torch, t.versions.torchvision or "-", t.versions.cuda,
          t.versions.cudnn or "-", t.versions.nccl or "-", t.versions.python, t.versions.os,
          *([t.platform.docker] if several else []), t.base_image, t.pip.torch_index_url, t.tag, " ".join(t.floating) or "-"]
         for t in p.targets],
    )


def _read_build(path: Path) -> dict[str, Any]:
    from imagesmith import pipeline

    return pipeline.read_build(path)


def print_layers(p: plan_mod.Plan, report: dict[str, Any] | None, fmt: str) -> None:
    from imagesmith.model import footprint

    kb = compat.load()
    rows, est = footprint.rows(p, kb, report), footprint.estimate(p, kb)
    if fmt == "json":
        click.echo(json.dumps({"targets": [r.__dict__ for r in rows], "cuda_wheels": est.__dict__}, indent=2, sort_keys=True))
        return
    def column(n: int | None) -> str:
        return gb(n, unit="") if n else "-"

    print_table("layers: the CUDA layer (shared by cells) and each target's own bytes",
                ["target", "CUDA layer", "shared by cells", "CUDA GB", "own GB", "figures"],
                [[r.target, r.cuda, r.cells or "-", column(r.cuda_bytes), column(r.own_bytes),
                  "measured" if r.measured else "estimate (wheel sizes)"] for r in rows])
    click.echo(f"CUDA wheels a registry stores for {est.cells} CUDA cells: {gb(est.today_bytes)} with one copy per cell, "
               f"{gb(est.shared_bytes)} with {est.sets} shared layer(s)"
               + (f"; no wheel set recorded for {', '.join(est.unknown)}" if est.unknown else ""))


def _release_name(m: Any) -> str:
    """The release repository (host/path) when the matrix names a registry; else empty."""
    return str(m.image.name) if m.image.registry else ""


def _ci_document(p: Any, m: Any, matrix_file: Path, fmt: str, stage_repo: str | None, build_tags: tuple[str, ...],
                 gpu_tags: tuple[str, ...], tier: str, allow_roots: tuple[Path, ...] = ()) -> str:
    from imagesmith.render import ci
    from imagesmith.stages import staging

    if fmt == "github-matrix":
        return json.dumps(ci.github_matrix(p, _release_name(m)), separators=(",", ":"), sort_keys=True) + "\n"
    if not stage_repo:
        raise UserError("--format gitlab-ci needs --stage REGISTRY/REPO: the staging repository the jobs hand images over by")
    staging.parse_repository(stage_repo, m.image.name)
    o = ci.Options(str(matrix_file), stage_repo, _release_name(m), tier=tier, allow_roots=tuple(map(str, allow_roots)))
    o = dataclasses.replace(o, build_tags=build_tags or o.build_tags, gpu_tags=gpu_tags or o.gpu_tags)
    return ci.gitlab_document(p, o, __version__)


@cli.command("render")
@MATRIX_OPTION
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if what is on disk differs (content, modes, extra or missing files).")
@ALLOW_ROOT_OPTION
def render_cmd(matrix_file: Path, out: Path, check: bool, allow_roots: tuple[Path, ...]) -> None:
    """One build context per target (Dockerfile + files) under OUT/<target>/.

    Every Dockerfile is parsed back with BuildKit's parser and must hold only
    the instructions its template makes; nothing is written otherwise."""
    m = load_matrix(matrix_file, allow_roots)
    contexts = render_mod.render_all(plan_mod.expand(m, today()), m)
    if check:
        drift = render_mod.check(contexts, out)
        for line in drift:
            click.echo(f"drift: {line}", err=True)
        if drift:
            raise UserError(f"{len(drift)} rendered files differ from {matrix_file}; run imagesmith render --matrix {matrix_file} --out {out}")
        click.echo(f"OK: {len(contexts)} build contexts in {out} match {matrix_file}")
        return
    render_mod.write(contexts, out)
    click.echo(f"rendered {len(contexts)} build contexts into {out}/")


@cli.command("compat")
@click.option("--torch", "torch_filter", help="A release line (2.9) or exact version (2.9.1).")
@click.option("--cuda", "cuda_filter", help="Only variants for this CUDA version (or cpu).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def compat_cmd(torch_filter: str | None, cuda_filter: str | None, fmt: str) -> None:
    """The compatibility knowledge base as a table."""
    kb = compat.load()
    rows = compat_rows(kb, torch_filter, cuda_filter)
    if torch_filter and not rows:
        raise UserError(f"no torch {torch_filter} in the knowledge base; known: {', '.join(kb.torch_lines())}")
    if fmt == "json":
        keys = ["torch", "python", "variant", "cuda", "cudnn", "nccl", "torchvision", "torchaudio", "arch", "driver_min", "driver_toolkit", "index"]
        click.echo(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return
    print_table("PyTorch compatibility (Linux x86_64 wheels)",
                ["torch", "python", "variant", "cuda", "cudnn", "nccl", "vision", "audio", "arch", "min driver", "toolkit driver", "index"],
                rows)


def compat_rows(kb: compat.KnowledgeBase, torch_filter: str | None, cuda_filter: str | None) -> list[list[str]]:
    rows = []
    for version in kb.torch_versions():
        release = kb.torch[version]
        if torch_filter and not (version == torch_filter or release.line == torch_filter):
            continue
        for variant in release.variants.values():
            if cuda_filter and (variant.cuda or "cpu") != cuda_filter:
                continue
            cuda = kb.cuda.get(variant.cuda or "")
            rows.append([version, f"{release.python[0]}-{release.python[-1]}" if release.python else "-",
                         variant.name, variant.cuda or "cpu", variant.cudnn or "-", variant.nccl or "-",
                         release.torchvision or "-", release.torchaudio or "-", " ".join(variant.arch) or "-",
                         cuda.min_driver if cuda else "-", cuda.toolkit_driver if cuda else "-", variant.index])
    return rows


# -- base / build ----------------------------------------------------------------------------


@cli.group("base")
def base_group() -> None:
    """Base images."""


@base_group.command("bootstrap")
@click.option("--os", "os_key", required=True, help="A Debian OS key from the knowledge base (debian12, debian13).")
@click.option("--tag", default=None, help="Image reference to create (default imagesmith/debian:<codename>).")
@click.option("--mirror", default="http://deb.debian.org/debian", show_default=True)
@click.option("--arch", type=click.Choice(["amd64", "arm64"]), default=None,
              help="The base's architecture (default: this host's). Another one runs debootstrap's second stage under "
                   "qemu (apt-get install -y qemu-user-static binfmt-support); default tag imagesmith/debian:<codename>-<arch>.")
def bootstrap_cmd(os_key: str, tag: str | None, mirror: str, arch: str | None) -> None:
    """Make a Debian base image with debootstrap + docker import (no registry needed)."""
    from imagesmith.edges.engine import Engine
    from imagesmith.stages import bootstrap

    click.echo(f"debootstrap {os_key}{' ' + arch if arch else ''} from {mirror} ...", err=True)
    ref, image_id = bootstrap.bootstrap(Engine(), os_key, tag, mirror, arch=arch)
    click.echo(f"{ref} {image_id}")


CREDENTIALS_OPTION = click.option(
    "--credentials", "credentials_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Registry logins, each for its host: lines 'HOST user:password' (a Harbor robot account: "
         "harbor.example.com robot$ml+ci:SECRET) or a docker config.json-style {\"auths\": {\"HOST\": {\"auth\": "
         "\"base64(user:password)\"}}}. A legacy line 'user:password' without a host is sent ONLY to the declared "
         "release registry (the matrix's image.registry, --registry, or the host of the IMAGE/REF argument; else "
         "--stage's). Also: IMAGESMITH_REGISTRY_USER/IMAGESMITH_REGISTRY_PASSWORD (for IMAGESMITH_REGISTRY_HOST, else "
         "that same declared host), then the docker config (per host). A host read from an artifact never gets one.")
ALLOW_CPU_OPTION = click.option(
    "--allow-cpu-verification", "allow_cpu", is_flag=True,
    help="Where no GPU is visible, verify CUDA images in CPU mode instead of failing them, and push them with "
         "their immutable tag only, marked -not-gpu-verified (never a floating tag). For hosts without a GPU.")
REGISTRY_CA_OPTION = click.option(
    "--registry-ca", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="CA bundle of the registry (default: /etc/docker/certs.d/<host>/ca.crt when present).")
SIGNING_KEY_OPTION = click.option(
    "--signing-key", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="PEM ECDSA P-256 private key that signs the evidence and the image digests (default: the PEM text in "
         "IMAGESMITH_SIGNING_KEY; password, if any, in IMAGESMITH_SIGNING_KEY_PASSWORD). Without one the evidence is unsigned.")
EVIDENCE_OPTION = click.option(
    "--evidence/--no-evidence", "with_evidence", default=True, show_default=True,
    help="Attach an SBOM, a verification attestation and signatures to every released digest.")
VERIFIER_KEY_OPTION = click.option(
    "--verifier-key", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="PEM ECDSA P-256 private key of this verifier (GPU runners hold it, build jobs never): each verification is "
         "signed, with the inventory measured inside the image, as an in-toto statement about the image's digest "
         "(verify.dsse.json beside verify.json), the only form publish believes. For one IMAGE: give it as "
         "REPOSITORY@sha256:... with --json FILE; the statement is FILE.dsse.json.")
TRUST_POLICY_OPTION = click.option(
    "--trust-policy", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The release's trust policy (trust-policy.yaml: version, verifiers with their public keys): a verification is "
         "released only when signed by a verifier it names, about the exact image released (docs/trust.md).")
PUBLIC_KEY_OPTION = click.option(
    "--key", "public_keys", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Public key (PEM, as cosign.pub); every signature must verify with one of the keys given (repeat --key "
         "for several signers). Without one, signatures are listed, not checked.")


@cli.command("build")
@MATRIX_OPTION
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(1, 64), help="Targets built at once.")
@click.option("--only", multiple=True, help="Targets whose id contains this (with their ancestors); repeatable.")
@click.option("--layer", "layers", multiple=True, help="Only this layer (with its ancestors); repeatable.")
@click.option("--verify", "do_verify", is_flag=True, help="Verify each built image (the matrix's verify: settings).")
@click.option("--prune/--no-prune", default=True, show_default=True,
              help="After a fully successful build, remove builder stages and superseded cache entries of these targets.")
@click.option("--push", is_flag=True, help="Verify each built image, then tag and push those that passed.")
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today.")
@click.option("--stage", "stage_repo", default=None, metavar="REGISTRY/REPO",
              help="Push every image to this staging repository (content tag ctx-<context hash>, never a release tag) and "
                   "record its digest in OUT/<target>/build.json; ancestors come from their jobs' artifacts in OUT or from "
                   "staging (pulled by digest) instead of being rebuilt.")
@CREDENTIALS_OPTION
@REGISTRY_CA_OPTION
@SIGNING_KEY_OPTION
@VERIFIER_KEY_OPTION
@TRUST_POLICY_OPTION
@EVIDENCE_OPTION
@gate_options
@ALLOW_CPU_OPTION
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--json", "as_json", is_flag=True, help="Print the build (or run) report as JSON on stdout.")
@ALLOW_ROOT_OPTION
def build_cmd(matrix_file: Path, out: Path, jobs: int, only: tuple[str, ...], layers: tuple[str, ...],
              do_verify: bool, prune: bool, push: bool, date: str | None, stage_repo: str | None, credentials_file: Path | None,
              registry_ca: Path | None, signing_key: Path | None, verifier_key: Path | None, trust_policy: Path | None,
              with_evidence: bool, gate_fleet: Path | None, fleet_reports: tuple[Path, ...], allow_cpu: bool, quiet: bool,
              as_json: bool, allow_roots: tuple[Path, ...]) -> None:
    """Render and build every target, parents first, reusing what is cached;
    with --push also verify, tag and push (the release pipeline)."""
    from imagesmith import pipeline
    from imagesmith.edges.engine import Engine
    from imagesmith.progress import make_display
    from imagesmith.stages import artifacts

    if push and (verifier_key is None or trust_policy is None):
        raise UsageError(f"build --push: {pipeline.NEEDS_TRUST}")
    m, date = load_matrix(matrix_file, allow_roots), date or today()
    store = credential_store(m.image.registry, stage_repo, credentials_file)
    key = _signing_key(signing_key) if push and with_evidence else None
    trusted = _trust_policy(trust_policy)
    release = pipeline.ReleaseOptions(store, registry_ca, key, with_evidence,
                                      floating_gate(gate_fleet, fleet_reports, trusted),
                                      allow_cpu, vulnerabilities=_vulnerability_gate(m) if push else None,
                                      trust=trusted, verifier_key=_verifier_key(verifier_key))
    job = pipeline.BuildJob(m, plan_mod.expand(m, date), out, only, layers, jobs, prune, stage_repo, store, registry_ca)
    picked = len(job.plan.select(only, layers).targets)
    if not picked:
        raise UserError(f"no target matches --only {' '.join(only)} --layer {' '.join(layers)}")
    engine = Engine()
    display = make_display(f"building {picked} targets", quiet or as_json)
    with artifacts.locked(out, "imagesmith build", display.note):  # one writer of OUT, from the build to the release
        run = pipeline.RunReport(out) if push or do_verify else None  # replaces the last run's report at once: running
        try:
            p, report = pipeline.build_stage(engine, job, display, run)
        finally:
            display.close()
        _print_build(report, out, quiet, as_json and run is None)
        if run is not None:
            _verify_and_release(engine, m, p, report, out, date, push, quiet, as_json, run, release)
    if run is None and not report.ok:
        raise UserError(f"{sum(not r.ok for r in report.results)} of {len(report.results)} targets did not build; see above")


def _vulnerability_gate(m: matrix_mod.Matrix) -> Any:
    """The release gate of sources.advisories (snapshots read once, before anything is pushed); None without one."""
    from imagesmith.stages import vulngate

    gate = vulngate.Gate.of(m)
    for s in gate.snapshots if gate else ():
        click.echo(f"advisories: {s.location} ({s.digest}, {len(s.advisories)} records, newest {s.date or 'none'}); "
                   f"release threshold {m.vulnerabilities.threshold}", err=True)
    return gate


def credential_store(release: str | None, stage: str | None, credentials_file: Path | None) -> CredentialStore:
    """The run's credential store, built once: ``release`` and ``stage`` are the registry hosts (or
    ``host/repo``) the operator declared; each credential is bound to its host."""
    from imagesmith.edges import credentials

    declared = credentials.Declared(release.split("/", 1)[0] if release else None, stage.split("/", 1)[0] if stage else None)
    return credentials.load_store(declared, os.environ, credentials_file)


def _verifier_key(path: Path | None) -> Key | None:
    if path is None:  # no signing stack (cryptography) needed: verify --local runs on hosts without it
        return None
    from imagesmith.edges import signing

    return signing.load_signing_key(path, {})


def _trust_policy(path: Path | None) -> TrustPolicy | None:
    from imagesmith.stages import trust

    return trust.load_policy(path) if path is not None else None


def _signing_key(path: Path | None) -> Key | None:
    from imagesmith.edges import signing

    key = signing.load_signing_key(path, os.environ)
    if key is None:
        click.secho(f"warning: no signing key (--signing-key or {signing.ENV_KEY}): the evidence is attached unsigned", fg="yellow", err=True)
    return key


def _verify_and_release(engine: Engine, m: matrix_mod.Matrix, p: plan_mod.Plan, report: BuildReport, out: Path, date: str,
                        push: bool, quiet: bool, as_json: bool, run: RunReport, release: ReleaseOptions) -> None:
    """build --verify/--push: the pipeline verifies (and releases); this prints what it made of the build."""
    from imagesmith import pipeline
    from imagesmith.progress import make_display
    from imagesmith.stages import artifacts

    display = make_display(f"verifying {sum(r.ok for r in report.results)} images", quiet or as_json)
    try:
        options = pipeline.options_from(m, allow_cpu_verification=release.allow_cpu_verification)
        done = pipeline.verify_and_release(engine, report, p, artifacts.Release.of(m, date), out, display, run, options,
                                           release, push)
    finally:
        display.close()
    if as_json:
        click.echo(done.run_report.read_text())
    elif not quiet:
        _print_outcomes(done.outcomes)
    if done.release is not None:
        finish_release(done.release, quiet or as_json)
    click.echo(f"run report: {done.run_report}", err=True)
    if done.failed or done.unbuilt:
        raise UserError(f"{done.unbuilt} targets did not build, {len(done.failed)} did not verify: {', '.join(done.failed) or '-'}")


def _print_outcomes(outcomes: Mapping[str, VerifyOutcome]) -> None:
    from imagesmith.model import policy

    rows = []
    for target, o in outcomes.items():
        s = o.report.get("summary", {})
        rows.append([target, "passed" if o.ok else "FAILED", policy.how_verified(o.report), s.get("pass", 0), s.get("warn", 0),
                     s.get("fail", 0), s.get("skip", 0), verify_failures(o.report) if not o.ok else "-"])
    print_table("verification", ["target", "result", "mode", "pass", "warn", "fail", "skip", "failed checks"], rows)


def mode_line(report: dict[str, Any]) -> str:
    """Which mode ran and why, for the first line of the verify table."""
    from imagesmith.model import policy

    reason = str((report.get("mode") or {}).get("reason") or "mode unknown: the payload did not report")
    cuda = (report.get("environment") or {}).get("cuda")
    ev = policy.evidence(report)
    if cuda and not ev.gpu_verified and policy.NOT_GPU_VERIFIED not in reason:
        reason += f" ({policy.NOT_GPU_VERIFIED})"
    return reason


@cli.command("publish")
@click.option("--matrix", "-m", "matrix_file", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Not needed: the build artifacts (*/build.json) carry the plan. Given, it is checked to "
                   "agree with them (the same image and tag policy), and its sources.advisories and vulnerabilities "
                   "gate the release (known vulnerabilities at or above the threshold: not pushed).")
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Where the build artifacts (*/build.json, gathered from any number of build jobs) and the verify "
                   "reports beside them are; release.json, release.md and run-report.json go here.")
@click.option("--run-report", type=click.Path(dir_okay=False, exists=True, path_type=Path), hidden=True,
              help="Refused: a run report is not evidence (publish reads the signed verify.dsse.json beside each build.json).")
@click.option("--date", default=None, help="Build date for the immutable tags (YYYYMMDD); default: the build's.")
@click.option("--registry", "registry_repo", default=None, metavar="HOST[/REPO]",
              help="The release registry (and repository) this job publishes to: it gets the credentials, and build "
                   "artifacts naming another are refused (exit 1). Default: --matrix's image.registry; with neither, "
                   "the registry the artifacts name is used without credentials.")
@click.option("--stage", "stage_repo", default=None, metavar="REGISTRY/REPO",
              help="The staging repository the builds pushed to (as build --stage): its host gets the credentials "
                   "to pull from; artifacts naming another staging host are refused (exit 1).")
@CREDENTIALS_OPTION
@REGISTRY_CA_OPTION
@SIGNING_KEY_OPTION
@TRUST_POLICY_OPTION
@EVIDENCE_OPTION
@gate_options
@ALLOW_CPU_OPTION
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@ALLOW_ROOT_OPTION
def publish_cmd(matrix_file: Path | None, out: Path, run_report: Path | None, date: str | None,
                registry_repo: str | None, stage_repo: str | None, credentials_file: Path | None, registry_ca: Path | None,
                signing_key: Path | None, trust_policy: Path | None, with_evidence: bool,
                gate_fleet: Path | None, fleet_reports: tuple[Path, ...], allow_cpu: bool, quiet: bool,
                allow_roots: tuple[Path, ...]) -> None:
    """Tag and release what passed verification; write OUT/release.json and OUT/release.md.

    Staged images (imagesmith build --stage) are promoted registry to registry: blob mounts and
    manifest copies, no Docker engine, the release digest equal to the verified one. The release
    policy is the same either way: floating tags only for GPU-verified CUDA images (and, with
    --fleet/--fleet-report, only for digests every required GPU class passed)."""
    from imagesmith import pipeline
    from imagesmith.progress import make_display
    from imagesmith.stages import artifacts

    m = load_matrix(matrix_file, allow_roots) if matrix_file else None
    if trust_policy is None:
        raise UsageError(f"publish: {pipeline.NEEDS_TRUST}")
    declared = _declared_release(registry_repo, m)
    store = credential_store(declared, stage_repo, credentials_file)
    key = _signing_key(signing_key) if with_evidence else None
    trusted = _trust_policy(trust_policy)
    release = pipeline.ReleaseOptions(store, registry_ca, key, with_evidence,
                                      floating_gate(gate_fleet, fleet_reports, trusted),
                                      allow_cpu, vulnerabilities=_vulnerability_gate(m) if m else None,
                                      release_repository=registry_repo if registry_repo and "/" in registry_repo else None,
                                      trust=trusted)
    display = make_display("publishing", quiet)
    with artifacts.locked(out, "imagesmith publish", display.note):
        try:
            rel = pipeline.publish_artifacts(out, display, release, date, run_report, m)
        finally:
            display.close()
    finish_release(rel, quiet)


def _declared_release(registry_repo: str | None, m: matrix_mod.Matrix | None) -> str | None:
    """publish's release registry as the operator declared it: --registry, else the matrix's image.registry."""
    from imagesmith.edges.credentials import same_host

    from_matrix = m.image.registry if m is not None else None
    if registry_repo and from_matrix and not same_host(registry_repo, from_matrix):
        raise UserError(f"--registry {registry_repo} and {m.file.name if m else ''} (image.registry {from_matrix}) declare "
                        f"two release registries; give one")
    return registry_repo or from_matrix


def finish_release(rel: ReleaseReport, quiet: bool) -> None:
    """Print what was released and where the report is; exit 1 if any target was not released."""
    if not quiet:
        print_table(f"release to {rel.registry}/{rel.repository} ({rel.seconds:.1f}s)",
                    ["target", "status", "reference", "digest", "floating", "verified", "evidence"],
                    [[t.target, t.status, t.reference or "-", (t.digest or "-")[:19], " ".join(t.floating) or "-",
                      t.verified_how()[:90], _evidence_cell(t.evidence)] for t in rel.targets])
        unvetted = [t.reference for t in rel.targets if t.status in ("pushed", "unchanged") and t.gpu_verified is False]
        if unvetted:
            click.secho(f"{len(unvetted)} CUDA image(s) not GPU-verified (verified without a GPU): immutable tag only, "
                        f"no floating tag: {', '.join(unvetted)}", fg="yellow", err=True)
        for f in rel.floating:
            if f.action in ("kept", "failed"):
                click.echo(f"{f.reference}: {f.action}: {f.reason}", err=True)
    click.echo(f"release report: {rel.paths['json']} (summary: {rel.paths['markdown']})")
    problems = rel.errors + [f"{t.target}: {t.error}" for t in rel.targets if t.error and t.status != "not-pushed"]
    stopped = sum(t.status == "not-pushed" for t in rel.targets)
    if stopped:
        problems.append(f"{stopped} verified targets were not pushed because the release stopped; fix the above and run it again")
    if not rel.ok:
        raise UserError("release incomplete:\n  " + "\n  ".join(problems or ["a floating tag could not be moved (see above)"]))


def _evidence_cell(attached: dict[str, Any]) -> str:
    artifacts = attached.get("artifacts") or []
    if not artifacts:
        return "-"
    pushed = sum(a["status"] == "pushed" for a in artifacts)
    signed = "signed" if any(a.get("kind") == "signature" for a in artifacts) else "UNSIGNED"
    return f"{pushed} pushed, {len(artifacts) - pushed} unchanged ({signed})"


def _print_build(report: "Any", out: Path, quiet: bool, as_json: bool) -> None:
    from imagesmith.stages import build

    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    for line in build.failure_summary(report):
        click.echo(line, err=True)
    if not quiet:
        staged = any(r.staged for r in report.results)
        print_table(f"build: {report.seconds:.1f}s, report in {out / 'report.json'}",
                    ["target", "status", "seconds", "size", "image", *(["staged"] if staged else [])],
                    [[r.target, r.status, f"{r.seconds:.1f}", gb(r.size_bytes) if r.size_bytes else "-",
                      (r.image_id or "-")[:19], *([_staged_cell(r.staged)] if staged else [])] for r in report.results])


def _staged_cell(staged: dict[str, Any] | None) -> str:
    if not staged:
        return "-"
    how = "from its job's artifact" if staged.get("adopted") else "pushed" if staged.get("pushed") else "already there"
    return f"{staged['digest'][:19]} ({how})"


# -- verify -------------------------------------------------------------------------------------


def _expect_option(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, str]:
    """--expect parsed at once: a bad item is bad usage (exit 2) before any container starts."""
    from imagesmith.stages import verify

    try:
        return verify.parse_expect(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc).removeprefix("--expect: "), ctx, param) from None


def _gpus_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    value = value.replace(" ", "")
    if not matrix_mod.GPU_LIST.match(value):
        raise click.BadParameter(f"{value!r}: write all, none, GPU indexes (0,1) or UUIDs (GPU-...)", ctx, param)
    return value


@cli.command("verify")
@click.argument("image", required=False)
@click.option("--tier", type=click.Choice(["quick", "standard", "soak"]), default="quick", show_default=True)
@click.option("--gpus", default="all", show_default=True, callback=_gpus_option,
              help="all (every GPU, at least one), none (CPU mode), or a list such as 0,1 (exactly those); "
                   "fewer visible GPUs than asked fails gpu.devices.")
@click.option("--expect", default="", callback=_expect_option,
              help="Versions to expect instead of the image's labels, comma-separated NAME=VERSION: torch=2.9.1,cuda=12.8 "
                   "(cuda=cpu: a CPU-only torch), also cudnn, nccl, python, os, torchvision, ... or pip:NAME=VERSION.")
@click.option("--require-non-root", is_flag=True,
              help="Fail (not warn) when a foreign image runs as root (images imagesmith built always fail as root).")
@click.option("--allow-shared-gpu", is_flag=True,
              help="Judge throughput checks even when another process uses the GPU: they then measure this tenant's "
                   "share (the report says so). Without it they end inconclusive on a shared GPU. Either way a run "
                   "that was not exclusive earns no floating tag.")
@click.option("--through-entrypoint", is_flag=True,
              help="Run the payload through the image's ENTRYPOINT (as its arguments, e.g. an /entry.sh that activates "
                   "a venv or conda, then exec \"$@\"), so it checks the environment users get. Default: python3 in place "
                   "of the ENTRYPOINT (the verdict then names the one it bypassed).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Write the verify report here.")
@click.option("--local", is_flag=True, help="Run the payload on this host's Python (no Docker), e.g. on a GPU host.")
@click.option("--python", "python_exe", default=None, help="With --local: the Python to run the payload with.")
@click.option("--require-gpu", is_flag=True, help="Fail whenever no GPU is visible, even with --gpus none.")
@ALLOW_CPU_OPTION
@click.option("--timeout", "timeout_s", default=900.0, show_default=True, type=float, help="Seconds before the run is killed.")
@click.option("--shm-size", default="8g", show_default=True)
@click.option("--memory", default=None, help="Container memory limit, e.g. 32g.")
@click.option("--cpus", default=None, type=float, help="Container CPU limit.")
@click.option("--soak-minutes", default=None, type=float, help="Soak tier duration (default 30).")
@click.option("--only", default="", help="Only these check ids or groups (comma-separated).")
@click.option("--skip", default="", help="Leave out these check ids or groups (comma-separated).")
@click.option("--no-pull", is_flag=True, help="Never pull IMAGE from its registry.")
@click.option("--build-report", "build_reports", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Verify every image this build report (OUT/report.json) or build artifact (OUT/<target>/build.json) "
                   "names, a staged one by its digest; repeat for several build jobs. --json then writes a run report.")
@click.option("--stage", "stage_repo", default=None, metavar="REGISTRY/REPO",
              help="With --build-report: the staging repository the builds pushed to (as build --stage). Its host gets "
                   "the credentials to pull with; artifacts naming another host are refused (exit 1). Without it, "
                   "staged images are pulled without credentials.")
@CREDENTIALS_OPTION
@PUBLIC_KEY_OPTION
@VERIFIER_KEY_OPTION
@click.option("--reuse-evidence", is_flag=True,
              help="Do not run again when IMAGE's digest carries a passed verification of this tier on this GPU model "
                   "(or CPU mode), signed by --key (with --max-age-from, also a recent enough vulnerability match).")
@click.option("--max-age-from", "age_matrix", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="With --reuse-evidence: a matrix whose vulnerabilities.max_age_days bounds how old the reused "
                   "result's known-vulnerability match may be.")
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the figures as Prometheus metrics to this FILE.prom (atomically), for node_exporter's "
                   "textfile collector (docs/metrics.md).")
@click.option("--pushgateway", metavar="URL", default=None,
              help="Also push the figures to this Prometheus Pushgateway, one group per image "
                   "(job=imagesmith, instance=this host, digest=the image's).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def verify_cmd(image: str | None, tier: str, gpus: str, expect: dict[str, str], require_non_root: bool,
               allow_shared_gpu: bool, through_entrypoint: bool, json_out: Path | None, local: bool, python_exe: str | None, require_gpu: bool, allow_cpu: bool,
               timeout_s: float, shm_size: str, memory: str | None,
               cpus: float | None, soak_minutes: float | None, only: str, skip: str, no_pull: bool,
               build_reports: tuple[Path, ...], stage_repo: str | None, credentials_file: Path | None,
               public_keys: tuple[Path, ...], verifier_key: Path | None, reuse_evidence: bool, age_matrix: Path | None,
               metrics_file: Path | None, pushgateway: str | None, quiet: bool) -> None:
    """Verify IMAGE (or, with --local, this host): versions, driver, GPU kernels,
    numerics, throughput against baselines, leaks, NCCL; exit 0 only if every
    required check passed."""
    from imagesmith.model import policy
    from imagesmith.stages import verify

    if [bool(image), local, bool(build_reports)].count(True) != 1:
        raise UserError("give one of: an IMAGE to verify, --local (this host), or --build-report (every image a build made)")
    if require_gpu and allow_cpu:
        raise UsageError("--require-gpu and --allow-cpu-verification contradict each other: give one")
    options = verify.VerifyOptions(
        tier=tier, gpus=gpus, expect=expect, require_gpu=require_gpu, allow_cpu=allow_cpu, shm_size=shm_size,
        require_non_root=require_non_root, allow_shared_gpu=allow_shared_gpu, through_entrypoint=through_entrypoint,
        memory=memory, cpus=cpus, timeout_s=timeout_s, soak_minutes=soak_minutes,
        only=tuple(filter(None, (s.strip() for s in only.split(",")))),
        skip=tuple(filter(None, (s.strip() for s in skip.split(",")))))
    verify.request_for(options)  # bad --only/--skip: exit 2 before any container starts
    export = _metrics_export(metrics_file, pushgateway, quiet)  # a bad --metrics/--pushgateway: before anything runs
    if stage_repo and not build_reports:
        raise UsageError("--stage declares the staging registry of --build-report; give --build-report too")
    signer = _verifier_key(verifier_key)
    if signer is not None and not build_reports:
        _check_signable(image, local, json_out, reuse_evidence)
    if build_reports:
        _verify_build(build_reports, options, json_out, quiet, credential_store(None, stage_repo, credentials_file), export,
                      signer)
        return
    if reuse_evidence and not public_keys:
        raise UserError("--reuse-evidence trusts only a signed attestation: give the signer's public key with --key")
    max_age = load_matrix(age_matrix).vulnerabilities.max_age_days if age_matrix else None
    store = credential_store(_image_host(image), None, credentials_file) if image and not local else None
    from imagesmith.runstate import Tracked

    reused = _attached_evidence(image, public_keys, store, options, reuse_evidence, quiet, max_age) if image and store else None
    if reused is not None:  # the same --json report, the same verdict, as a fresh run judged by that evidence
        with Tracked(json_out, verify.running_report(image, tier)) as tracked:
            tracked.complete(reused)
        if not quiet:
            print_verify(reused, json_out)
        return

    with Tracked(json_out, verify.running_report(image, tier)) as tracked:  # --json FILE says running at once
        if local:
            outcome = verify.run_local(options, python_exe)
        else:
            outcome = _verify_image(image or "", options, no_pull, store, quiet)
        tracked.complete(outcome.report)
    if not quiet:
        print_verify(outcome.report, json_out)
    if signer is not None and json_out is not None:
        signed = _sign_image_verification(image or "", outcome.report, signer, json_out)
        if not quiet:
            click.echo(f"signed statement: {signed}", err=True)
    export(outcome.report, str(json_out or "the verify report"))
    if not outcome.ok:
        raise UserError(f"verification failed: {verify_failures(outcome.report)}")
    if policy.evidence(outcome.report).exclusive is False and not allow_shared_gpu:
        raise UserError(f"not verified: {policy.sharing_line(outcome.report)}; run it again with the GPU to itself, "
                        "or pass --allow-shared-gpu to measure this tenant's share")


def _check_signable(image: str | None, local: bool, json_out: Path | None, reuse: bool) -> None:
    """``verify IMAGE --verifier-key``: a statement is about a digest, lies beside --json, and covers a fresh run."""
    from imagesmith.stages.fleet.config import parse_ref

    if local or not image:
        raise UsageError("--verifier-key signs a verification of an image's digest: give IMAGE as REPOSITORY@sha256:... "
                         "(or --build-report)")
    try:
        parse_ref(image)
    except UserError as exc:
        raise UsageError(f"--verifier-key: {exc}") from None
    if json_out is None:
        raise UsageError("--verifier-key writes the signed statement beside the report: give --json FILE "
                         "(FILE.dsse.json is written next to it)")
    if reuse:
        raise UsageError("--verifier-key signs what this run measured; --reuse-evidence runs nothing: give one of them")


def statement_path(json_out: Path) -> Path:
    """Where ``verify --json FILE --verifier-key`` writes its statement: FILE's stem + ``.dsse.json`` beside it
    (``verify.json`` -> ``verify.dsse.json``, the name publish reads)."""
    return json_out.with_name(json_out.name.removesuffix(".json") + ".dsse.json")


def _sign_image_verification(image: str, report: Mapping[str, Any], signer: Key, json_out: Path) -> Path:
    """The report of ``verify IMAGE`` and the inventory measured inside that image, signed as a statement about
    IMAGE's digest (the subject is the REPOSITORY@sha256 the operator named, which the payload ran on)."""
    from imagesmith import pipeline
    from imagesmith.edges.engine import Engine
    from imagesmith.stages import trust
    from imagesmith.stages.fleet.config import parse_ref

    ref = parse_ref(image)
    return pipeline.sign_report(Engine(), report, trust.Subject(ref.name, ref.digest), signer, statement_path(json_out),
                                lambda line: click.secho(f"note: {line}", fg="yellow", err=True))


def _image_host(image: str) -> str:
    """The registry an IMAGE/REF argument names: the operator typed it, so it is a declared host."""
    from imagesmith.edges.engine import registry_host

    return registry_host(image)


def _attached_evidence(image: str, public_keys: tuple[Path, ...], store: CredentialStore, options: Any,
                       reuse: bool, quiet: bool, max_age_days: int | None = None) -> dict[str, Any] | None:
    """Print what is attached to IMAGE's digest; with --reuse-evidence, the verify report the pipeline found a
    signed attestation standing for (pipeline.attached_evidence decides), else None."""
    from imagesmith import pipeline

    attached = pipeline.attached_evidence(image, public_keys, store, options, reuse, max_age_days)
    if attached.note:
        click.secho(f"note: {attached.note}", fg="yellow", err=True)
    if attached.found is None:
        return None
    if not quiet:
        print_evidence(attached.found)
    for reason in attached.why_not:
        click.echo(f"not reused: {reason}; running again", err=True)
    if attached.reused is not None:
        found = attached.found
        click.echo(f"reusing the signed verification {attached.match.digest} of {found.name}@{found.digest} "
                   f"({options.tier} tier, {attached.gpu_model or 'CPU mode'}): not run again", err=True)
    return attached.reused


def print_evidence(found: Any) -> None:
    """The artifacts attached to a digest, their signatures, the verification summary, SBOM counts."""
    from imagesmith.stages.sbom import counts

    data = found.to_json()
    checked = "checked against " + ", ".join(k[:12] for k in found.keys) if found.keys else "not checked (no --key)"
    rows = [[a.kind, a.digest[:19], a.predicate_type or a.artifact_type, _signed(a.signatures, a.signed_by, found.keys),
             "; ".join(a.problems)[:100] or "ok"] for a in found.attestations]
    rows += [["signature", s.layer[:19], f"cosign simple signing of {s.claims[:19]}", _signed(1, s.signed_by, found.keys),
              "; ".join(s.problems)[:100] or "ok"] for s in found.signatures]
    rows += [[f"{a.kind} (.att)", a.layer[:19], a.predicate_type or a.artifact_type, _signed(a.signatures, a.signed_by, found.keys),
              "; ".join(a.problems)[:100] or "ok"] for a in found.cosign]
    print_table(f"evidence of {found.name}@{found.digest} (found via {found.discovery}; signatures {checked})",
                ["artifact", "digest", "type", "signed", "check"], rows)
    for v in data["verification"]:
        gpu = v.get("gpu") or {}
        where = f"{gpu.get('count')} × {gpu.get('model')}, driver {v.get('driver')}" if gpu else "CPU mode (no GPU)"
        m, s = v.get("measured") or {}, v.get("summary") or {}
        versions = " ".join(f"{k} {m.get(k) or '-'}" for k in ("torch", "cuda", "cudnn", "nccl", "python", "os"))
        click.echo(f"verification: {'PASSED' if v.get('passed') else 'FAILED'} ({v.get('gpu_verification') or 'GPU verification not stated'}) "
                   f"{v.get('tier')} tier on {where} at "
                   f"{v.get('started_at')}: {versions}; {s.get('pass')} pass, {s.get('warn')} warn, {s.get('fail')} fail, "
                   f"{s.get('skip')} skip"
                   + (f"; failed: {', '.join(v['failed_checks'])}" if v.get("failed_checks") else ""))
    for a in found.of_kind("sbom"):
        c = counts(a.statement.predicate) if a.statement else {}
        click.echo(f"sbom: CycloneDX {c.get('spec_version')}, {c.get('components')} components: {c.get('python')} Python "
                   f"distributions, {c.get('deb')} Debian packages; base image {c.get('base_image')}")
    for v in data.get("vulnerabilities") or []:
        by = ", ".join(f"{v.get(k, 0)} {k}" for k in ("critical", "high", "medium", "low", "unknown"))
        click.echo(f"vulnerabilities: {by} ({v.get('allowed', 0)} allowed by the matrix)")
    for problem in found.all_problems():
        click.secho(f"MISMATCH: {problem}", fg="red", err=True)


def _signed(count: int, signed_by: Any, keys: Any) -> str:
    if not count:
        return "unsigned"
    if not keys:
        return f"{count} signature(s), not checked"
    return f"yes ({', '.join(k[:12] for k in signed_by)})" if signed_by else "NO"


@cli.command("evidence")
@click.argument("ref")
@PUBLIC_KEY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the evidence as JSON (schema imagesmith.evidence/1).")
@CREDENTIALS_OPTION
@REGISTRY_CA_OPTION
def evidence_cmd(ref: str, public_keys: tuple[Path, ...], as_json: bool, credentials_file: Path | None, registry_ca: Path | None) -> None:
    """What is attached to REF's digest (host/repository:tag or @sha256:...): SBOM, verification
    attestations, signatures; with --key every signature is verified.

    Exit 0: everything matches; 1: a signature, a subject digest or a blob does not match."""
    from imagesmith.edges import signing
    from imagesmith.stages import evidence

    keys = [signing.load_public_key(k) for k in public_keys]
    found = evidence.read(ref, keys, credential_store(_image_host(ref), None, credentials_file), registry_ca)
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2, sort_keys=True))
    else:
        print_evidence(found)
    if not found.ok:
        raise UserError(f"evidence of {found.name}@{found.digest} does not check out: {len(found.all_problems())} mismatch(es)")
    if not found.attestations and not found.signatures and not found.cosign:
        click.echo(f"nothing is attached to {found.name}@{found.digest}", err=True)


def _verify_image(image: str, options: Any, no_pull: bool, store: CredentialStore | None, quiet: bool) -> Any:
    from imagesmith.edges.engine import Engine
    from imagesmith.stages import verify

    creds = store.for_host(_image_host(image)) if store else None
    progress = None if quiet else (lambda line: click.echo(line, err=True))
    return verify.verify_image(Engine(), image, options, pull=not no_pull, progress=progress,
                               auth=creds.auth_config() if creds else None)


def _verify_build(build_reports: tuple[Path, ...], options: VerifyOptions, json_out: Path | None, quiet: bool,
                  store: CredentialStore, export: Callable[[Any, str], None], signer: Key | None = None) -> None:
    """verify --build-report: the pipeline verifies every image the builds made; this prints the outcomes."""
    from imagesmith import pipeline
    from imagesmith.progress import make_display

    built = pipeline.read_builds(build_reports)
    display = make_display(f"verifying {sum(r.ok and bool(r.image_id) for r in built.results)} images", quiet)
    try:
        done = pipeline.verify_builds(built, pipeline.out_of(build_reports[0]), options, display, store, json_out,
                                      signer=signer)
    finally:
        display.close()
    if not quiet:
        _print_outcomes(done.outcomes)
        click.echo(f"run report: {done.run_report}", err=True)
    export(Path(done.run_report), str(done.run_report))
    if done.failed:
        raise UserError(f"verification failed for {len(done.failed)} of {len(done.outcomes)} images: {', '.join(done.failed)}")


def _metrics_export(metrics_file: Path | None, pushgateway: str | None, quiet: bool) -> Callable[[Any, str], None]:
    """verify --metrics/--pushgateway, checked now; the function exports a report (raw JSON or its file; its name)."""
    from imagesmith.stages import metrics

    if metrics_file is not None:
        metrics.check_textfile(metrics_file)
    if pushgateway is not None:
        metrics.check_gateway(pushgateway)

    def export(report: Any, source: str) -> None:
        if metrics_file is None and pushgateway is None:
            return
        from imagesmith.report import load, parse

        run = load(report) if isinstance(report, Path) else parse(report, source)
        metrics.export_run(run, metrics_file, pushgateway,
                           say=(lambda line: None) if quiet else (lambda line: click.echo(line, err=True)))
    return export


def verify_failures(report: dict[str, Any]) -> str:
    from imagesmith.model import policy

    return ", ".join(policy.failed_required(report)) or "no report"


def print_verify(report: dict[str, Any], json_out: Path | None) -> None:
    env = report.get("environment") or {}
    image = (report.get("image") or {}).get("ref", "this host")
    s = report.get("summary", {})
    title = (f"verify {image} ({report.get('tier')}), {mode_line(report)}: torch {env.get('torch')} cuda {env.get('cuda')} "
             f"driver {env.get('driver')} - {s.get('pass', 0)} pass, {s.get('warn', 0)} warn, {s.get('fail', 0)} fail, "
             f"{s.get('skip', 0)} skip, {s.get('inconclusive', 0)} inconclusive in {report.get('wall_s', 0):.1f}s"
             + (f"; report {json_out}" if json_out else ""))
    rows = [[c["id"], c["status"], _fmt(c.get("value")), _fmt(c.get("threshold")), c.get("unit") or "",
             _fmt(c.get("percent_of_baseline")), (c.get("detail") or "")[:110]] for c in report.get("checks", [])]
    print_table(title, ["check", "status", "value", "threshold", "unit", "% base", "detail"], rows)
    print_verdict(report)
    for note in report.get("notes", []):
        click.secho(f"note: {note}", fg="yellow", err=True)


def print_verdict(report: dict[str, Any]) -> None:
    """The last lines: which digest passed or failed, and whether the GPUs were this run's alone."""
    from imagesmith.model import policy
    from imagesmith.stages import verify

    passed = verify.VerifyOutcome(report).ok
    digests = (report.get("image") or {}).get("digests", [])
    for digest in digests:
        click.echo(f"verified {digest}" if passed else f"FAILED verification: {digest}")
    sharing = policy.sharing_line(report)
    if sharing:
        click.secho(sharing, fg="yellow" if "not exclusive" in sharing else None)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# -- doctor / report ----------------------------------------------------------------------------


@cli.command("doctor")
@click.option("--matrix", "-m", "matrix_file", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Check the host against this matrix (default: ./matrix.yaml when there is one).")
@click.option("--release", is_flag=True, help="This host also publishes: a missing registry login is a failure, not a warning.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON (schema imagesmith.doctor/1).")
@ALLOW_ROOT_OPTION
@CREDENTIALS_OPTION
@click.pass_context
def doctor_cmd(ctx: click.Context, matrix_file: Path | None, release: bool, as_json: bool, allow_roots: tuple[Path, ...],
               credentials_file: Path | None) -> None:
    """Can this host build and verify? Docker engine, NVIDIA runtime/CDI, GPUs,
    driver against the matrix's CUDA versions, free disk, registry login.

    Every problem comes with the command that fixes it. Exit 0: ready; 1: not ready."""
    from imagesmith.stages import doctor

    if matrix_file is not None and not matrix_file.is_file():
        raise UserError(f"{matrix_file}: no such file")
    results = doctor.diagnose(matrix=matrix_file, publish=release, allowed_roots=allow_roots, credentials_file=credentials_file)
    if as_json:
        click.echo(json.dumps(doctor.to_json(results), indent=2))
    else:
        print_table("imagesmith doctor", ["check", "status", "detail"], doctor.table_rows(results))
        fixes = doctor.fix_lines(results)
        if fixes:
            click.echo("to fix:\n" + "\n".join(fixes))
        click.secho(doctor.verdict(results), fg="green" if doctor.ready(results) else "red", bold=True)
    ctx.exit(doctor.exit_code(results))


@cli.command("report")
@click.argument("report_file", metavar="REPORT.json", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "junit", "html", "prom"]), default="md", show_default=True,
              help="md: a summary for CI job pages; junit: one testcase per target x check; html: a page with charts; "
                   "prom: Prometheus text exposition format (docs/metrics.md).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (atomically); default: standard output.")
@click.option("--hostname", default=None, help="prom: the Hostname label (the host the verification ran on); default $NODE_NAME, else this host's name.")
def report_cmd(report_file: Path, fmt: str, out: Path | None, hostname: str | None) -> None:
    """Render a build, verify, run or fleet report (report.json, fleet-report.json) for people and CI."""
    from imagesmith import report
    from imagesmith.model import loader
    from imagesmith.report.parse import log_tail_in
    from imagesmith.stages.fleet import render as fleet_render
    from imagesmith.stages.fleet import report as fleet_report

    raw = loader.load_json_any(report_file, fix="give a report.json, verify.json, run-report.json or fleet-report.json that imagesmith wrote")
    if raw.get("schema") == fleet_report.SCHEMA:  # imagesmith.fleet-report/1: one row per class
        if fmt == "prom":
            raise UserError(f"{report_file}: --format prom exports verify, run and build reports; a fleet run's metrics come "
                            "from imagesmith fleet verify --metrics FILE.prom")
        fleet = fleet_report.parse(raw, str(report_file))
        _emit(fleet_render.render(fleet, fmt), out, f"{fmt} fleet report of {len(fleet.cells)} cells", fleet.ok)
        return
    run = report.parse(raw, str(report_file), log_tail_in(report_file.parent))
    if fmt == "prom":
        from imagesmith.stages import metrics

        text = metrics.exposition(metrics.run_metrics(run, hostname or metrics.hostname()).registry)
        _emit(text, out, f"Prometheus metrics of {sum(t.verify is not None for t in run.targets)} verified targets", run.ok)
        return
    _emit(report.render(run, fmt), out, f"{fmt} report of {len(run.targets)} targets", run.ok)


def _emit(text: str, out: Path | None, what: str, ok: bool) -> None:
    """A rendering to standard output, or atomically to ``out`` with one line saying what was written."""
    from imagesmith.atomic import write_text

    if out is None:
        click.echo(text, nl=False)
        return
    write_text(out, text)
    click.echo(f"{out}: {what} ({'ok' if ok else 'with failures'})", err=True)


cli.add_command(fleet_group)


# -- entry point --------------------------------------------------------------------------------


def _crash_log() -> Path:
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "imagesmith"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    return folder / f"crash-{dt.datetime.now():%Y%m%d-%H%M%S}.log"


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: user errors exit 1 with one message; bugs exit 3.
    SIGTERM is handled like Ctrl-C: builds stop, containers are removed."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="imagesmith", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        click.echo("interrupted: work in progress stopped; finished targets are cached, run again to resume", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ImagesmithError as exc:
        click.secho(f"error: {exc}" if "\n" not in str(exc) else str(exc), fg="red", err=True)
        sys.exit(exc.exit_code)
    except Exception:  # a bug: keep the traceback, say where
        log = _crash_log()
        log.write_text(traceback.format_exc())
        click.secho(f"imagesmith hit a bug: {sys.exc_info()[1]!r}; traceback in {log}", fg="red", err=True)
        sys.exit(3)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
