"""``imagesmith publish``: tag and release what passed verification."""

from __future__ import annotations

from pathlib import Path

import click

from imagesmith.cli.common import credential_store, load_matrix
from imagesmith.cli.options import ALLOW_ROOT_OPTION, ReleaseArgs, release_options
from imagesmith.cli.release import finish_release
from imagesmith.errors import UsageError, UserError
from imagesmith.model import matrix as matrix_mod


@click.command("publish")
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
@release_options()
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@ALLOW_ROOT_OPTION
def publish_cmd(matrix_file: Path | None, out: Path, run_report: Path | None, date: str | None,
                registry_repo: str | None, stage_repo: str | None, release_args: ReleaseArgs, quiet: bool,
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
    if release_args.trust_policy is None:
        raise UsageError(f"publish: {pipeline.NEEDS_TRUST}")
    declared = _declared_release(registry_repo, m)
    store = credential_store(declared, stage_repo, release_args.credentials_file)
    release = release_args.options(store, release_args.with_evidence, m,
                                   release_repository=registry_repo if registry_repo and "/" in registry_repo else None)
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

