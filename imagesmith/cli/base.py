"""``imagesmith base ...``: base images."""

from __future__ import annotations

import click


@click.group("base")
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
    from imagesmith.edges.runcontext import RunContext
    from imagesmith.stages.tools import bootstrap

    click.echo(f"debootstrap {os_key}{' ' + arch if arch else ''} from {mirror} ...", err=True)
    ref, image_id = bootstrap.bootstrap(RunContext().engine, os_key, tag, mirror, arch=arch)
    click.echo(f"{ref} {image_id}")

