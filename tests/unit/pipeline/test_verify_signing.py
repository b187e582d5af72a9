"""``verify IMAGE --verifier-key``: a signed statement is about a digest, lies beside --json, and covers only a
fresh run (the integration test test_trust_fanout signs one and reads it back with the trust policy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagesmith.cli import cli
from imagesmith.errors import UsageError
from tests.doubles import verify_report


@pytest.mark.parametrize("args, why", [
    (["reg.test/ml/pytorch:latest", "--json", "v.json"], "is not an image pinned by digest"),
    (["--local", "--json", "v.json"], "give IMAGE as REPOSITORY@sha256:..."),
    ([f"reg.test/ml/pytorch@sha256:{'a' * 64}"], "give --json FILE"),
    ([f"reg.test/ml/pytorch@sha256:{'a' * 64}", "--json", "v.json", "--reuse-evidence", "--key", "{pub}"],
     "--reuse-evidence runs nothing"),
])
def test_verify_one_image_signs_only_a_fresh_run_of_a_digest_beside_its_json(tmp_path: Path, args: list[str], why: str) -> None:
    from tests.unit.trustkeys import key_files

    key, pub = key_files(tmp_path, "verifier")
    done = CliRunner().invoke(cli, ["verify", *[a.replace("{pub}", str(pub)) for a in args], "--verifier-key", str(key)])
    assert isinstance(done.exception, UsageError) and done.exception.exit_code == 2, done.output  # exit 2 from main()
    assert why in str(done.exception)
    assert not (tmp_path / "v.dsse.json").exists()


def test_the_statement_of_verify_json_is_verify_dsse_json() -> None:
    from imagesmith.pipeline.verify import statement_path

    assert statement_path(Path("out/verify.json")) == Path("out/verify.dsse.json")
    assert statement_path(Path("report-0.json")) == Path("report-0.dsse.json")


BLOCK = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cryptography", "securesystemslib"):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Block())
sys.argv = ["imagesmith", *sys.argv[1:]]
runpy.run_module("imagesmith.cli", run_name="__main__")
"""


def test_verify_local_needs_no_signing_stack(tmp_path: Path) -> None:
    """A GPU host may lack cryptography (the lent H200 does): verify --local without --verifier-key never imports it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BLOCK, "verify", "--local", "--only", "versions.python", "-q",
                           "--json", str(tmp_path / "v.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "v.json").is_file() and "cryptography" not in done.stderr


def test_a_report_the_verifier_will_not_sign_leaves_no_statement_and_says_why(tmp_path: Path) -> None:
    from imagesmith import pipeline
    from imagesmith.stages.evidence import trust
    from tests.unit.trustkeys import verifier

    key, _ = verifier(tmp_path / "keys")
    path = tmp_path / "verify.dsse.json"
    said: list[str] = []
    # a check's value the parse reads as a number (a GPU count of Infinity it refuses: that report is never read)
    bad = {"schema": "imagesmith.verify-report/1", "checks": [{"id": "versions.torch", "status": "pass", "value": float("inf")}]}
    subject = trust.Subject(trust.IMAGE_ID_SUBJECT, "sha256:" + "1" * 64)
    got = pipeline.sign_outcome_or_say(lambda: pipeline.sign_report(None, verify_report(bad), subject, key, path, said.append),  # type: ignore[arg-type]
                                       said.append)
    assert got is None and not path.exists()
    assert said == [f"the verify report:1:{json.dumps(bad).index('Infinity') + 1}: Infinity is not JSON (NaN and Infinity are not numbers JSON allows); nothing was "
                    "signed: the image under test wrote a report imagesmith does not believe"]
