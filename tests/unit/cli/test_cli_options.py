"""cli.options: the release option stack declared once for build and publish, and the typed values a command takes
in place of an option stack (gathered)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from imagesmith.cli import cli
from imagesmith.cli.options import ReleaseArgs, gathered, release_options
from imagesmith.cli.verify import RUN_OPTIONS, run_options

STACK = ["credentials_file", "registry_ca", "signing_key", "trust_policy", "with_evidence", "gate_fleet", "fleet_reports", "fleet_runs", "fleet_since", "allow_cpu"]


def names(command: str) -> list[str]:
    return [str(p.name) for p in cli.commands[command].params]


def test_build_and_publish_declare_one_release_stack_in_one_order() -> None:
    build, publish = names("build"), names("publish")
    assert [n for n in build if n in STACK] == [n for n in publish if n in STACK] == STACK
    assert "verifier_key" in build and "verifier_key" not in publish
    assert build.index("signing_key") < build.index("verifier_key") < build.index("trust_policy")


def test_a_command_takes_the_stack_as_one_release_args(tmp_path: Path) -> None:
    seen: list[Any] = []

    @click.command()
    @click.option("--first")
    @release_options()
    @click.option("--last", is_flag=True)
    def command(first: str | None, release_args: ReleaseArgs, last: bool) -> None:
        seen.append((first, release_args, last))

    ca = tmp_path / "ca.crt"
    ca.write_text("")
    done = CliRunner().invoke(command, ["--first", "x", "--registry-ca", str(ca), "--no-evidence", "--allow-cpu-verification", "--last"])
    assert done.exit_code == 0, done.output
    assert seen == [("x", ReleaseArgs(registry_ca=ca, with_evidence=False, allow_cpu=True), True)]
    assert [p.name for p in command.params] == ["first", *STACK, "last"]


def test_gathered_hands_the_named_parameters_over_as_one_value() -> None:
    @click.command()
    @gathered("pair", lambda a, b: (a, b), ["a", "b"])
    @click.option("--a")
    @click.option("--b")
    @click.option("--c")
    def command(pair: tuple[str, str], c: str) -> None:
        click.echo(f"{pair} {c}")

    assert CliRunner().invoke(command, ["--a", "1", "--b", "2", "--c", "3"]).output == "('1', '2') 3\n"


def test_verify_gets_its_run_options_as_verify_options() -> None:
    given: dict[str, Any] = {n: None for n in RUN_OPTIONS} | {"tier": "standard", "only": "versions, gpu.devices,", "skip": "",
                                                               "gpu_runtime": "cdi"}
    options = run_options(**given)
    assert options.tier == "standard" and options.only == ("versions", "gpu.devices") and options.skip == ()
    assert options.gpu_runtime == "cdi" and "gpu_runtime" in names("verify")


def test_verify_parses_image_once_into_the_job_and_refuses_text_that_is_no_reference(monkeypatch: Any) -> None:
    from imagesmith.errors import UserError
    from imagesmith.model.ref import ImageRef
    from imagesmith.pipeline import verify as use_case

    jobs: list[Any] = []
    monkeypatch.setattr(use_case, "run_verify", lambda context, job, show: jobs.append((context.store, job)))
    done = CliRunner().invoke(cli, ["verify", "Harbor.example/ML/x:1", "--gpus", "none"])
    assert isinstance(done.exception, UserError) and "'Harbor.example/ML/x:1' is not an image reference" in str(done.exception)
    assert jobs == []  # refused before the use case, no engine asked
    done = CliRunner().invoke(cli, ["verify", "127.0.0.1:5000/ml/x:v1", "--gpus", "none"])
    assert done.exit_code == 0, done.output
    [(store, job)] = jobs
    assert job.image == ImageRef("127.0.0.1:5000", "ml/x", "v1") and str(job.image) == "127.0.0.1:5000/ml/x:v1"
    assert store.declared.release == "127.0.0.1:5000"  # the store is declared for the host the reference names
