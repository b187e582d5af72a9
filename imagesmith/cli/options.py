"""The options several commands share, declared once."""

from __future__ import annotations

from pathlib import Path

import click

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

