"""``imagesmith verify``: one image, this host (--local), or every image a build made (--build-report);
and the verification tables ``build --verify`` prints too."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import click

from imagesmith.cli.common import credential_store, image_host, load_matrix, load_verifier_key
from imagesmith.cli.evidence import print_evidence
from imagesmith.cli.options import ALLOW_CPU_OPTION, CREDENTIALS_OPTION, PUBLIC_KEY_OPTION, VERIFIER_KEY_OPTION, gathered
from imagesmith.errors import UsageError, UserError
from imagesmith.inert import inert
from imagesmith.model.gpupath import RUNTIMES
from imagesmith.model.grammar import GPU_LIST
from imagesmith.table import print_table

if TYPE_CHECKING:
    from imagesmith.edges.credentials import CredentialStore
    from imagesmith.edges.runcontext import RunContext
    from imagesmith.edges.signing import Key
    from imagesmith.stages.verify import VerifyOptions, VerifyOutcome


def _expect_option(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, str]:
    """--expect parsed at once: a bad item is bad usage (exit 2) before any container starts."""
    from imagesmith.stages import verify

    try:
        return verify.parse_expect(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc).removeprefix("--expect: "), ctx, param) from None


def _gpus_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    value = value.replace(" ", "")
    if not GPU_LIST.match(value):
        raise click.BadParameter(f"{value!r}: write all, none, GPU indexes (0,1) or UUIDs (GPU-...)", ctx, param)
    return value


# verify's own typed values: the run's options (the payload's VerifyOptions), the attached evidence, the metrics' targets

RUN_OPTIONS = ("tier", "gpus", "gpu_runtime", "expect", "require_non_root", "allow_shared_gpu", "through_entrypoint", "login_shell", "require_gpu",
               "allow_cpu", "timeout_s", "shm_size", "memory", "cpus", "soak_minutes", "only", "skip")


def run_options(only: str, skip: str, **given: Any) -> VerifyOptions:
    """The options of the run itself (RUN_OPTIONS) as the payload's VerifyOptions; --only/--skip: ids, comma-separated."""
    from imagesmith.stages import verify

    return verify.VerifyOptions(**given, only=tuple(filter(None, (s.strip() for s in only.split(",")))),
                                skip=tuple(filter(None, (s.strip() for s in skip.split(",")))))


@dataclass(frozen=True)
class EvidenceArgs:
    """--key, --reuse-evidence, --max-age-from: how IMAGE's attached evidence is checked, and whether it may stand for a run."""

    public_keys: tuple[Path, ...] = ()
    reuse_evidence: bool = False
    age_matrix: Path | None = None


@dataclass(frozen=True)
class MetricsArgs:
    """--metrics, --pushgateway: where the figures go besides the report."""

    metrics_file: Path | None = None
    pushgateway: str | None = None


@click.command("verify")
@gathered("options", run_options, RUN_OPTIONS)
@gathered("evidence", EvidenceArgs, [f.name for f in fields(EvidenceArgs)])
@gathered("metrics", MetricsArgs, [f.name for f in fields(MetricsArgs)])
@click.argument("image", required=False)
@click.option("--tier", type=click.Choice(["quick", "standard", "soak"]), default="quick", show_default=True)
@click.option("--gpus", default="all", show_default=True, callback=_gpus_option,
              help="all (every GPU, at least one), none (CPU mode), or a list such as 0,1 (exactly those); "
                   "fewer visible GPUs than asked fails gpu.devices.")
@click.option("--gpu-runtime", type=click.Choice(RUNTIMES), default="auto", show_default=True,
              help="How the GPUs reach the container: nvidia (the engine's --gpus), cdi (the CDI specs in /etc/cdi or "
                   "/var/run/cdi: nvidia.com/gpu=all, =0, =GPU-...; passed to an engine with CDI, applied by imagesmith "
                   "on one without), or auto: --gpus where the engine lists an nvidia runtime, else CDI where a spec on "
                   "this host offers the GPUs, else --gpus tried (the report's gpu_path says which ran; docs/verification.md).")
