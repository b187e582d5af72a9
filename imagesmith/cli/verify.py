"""``imagesmith verify``: one image, this host (--local), or every image a build made (--build-report). The command
parses its options, calls :func:`imagesmith.pipeline.verify.run_verify` and prints (:mod:`imagesmith.cli.verification`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from imagesmith.cli.common import credential_store, load_matrix, load_verifier_key
from imagesmith.cli.options import ALLOW_CPU_OPTION, CREDENTIALS_OPTION, PUBLIC_KEY_OPTION, VERIFIER_KEY_OPTION, gathered
from imagesmith.cli.verification import Printer
from imagesmith.errors import UsageError, UserError
from imagesmith.inert import inert
from imagesmith.model.gpupath import RUNTIMES
from imagesmith.model.grammar import GPU_LIST
from imagesmith.model.ref import ImageRef

if TYPE_CHECKING:
    from imagesmith.stages.verify.verify import VerifyOptions


def _expect_option(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, str]:
    """--expect parsed at once: a bad item is bad usage (exit 2) before any container starts."""
    from imagesmith.stages.verify import verify

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
    from imagesmith.stages.verify import verify

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
    """Verify IMAGE (or, with --local, this host): versions, driver, GPU kernels, numerics, throughput against
    baselines, leaks, NCCL; exit 0 only if every required check passed."""
    from imagesmith.edges.runcontext import RunContext
    from imagesmith.pipeline.verify import VerifyJob, local_series, metrics_export, run_verify
    from imagesmith.stages.verify import onhost, verify

    if [bool(image), local, bool(build_reports)].count(True) != 1:
        raise UserError("give one of: an IMAGE to verify, --local (this host), or --build-report (every image a build made)")
    _check_usage(options, local)
    verify.request_for(options)  # bad --only/--skip: exit 2 before any container starts
    if local:
        python_exe = onhost.local_python(python_exe)  # a --python that is not one: exit 1 before anything runs
    say = (lambda line: None) if quiet else (lambda line: click.echo(inert(line), err=True))
    export = metrics_export(metrics.metrics_file, metrics.pushgateway, say,  # a bad --metrics/--pushgateway: before anything runs
                            local_series(metrics.metrics_file, python_exe) if local else None)
    if stage_repo and not build_reports:
        raise UsageError("--stage declares the staging registry of --build-report; give --build-report too")
    signer = load_verifier_key(verifier_key)
    ref = (_signable(image, local, json_out, evidence.reuse_evidence) if signer is not None and not build_reports
           else ImageRef.parse(image) if image else None)  # IMAGE, parsed once: text that is no reference fails here
    if evidence.reuse_evidence and not evidence.public_keys and not build_reports:
        raise UserError("--reuse-evidence trusts only a signed attestation: give the signer's public key with --key")
    max_age = load_matrix(evidence.age_matrix).vulnerabilities.max_age_days if evidence.age_matrix and not build_reports else None
    store = (credential_store(None, stage_repo, credentials_file) if build_reports
             else credential_store(ref.registry, None, credentials_file) if ref else None)
    job = VerifyJob(options, ref, local, python_exe, build_reports, json_out, not no_pull, evidence.public_keys,
                    evidence.reuse_evidence, max_age, signer, export)
    run_verify(RunContext() if store is None else RunContext(store), job, Printer(quiet))


def _check_usage(options: VerifyOptions, local: bool) -> None:
    """Options that contradict each other, or the mode: bad usage (exit 2)."""
    if options.require_gpu and options.allow_cpu:
        raise UsageError("--require-gpu and --allow-cpu-verification contradict each other: give one")
    if options.gpu_runtime != "auto" and (local or options.gpus == "none"):
        why = "--local starts no container" if local else "--gpus none asks for no GPU"
        raise UsageError(f"--gpu-runtime {options.gpu_runtime} says how GPUs reach a container; {why}: leave it out")
    if local and (options.login_shell or options.through_entrypoint is not None):
        flag = "--login-shell" if options.login_shell else "--through-entrypoint" if options.through_entrypoint else "--bypass-entrypoint"
        raise UsageError(f"{flag} says how the payload starts in an image; --local runs this host's Python (--python): leave it out")


def _signable(image: str | None, local: bool, json_out: Path | None, reuse: bool) -> ImageRef:
    """``verify IMAGE --verifier-key``: IMAGE pinned by digest (the statement's subject), --json, a fresh run."""
    from imagesmith.model.fleet import parse_ref

    if local or not image:
        raise UsageError("--verifier-key signs a verification of an image's digest: give IMAGE as REPOSITORY@sha256:... "
                         "(or --build-report)")
    try:
        ref = parse_ref(image)
    except UserError as exc:
        raise UsageError(f"--verifier-key: {exc}") from None
    if json_out is None:
        raise UsageError("--verifier-key writes the signed statement beside the report: give --json FILE "
                         "(FILE.dsse.json is written next to it)")
    if reuse:
        raise UsageError("--verifier-key signs what this run measured; --reuse-evidence runs nothing: give one of them")
    return ref
