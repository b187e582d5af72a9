"""The options several commands share, declared once, and the typed values a command takes in place of an option
stack (:func:`gathered`): ``build`` and ``publish`` take the release stack as one :class:`ReleaseArgs`."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar, cast

import click

from imagesmith.cli.common import load_signing_key, load_trust_policy, load_verifier_key, vulnerability_gate
from imagesmith.cli.fleet import floating_gate, gate_options

if TYPE_CHECKING:
    from imagesmith.edges.credentials import CredentialStore
    from imagesmith.model.matrix import Matrix
    from imagesmith.pipeline import ReleaseOptions

F = TypeVar("F", bound=Callable[..., Any])

MATRIX_OPTION = click.option("--matrix", "-m", "matrix_file", default="matrix.yaml", show_default=True,
                             type=click.Path(dir_okay=False, path_type=Path), help="The matrix file.")
ALLOW_ROOT_OPTION = click.option(
    "--allow-root", "allow_roots", multiple=True, envvar="IMAGESMITH_ALLOW_ROOT",
    type=click.Path(file_okay=False, path_type=Path),
    help="A folder outside the matrix's own that paths in the matrix (requirements, ca_bundle, template, "
         "wheel folders, credential files) may lead into, after symlinks; repeatable "
         "(IMAGESMITH_ALLOW_ROOT: folders separated by ':').")
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


def gathered(name: str, make: Callable[..., Any], keys: Sequence[str]) -> Callable[[F], F]:
    """The command's click parameters ``keys`` handed to it as one typed value ``name``, made by ``make(**those)``;
    the command takes ``name`` in their place. It declares no option, so where it stands changes no help text."""
    def decorate(command: F) -> F:
        @functools.wraps(command)  # shares the options declared so far (click's __click_params__) with the command
        def with_value(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = make(**{key: kwargs.pop(key) for key in keys})
            return command(*args, **kwargs)
        return cast(F, with_value)
    return decorate


@dataclass(frozen=True)
class ReleaseArgs:
    """The release option stack of ``build`` and ``publish`` (:func:`release_options`): the files it names, the flags it sets."""

    credentials_file: Path | None = None
    registry_ca: Path | None = None
    signing_key: Path | None = None
    trust_policy: Path | None = None
    with_evidence: bool = True
    gate_fleet: Path | None = None
    fleet_reports: tuple[Path, ...] = ()
    fleet_runs: tuple[str, ...] = ()
    fleet_since: str | None = None
    allow_cpu: bool = False
    verifier_key: Path | None = None  # build only: signs each verification the build runs

    def options(self, store: CredentialStore, sign: bool, matrix: Matrix | None, **more: Any) -> ReleaseOptions:
        """The pipeline's release options: the signing key when ``sign`` (a warning without one), the trust policy,
        the fleet gate, ``matrix``'s vulnerability gate when a matrix is given, the verifier key; ``more``: the rest."""
        from imagesmith import pipeline

        key = load_signing_key(self.signing_key) if sign else None
        trusted = load_trust_policy(self.trust_policy)
        verifier = load_verifier_key(self.verifier_key)
        if trusted is not None:
            from imagesmith.stages.evidence import trust

            trust.check_roles(trusted, key.public if key else None, verifier.public if verifier else None)
        return pipeline.ReleaseOptions(store, self.registry_ca, key, self.with_evidence,
                                       floating_gate(self.gate_fleet, self.fleet_reports, trusted, self.fleet_runs, self.fleet_since),
                                       self.allow_cpu, vulnerabilities=vulnerability_gate(matrix) if matrix is not None else None,
                                       trust=trusted, verifier_key=verifier, **more)


def release_options(verifier_key: bool = False) -> Callable[[F], F]:
    """The release option stack, declared once for ``build`` (with --verifier-key) and ``publish``: --credentials,
    --registry-ca, --signing-key, --trust-policy, --evidence/--no-evidence, --fleet, --fleet-report, --fleet-run,
    --fleet-run-since, --allow-cpu-verification, given to the command as one :class:`ReleaseArgs`, ``release_args``."""
    stack: list[Callable[[Any], Any]] = [CREDENTIALS_OPTION, REGISTRY_CA_OPTION, SIGNING_KEY_OPTION,
                                         *([VERIFIER_KEY_OPTION] if verifier_key else []), TRUST_POLICY_OPTION,
                                         EVIDENCE_OPTION, gate_options, ALLOW_CPU_OPTION]
    keys = [f.name for f in dataclasses.fields(ReleaseArgs) if verifier_key or f.name != "verifier_key"]

    def decorate(command: F) -> F:
        for option in reversed(stack):  # as if written one above the other, in this order
            command = option(command)
        return gathered("release_args", ReleaseArgs, keys)(command)
    return decorate