@click.option("--expect", default="", callback=_expect_option,
              help="Versions to expect instead of the image's labels, comma-separated NAME=VERSION: torch=2.9.1,cuda=12.8 "
                   "(cuda=cpu: a CPU-only torch), also cudnn, nccl, python, os, torchvision, ... or pip:NAME=VERSION.")
@click.option("--require-non-root", is_flag=True,
              help="Fail (not warn) when a foreign image runs as root (images imagesmith built always fail as root).")
@click.option("--allow-shared-gpu", is_flag=True,
              help="Judge throughput checks even when another process uses the GPU: they then measure this tenant's "
                   "share (the report says so). Without it they end inconclusive on a shared GPU. Either way a run "
                   "that was not exclusive earns no floating tag.")
@click.option("--through-entrypoint/--bypass-entrypoint", "through_entrypoint", default=None,
              help="Run the payload through the image's ENTRYPOINT (as its arguments, as `docker run IMAGE python3 ...` "
                   "does: an /entry.sh that activates a venv or conda, then exec \"$@\"), or python3 in its place. Default: "
                   "through it where its start (entrypoint.start: the ENTRYPOINT given a no-op command) ran that command "
                   "and exited 0, else in its place, the verdict naming the ENTRYPOINT it bypassed and why.")
@click.option("--login-shell", is_flag=True,
              help="Run the payload under the image's login shell (bash -l, or sh -l without bash), so what /etc/profile, "
                   "/etc/profile.d/*.sh and the user's profile put on PATH counts, as for users who start `bash -l`.")
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
def verify_cmd(image: str | None, options: VerifyOptions, json_out: Path | None, local: bool, python_exe: str | None,
               no_pull: bool, build_reports: tuple[Path, ...], stage_repo: str | None, credentials_file: Path | None,
               evidence: EvidenceArgs, verifier_key: Path | None, metrics: MetricsArgs, quiet: bool) -> None:
    """Verify IMAGE (or, with --local, this host): versions, driver, GPU kernels,
    numerics, throughput against baselines, leaks, NCCL; exit 0 only if every
    required check passed."""
    from imagesmith.model import policy
    from imagesmith.stages import verify

    if [bool(image), local, bool(build_reports)].count(True) != 1:
        raise UserError("give one of: an IMAGE to verify, --local (this host), or --build-report (every image a build made)")
    if options.require_gpu and options.allow_cpu:
        raise UsageError("--require-gpu and --allow-cpu-verification contradict each other: give one")
    if options.gpu_runtime != "auto" and (local or options.gpus == "none"):
        why = "--local starts no container" if local else "--gpus none asks for no GPU"
        raise UsageError(f"--gpu-runtime {options.gpu_runtime} says how GPUs reach a container; {why}: leave it out")
    if local and (options.login_shell or options.through_entrypoint is not None):
        flag = "--login-shell" if options.login_shell else "--through-entrypoint" if options.through_entrypoint else "--bypass-entrypoint"
        raise UsageError(f"{flag} says how the payload starts in an image; --local runs this host's Python (--python): leave it out")
    verify.request_for(options)  # bad --only/--skip: exit 2 before any container starts
    if local:
        python_exe = verify.local_python(python_exe)  # a --python that is not one: exit 1 before anything runs
    export = _metrics_export(metrics.metrics_file, metrics.pushgateway, quiet,  # a bad --metrics/--pushgateway: before anything runs
                             local_series(metrics.metrics_file, python_exe) if local else None)
    if stage_repo and not build_reports:
        raise UsageError("--stage declares the staging registry of --build-report; give --build-report too")
    from imagesmith.edges.runcontext import RunContext

    signer = load_verifier_key(verifier_key)
    if signer is not None and not build_reports:
        _check_signable(image, local, json_out, evidence.reuse_evidence)
    if build_reports:
        _verify_build(build_reports, options, json_out, quiet, credential_store(None, stage_repo, credentials_file), export,
                      signer)
        return
    if evidence.reuse_evidence and not evidence.public_keys:
        raise UserError("--reuse-evidence trusts only a signed attestation: give the signer's public key with --key")
    max_age = load_matrix(evidence.age_matrix).vulnerabilities.max_age_days if evidence.age_matrix else None
    store = credential_store(image_host(image), None, credentials_file) if image and not local else None
    context = RunContext() if store is None else RunContext(store)  # the engine and the registry clients of this run
    from imagesmith.runstate import Tracked

    reused = _attached_evidence(image, evidence.public_keys, store, options, evidence.reuse_evidence, quiet, max_age) if image and store else None
    if reused is not None:  # the same --json report, the same verdict, as a fresh run judged by that evidence
        with Tracked(json_out, verify.running_report(image, options.tier)) as tracked:
            tracked.complete(reused)
        if not quiet:
            print_verify(reused, json_out)
        return

    with Tracked(json_out, verify.running_report(image, options.tier)) as tracked:  # --json FILE says running at once
        if local:
            outcome = verify.run_local(options, python_exe, progress=None if quiet else (lambda line: click.echo(line, err=True)))
        else:
            outcome = _verify_image(context, image or "", options, no_pull, store is not None, quiet)
        tracked.complete(outcome.report)
    if not quiet:
        print_verify(outcome.report, json_out)
    if signer is not None and json_out is not None:
        signed = _sign_image_verification(context, image or "", outcome.report, signer, json_out)
        if not quiet:
            click.echo(f"signed statement: {signed}", err=True)
    export(outcome.report, str(json_out or "the verify report"))
    if not outcome.ok:
        raise UserError(f"verification failed: {verify_failures(outcome.report)}")
    if policy.evidence(outcome.report).exclusive is False and not options.allow_shared_gpu:
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


