"""The command line: the click group and its commands, one module per command (pre-commit's ``commands/``).
A command parses, calls the pipeline or a stage, prints, and exits; ``main`` turns errors into exit codes.

Exit codes: 0 success; 1 a user error or a failed check (one clear message);
2 bad usage (click); 3 a bug (traceback written to a log file).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Sequence

import click

from imagesmith import __version__
from imagesmith.cli.base import base_group
from imagesmith.cli.build import build_cmd
from imagesmith.cli.compat import compat_cmd
from imagesmith.cli.doctor import doctor_cmd
from imagesmith.cli.evidence import evidence_cmd
from imagesmith.cli.fleet import fleet_group
from imagesmith.cli.matrix import matrix_group
from imagesmith.cli.plan import plan_cmd
from imagesmith.cli.publish import publish_cmd
from imagesmith.cli.render import render_cmd
from imagesmith.cli.report import report_cmd
from imagesmith.cli.verify import verify_cmd
from imagesmith.cli.vulns import vulns_group
from imagesmith.errors import ImagesmithError
from imagesmith.inert import inert


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagesmith")
def cli() -> None:
    """Matrix in, vetted PyTorch/CUDA images out: validate, plan, render,
    build, verify, tag and push."""


for command in (matrix_group, plan_cmd, render_cmd, compat_cmd, base_group, build_cmd, publish_cmd, verify_cmd, evidence_cmd,
                doctor_cmd, report_cmd, fleet_group, vulns_group):
    cli.add_command(command)


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
    except ImagesmithError as exc:  # its message quotes files other jobs wrote: control characters escaped
        text = inert(str(exc))
        click.secho(f"error: {text}" if "\n" not in text else text, fg="red", err=True)
        sys.exit(exc.exit_code)
    except Exception:  # a bug: keep the traceback, say where
        log = _crash_log()
        log.write_text(traceback.format_exc())
        click.secho(f"imagesmith hit a bug: {sys.exc_info()[1]!r}; traceback in {log}", fg="red", err=True)
        sys.exit(3)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