def _sign_image_verification(context: RunContext, image: str, report: Mapping[str, Any], signer: Key, json_out: Path) -> Path:
    """The report of ``verify IMAGE`` and the inventory measured inside that image, signed as a statement about
    IMAGE's digest (the subject is the REPOSITORY@sha256 the operator named, which the payload ran on)."""
    from imagesmith import pipeline
    from imagesmith.stages import trust
    from imagesmith.stages.fleet.config import parse_ref

    ref = parse_ref(image)
    return pipeline.sign_report(context.engine, report, trust.Subject(ref.name, ref.sha256), signer, statement_path(json_out),
                                lambda line: click.secho(inert(f"note: {line}"), fg="yellow", err=True))


def _attached_evidence(image: str, public_keys: tuple[Path, ...], store: CredentialStore, options: Any,
                       reuse: bool, quiet: bool, max_age_days: int | None = None) -> dict[str, Any] | None:
    """Print what is attached to IMAGE's digest; with --reuse-evidence, the verify report the pipeline found a
    signed attestation standing for (pipeline.attached_evidence decides), else None."""
    from imagesmith import pipeline

    attached = pipeline.attached_evidence(image, public_keys, store, options, reuse, max_age_days)
    if attached.note:
        click.secho(inert(f"note: {attached.note}"), fg="yellow", err=True)
    if attached.found is None:
        return None
    if not quiet:
        print_evidence(attached.found)
    for reason in attached.why_not:
        click.echo(inert(f"not reused: {reason}; running again", one_line=True), err=True)
    if attached.reused is not None:
        found = attached.found
        click.echo(f"reusing the signed verification {attached.match.digest} of {found.name}@{found.digest} "
                   f"({options.tier} tier, {attached.gpu_model or 'CPU mode'}): not run again", err=True)
    return attached.reused


def _verify_image(context: RunContext, image: str, options: Any, no_pull: bool, declared: bool, quiet: bool) -> Any:
    from imagesmith.model.ref import DOCKER_HUB
    from imagesmith.stages import verify

    host = image_host(image)
    creds = context.store.for_host(host) if declared else None
    progress = None if quiet else (lambda line: click.echo(inert(line), err=True))
    index_reader = context.registry(host, creds) if host != DOCKER_HUB else None  # which platform image of an index ran
    return verify.verify_image(context.engine, image, options, pull=not no_pull, progress=progress,
                               auth=creds.auth_config() if creds else None, registry=index_reader)


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
        print_outcomes(done.outcomes)
        click.echo(f"run report: {done.run_report}", err=True)
    export(Path(done.run_report), str(done.run_report))
    if done.failed:
        raise UserError(f"verification failed for {len(done.failed)} of {len(done.outcomes)} images: {', '.join(done.failed)}")


def local_series(metrics_file: Path | None, python: str | None) -> str:
    """The ``digest`` label of a ``verify --local`` run (no image, no digest): ``local:`` and the --metrics file's name, so
    two jobs writing two files into one textfile folder never export the same series; with only --pushgateway, ``local:``
    and the Python it ran (the group of that Python on this host)."""
    return "local:" + (metrics_file.name if metrics_file is not None else str(python or sys.executable))[:120]


def _metrics_export(metrics_file: Path | None, pushgateway: str | None, quiet: bool,
                    local: str | None = None) -> Callable[[Any, str], None]:
    """verify --metrics/--pushgateway, checked now; the function exports a report (raw JSON or its file; its name);
    ``local``: the digest label of a --local run."""
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
        metrics.export_run(run, metrics_file, pushgateway, local=local,
                           say=(lambda line: None) if quiet else (lambda line: click.echo(inert(line), err=True)))
    return export


def print_outcomes(outcomes: Mapping[str, VerifyOutcome]) -> None:
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


def verify_failures(report: dict[str, Any]) -> str:
    """Which required checks failed; else why the report could not be judged at all."""
    from imagesmith.model import policy
    from imagesmith.stages import verify

    return ", ".join(policy.failed_required(report)) or policy.verdict(report, verify.declared_checks()).why or "no report"


DETAIL_WIDTH = 110  # characters of a check's detail shown in the table


def print_verify(report: dict[str, Any], json_out: Path | None) -> None:
    env = report.get("environment") or {}
    image = (report.get("image") or {}).get("ref", "this host")
    s = report.get("summary", {})
    engine: dict[str, Any] = report["engine"] if isinstance(report.get("engine"), dict) else {}
    on = f" on {engine.get('name')} {engine.get('version')}" if engine.get("name") else ""
    title = (f"verify {image}{on} ({report.get('tier')}), {mode_line(report)}: torch {env.get('torch')} cuda {env.get('cuda')} "
             f"driver {env.get('driver')} - {s.get('pass', 0)} pass, {s.get('warn', 0)} warn, {s.get('fail', 0)} fail, "
             f"{s.get('skip', 0)} skip, {s.get('inconclusive', 0)} inconclusive in {report.get('wall_s', 0):.1f}s"
             + (f"; report {json_out}" if json_out else ""))
    rows = [[c["id"], c["status"], _fmt(c.get("value")), _fmt(c.get("threshold")), c.get("unit") or "",
             _fmt(c.get("percent_of_baseline")), (c.get("detail") or "")[:DETAIL_WIDTH]] for c in report.get("checks", [])]
    print_table(title, ["check", "status", "value", "threshold", "unit", "% base", "detail"], rows)
    for c in report.get("checks", []):  # a failure's reason and fix in full: the table cuts them
        if c.get("status") == "fail" and len(str(c.get("detail") or "")) > DETAIL_WIDTH:
            click.secho(inert(f"{c['id']}: {c['detail']}"), fg="red", err=True)
    print_verdict(report)
    for note in report.get("notes", []):
        click.secho(inert(f"note: {note}"), fg="yellow", err=True)


def print_verdict(report: dict[str, Any]) -> None:
    """The last lines: which digest passed or failed, and whether the GPUs were this run's alone."""
    from imagesmith.model import policy
    from imagesmith.stages import verify

    passed = verify.VerifyOutcome(report).ok
    shared = policy.evidence(report).exclusive is False and (report.get("sharing") or {}).get("allowed") is not True
    word = "FAILED verification" if not passed else "NOT VERIFIED (the GPU was shared)" if shared else "verified"
    digests = (report.get("image") or {}).get("digests", [])
    for digest in digests:
        click.echo(inert(f"{word}: {digest}" if word != "verified" else f"verified {digest}", one_line=True))
    sharing = policy.sharing_line(report) if policy.evidence(report).mode == "gpu" else ""  # CPU mode: no GPU to share
    if sharing:
        click.secho(inert(sharing, one_line=True), fg="yellow" if "not exclusive" in sharing else None)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)

