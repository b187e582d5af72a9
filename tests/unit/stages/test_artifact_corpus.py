"""Hostile artifacts through the real CLI (tests/corpus/artifacts.py makes them).

One corpus per loader: build.json, verify.json, release.json (and the ``fleet verify
--release`` list), run reports, build reports, fleet reports, fleet.yaml, the
``imagesmith report`` input, and CI emission. Every refusal is exit 1 with a first
line naming the file; nothing exits 3. Hostile text that is valid input reaches the
Markdown, HTML and JUnit outputs inert, and the GitLab document has exactly the
expected top-level keys with ``$`` escaped.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagesmith import cli
from imagesmith.edges import signing
from imagesmith.stages import artifacts
from imagesmith.stages.evidence import attestation, trust
from tests.conftest import LOCAL_ROOTS, ROOT
from tests.corpus import artifacts as corpus
from tests.unit.model.test_buildreport import record
from tests.unit.trustkeys import key_files, policy_file, verifier

FLEET = str(ROOT / "examples" / "fleet-local.yaml")


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        cli.main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(code: int, err: str, path: Path) -> None:
    assert code != 3, err
    if code == 2:  # click's own path checks (exists=True, dir_okay=False) answer first: a usage error naming the file
        assert f"'{path}'" in err and ("does not exist" in err or "is a directory" in err), err
        return
    assert code == 1, f"accepted: {err}"
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    first = lines[0] if lines else ""
    assert str(path) in first, f"the file is not named first: {first!r}"
    assert "Traceback" not in err and len(first) < 700, first


def _cases(schema: str, base: dict[str, Any], shapes: dict[str, tuple[str, Any]]) -> dict[str, corpus.Make]:
    return corpus.bytes_cases(schema) | corpus.shape_cases(base, shapes)


VERIFY = _cases("imagesmith.verify-report/1", corpus.verify_report(), corpus.VERIFY_SHAPES)
RELEASE = _cases("imagesmith.release/1", corpus.release(), corpus.RELEASE_SHAPES)
RUN = _cases("imagesmith.run-report/1", corpus.run_report(), corpus.RUN_SHAPES)
FLEET_REPORT = _cases("imagesmith.fleet-report/1", corpus.fleet_report(), corpus.FLEET_REPORT_SHAPES)
BUILD_REPORT = _cases("imagesmith.build-report/1", corpus.build_report(), {
    "targets-text": ("targets", "t"), "target-seconds-nan-like": ("targets.0.seconds", 1e308),
    "target-facts-list": ("targets.0.facts", [1]), "target-mismatches-objects": ("targets.0.mismatches", [{}])})
GOOD_BUILD = record(0).to_json()
BUILD = corpus.bytes_cases("imagesmith.build/1") | corpus.shape_cases(GOOD_BUILD, {
    "result-status-pwned": ("result.status", "pwned"), "result-size-1e308": ("result.size_bytes", 1e308),
    "result-image-id-bad": ("result.image_id", "sha256:../../x"), "target-id-path": ("target.id", "../../etc"),
    "target-list": ("target", []), "release-date-text": ("release.date", "tomorrow"),
    "staged-digest-list": ("staged", {"repository": "h.example.com/x", "tag": "t", "digest": ["x"]}),
    "floating-when-list": ("release.tags.floating", [{"tag": "x", "when": [1]}])})
FLEET_YAML = corpus.fleet_yaml_cases()


def test_the_corpora_are_large() -> None:
    sizes = {"build": len(BUILD), "verify": len(VERIFY), "release": len(RELEASE), "run": len(RUN), "fleet-report": len(FLEET_REPORT),
             "build-report": len(BUILD_REPORT), "fleet.yaml": len(FLEET_YAML)}
    assert all(n >= 20 for n in sizes.values()), sizes


def _out(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    return out


@pytest.mark.parametrize("case", sorted(BUILD))
def test_build_json(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(tmp_path)
    path = BUILD[case](out / "t", artifacts.BUILD_FILE)
    code, _, err = run(["verify", "--build-report", str(path), "-q"], capsys)
    refused(code, err, path)
    code, _, err = run(["publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "-q"], capsys)
    refused(code, err, path)


@pytest.mark.parametrize("case", sorted(VERIFY))
def test_verify_json(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    target = record(0).target.id
    artifacts.write_build(out / target / artifacts.BUILD_FILE, record(0))
    path = VERIFY[case](out / target, artifacts.VERIFY_FILE)
    code, _, err = run(["publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "-q"], capsys)
    refused(code, err, path)
    code, _, err = run(["report", str(path)], capsys)
    refused(code, err, path)


@pytest.mark.parametrize("case", sorted(RELEASE))
def test_release_list(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = RELEASE[case](_out(tmp_path), "release.json")
    code, _, err = run(["fleet", "verify", "--fleet", FLEET, "--release", str(path), "--out", str(tmp_path / "f"), "-q"], capsys)
    if case in ("folder", "symlink-dangling", "symlink-loop"):  # click's exists=True, dir_okay=False refuses these first (exit 2)
        assert code == 2 and "release" in err, err
        return
    refused(code, err, path)
    assert not (tmp_path / "f").exists() or not any((tmp_path / "f").iterdir()), "a job was written"


@pytest.mark.parametrize("case", sorted(RUN))
def test_run_report(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(tmp_path)
    path = RUN[case](out, "run-report.json")
    for fmt in ("md", "junit", "html"):
        code, stdout, err = run(["report", str(path), "--format", fmt], capsys)
        refused(code, err, path)
        assert stdout == ""
    artifacts.write_build(out / "x" / artifacts.BUILD_FILE, record(0))
    code, _, err = run(["publish", "--out", str(out), "--run-report", str(path), "--trust-policy", str(policy_file(tmp_path / "keys")), "-q"], capsys)
    refused(code, err, path)


@pytest.mark.parametrize("case", sorted(BUILD_REPORT))
def test_build_report(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = BUILD_REPORT[case](_out(tmp_path), "report.json")
    code, _, err = run(["verify", "--build-report", str(path), "-q"], capsys)
    refused(code, err, path)
    code, _, err = run(["report", str(path)], capsys)
    refused(code, err, path)


@pytest.mark.parametrize("case", sorted(FLEET_REPORT))
def test_fleet_report(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = FLEET_REPORT[case](_out(tmp_path), "fleet-report.json")
    code, _, err = run(["report", str(path), "--format", "md"], capsys)
    refused(code, err, path)


@pytest.mark.parametrize("case", sorted(FLEET_YAML))
def test_fleet_yaml(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = FLEET_YAML[case](_out(tmp_path), "fleet.yaml")
    code, _, err = run(["fleet", "validate", str(path)], capsys)
    if code == 2:  # click's exists=True, dir_okay=False answers first
        assert f"'{path}'" in err and "is a directory" in err, err
        return
    assert code == 1, err
    first = err.splitlines()[0]
    assert first.removeprefix("error: ").startswith((str(path), path.name)), first
    assert len(first) < 700, first


# -- valid input, hostile text: outputs stay inert --------------------------------------------------------

LIVE_MARKDOWN = [
    re.compile(r"(?<!\\)\]\("),  # [text](url) and ![alt](url)
    re.compile(r"(?<!\\)!(?<!\\)\["),  # an image
    re.compile(r"(?<!\\)<[a-zA-Z/!?]"),  # raw HTML or an <https://...> autolink (a backslash before it makes it text)
    re.compile(r"(?i)[a-z]://"),  # bare scheme://: GFM autolinks it
    re.compile(r"(?i)\bwww\."),  # bare www.
    re.compile(r"@[a-z0-9-]+\.[a-z]"),  # an e-mail address
    re.compile(r"^\[[^\]]*\]:", re.M),  # a link reference definition
]


# What a CommonMark renderer with GFM tables may make of imagesmith's Markdown; any other tag came from a value.
RENDERED_TAGS = {"h1", "h2", "h3", "h4", "p", "strong", "em", "code", "pre", "ul", "ol", "li", "br", "hr",
                 "table", "thead", "tbody", "tr", "th", "td"}


def inert_markdown(md: str) -> None:
    for pattern in LIVE_MARKDOWN:
        found = pattern.search(md)
        assert found is None, f"live in the Markdown: {md[max(0, found.start() - 40):found.end() + 40]!r}"
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").enable("table").render(md)
    tags = {t.lower() for t in re.findall(r"<\s*/?\s*([A-Za-z][A-Za-z0-9-]*)", rendered)}
    assert tags <= RENDERED_TAGS, f"markup from a value, rendered: {sorted(tags - RENDERED_TAGS)}"
    tables: list[list[str]] = [[]]
    for line in md.splitlines():
        if line.startswith("|"):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    for rows in tables:
        assert len({row.replace("\\|", "").count("|") for row in rows}) <= 1, f"a value split a table row: {rows}"


@pytest.mark.parametrize("text", corpus.LIVE, ids=range(len(corpus.LIVE)))
@pytest.mark.parametrize("kind", ["verify", "run", "fleet", "build"])
def test_report_text_stays_inert(kind: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"verify": corpus.verify_report, "run": corpus.run_report, "fleet": corpus.fleet_report, "build": corpus.build_report}[kind](text)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    code, md, err = run(["report", str(path), "--format", "md"], capsys)
    assert code == 0, err
    assert "\\|" in md or "\\[" in md or "\\<" in md or "\\&" in md or "\\`" in md or "\u2060" in md, "the text did not reach the Markdown"
    inert_markdown(md)
    code, page, err = run(["report", str(path), "--format", "html"], capsys)
    assert code == 0, err
    assert "<img src=x" not in page and "href='https://evil" not in page and 'href="https://evil' not in page
    code, xml, err = run(["report", str(path), "--format", "junit"], capsys)
    assert code == 0, err
    ET.fromstring(xml)  # well-formed whatever the text


def test_the_release_markdown_stays_inert() -> None:
    from imagesmith.report.markdown import release_document

    for text in corpus.LIVE:
        inert_markdown(release_document(corpus.release(text)))


# -- CI emission ------------------------------------------------------------------------------------------

HOSTILE_PATHS = {
    "newline-job": "m\nevil-job:\n  script: [id]\n#.yaml",
    "carriage-return": "m\revil.yaml",
    "line-separator": "m\u2028evil.yaml",
    "escape": "m\x1b[2J.yaml",
    "job-token": "$CI_JOB_TOKEN.yaml",
    "braced-token": "${CI_JOB_TOKEN}.yaml",
    "quote-and-colon": "m: 'x\" #.yaml",
    "command-subst": "$(id)`id`.yaml",
}


def _matrix(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    shutil.copytree(ROOT / "examples" / "requirements", folder / "requirements")
    path = folder / name
    path.write_bytes((ROOT / "examples" / "local.yaml").read_bytes())
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE_PATHS))
def test_gitlab_pipeline_of_a_hostile_matrix_path(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = HOSTILE_PATHS[case]
    try:
        matrix = _matrix(tmp_path, name)
    except (OSError, ValueError):
        pytest.skip("the filesystem refuses this name")
    roots = [a for r in LOCAL_ROOTS for a in ("--allow-root", str(r))]
    code, doc, err = run(["plan", "-m", str(matrix), "--format", "gitlab-ci", "--stage", "127.0.0.1:5001/ci/stage", *roots], capsys)
    assert code != 3, err
    if any(c in name for c in "\n\r\u2028\x1b"):
        assert code == 1 and "control character" in err and doc == "", err
        return
    assert code == 0, err
    loaded = yaml.safe_load(doc)
    jobs = {k for k in loaded if k.startswith(("build:", "verify:"))}
    assert set(loaded) == {"stages", "variables", "default", "publish"} | jobs
    assert len(jobs) == 2 * len(json.loads(run(["plan", "-m", str(matrix), "--format", "json", *roots], capsys)[1])["targets"])
    assert loaded["variables"]["MATRIX"] == str(matrix).replace("$", "$$")
    assert all("$" not in v.replace("$$", "") for v in loaded["variables"].values()), "an unescaped $ in a GitLab variable"


def test_github_matrix_of_a_hostile_matrix_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = _matrix(tmp_path, HOSTILE_PATHS["job-token"])
    roots = [a for r in LOCAL_ROOTS for a in ("--allow-root", str(r))]
    code, doc, err = run(["plan", "-m", str(matrix), "--format", "github-matrix", *roots], capsys)
    assert code == 0, err
    assert "CI_JOB_TOKEN" not in doc and set(json.loads(doc)) >= {"depth0", "verify", "date"}


@pytest.mark.parametrize("log", ["/dev/zero", "/etc/passwd", "fifo.log", "../outside.log", "big.log", "folder"])
def test_logs_a_report_names_are_read_only_inside_its_folder(log: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    os.mkfifo(folder / "fifo.log")
    (folder / "folder").mkdir()
    (tmp_path / "outside.log").write_text("SECRET-OUTSIDE\n")
    with (folder / "big.log").open("wb") as fh:  # 200 MB of NULs, then the real last line
        fh.seek(200 * 1024 * 1024)
        fh.write(b"\nlast line of the build\n")
    doc = corpus.build_report() | {"targets": [corpus.build_report()["targets"][0] | {"log": str(folder / log) if not log.startswith("/") else log}]}
    (folder / "report.json").write_text(json.dumps(doc))
    code, md, err = run(["report", str(folder / "report.json")], capsys)
    assert code == 0, err
    assert "root:" not in md and "SECRET-OUTSIDE" not in md
    assert ("last line of the build" in md) == (log == "big.log")


# -- signed statements, keys, trust policies: the trust boundary through the real CLI --------------------------------


def _trusted_out(tmp_path: Path) -> tuple[Path, Path, signing.Key, Path]:
    """OUT with one build artifact, a verifier key and the trust policy that names it: (OUT, the target's folder, key, policy)."""
    out = tmp_path / "out"
    rec = record(0)
    folder = out / rec.target.id
    artifacts.write_build(folder / artifacts.BUILD_FILE, rec)
    key, _ = verifier(tmp_path / "keys", "gpu")
    return out, folder, key, tmp_path / "keys" / "trust-policy.yaml"


def _subject() -> tuple[str, str]:
    staged = record(0).staged
    assert staged is not None
    return staged.repository, staged.digest


NOW = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
SIGNED_PAYLOADS = corpus.statement_payloads(_subject(), NOW)
ENVELOPES = corpus.envelope_bytes() | {f"raw-{k}": k for k in corpus.bytes_cases("")}


@pytest.mark.parametrize("case", sorted(SIGNED_PAYLOADS))
def test_a_hostile_statement_under_a_valid_signature_is_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, folder, key, policy = _trusted_out(tmp_path)
    path = folder / trust.STATEMENT_FILE
    path.write_bytes(signing.envelope(SIGNED_PAYLOADS[case], attestation.PAYLOAD_TYPE, key))
    code, _, err = run(["publish", "--out", str(out), "--trust-policy", str(policy), "-q"], capsys)
    refused(code, err, path)


@pytest.mark.parametrize("case", sorted(ENVELOPES))
def test_a_hostile_envelope_is_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, folder, _, policy = _trusted_out(tmp_path)
    found = ENVELOPES[case]
    if isinstance(found, bytes):
        path = folder / trust.STATEMENT_FILE
        path.write_bytes(found)
    else:
        path = corpus.bytes_cases("")[found](folder, trust.STATEMENT_FILE)
    code, _, err = run(["publish", "--out", str(out), "--trust-policy", str(policy), "-q"], capsys)
    refused(code, err, path)


FLEET_YAML_TEXT = "classes:\n  h200: {gpus: 1, gpu: NVIDIA H200, slurm: {partition: p}}\nfloating:\n  require: [h200]\n"


@pytest.mark.parametrize("case", sorted(SIGNED_PAYLOADS) + sorted(ENVELOPES))
def test_a_hostile_fleet_statement_holds_the_tag_back(case: str, tmp_path: Path) -> None:
    """The gate reads every cell's statement: a hostile one is a held-back class with its reason, never an exception."""
    from imagesmith.model import fleetreport as fleet_report
    from imagesmith.stages.fleet import gate

    _, _, key, policy_path = _trusted_out(tmp_path)
    folder = tmp_path / "fleet"
    (folder / "c").mkdir(parents=True)
    statement = folder / "c" / trust.STATEMENT_FILE
    if case in SIGNED_PAYLOADS:
        statement.write_bytes(signing.envelope(SIGNED_PAYLOADS[case], attestation.PAYLOAD_TYPE, key))
    elif isinstance(ENVELOPES[case], bytes):
        statement.write_bytes(ENVELOPES[case])  # type: ignore[arg-type]
    else:
        corpus.bytes_cases("")[str(ENVELOPES[case])](folder / "c", trust.STATEMENT_FILE)
    name, digest = _subject()
    cell = fleet_report.CellResult(f"{name}@{digest}", "h200", "slurm", "pass", "every required check passed",
                                   statement="c/" + trust.STATEMENT_FILE)
    rep = fleet_report.write(fleet_report.FleetReport("fleet.yaml", "r1", "quick", "x", ("h200",), (cell,)), folder / "r.json")
    (tmp_path / "fleet.yaml").write_text(FLEET_YAML_TEXT)
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [rep], trust.load_policy(policy_path), ["r1"])
    assert loaded is not None
    why = loaded.held_back(digest)
    assert why is not None and why.startswith(("held back by the fleet: class h200 failed: its signed result is refused: ",
                                               "held back by the fleet: class h200 has no result that counts: its signed result is too old: ")), why
    assert len(why) < 1200


KEY_FILES = corpus.operator_files()


@pytest.mark.parametrize("case", sorted(KEY_FILES))
@pytest.mark.parametrize("role", ["signing-key", "policy-key", "trust-policy", "fleet-verifier-key"])
def test_a_key_or_policy_that_is_no_regular_file_is_exit_1(case: str, role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _, _, policy = _trusted_out(tmp_path)
    (tmp_path / "k").mkdir()
    path = KEY_FILES[case](tmp_path / "k", "key.pem")
    if role == "signing-key":
        args = ["publish", "--out", str(out), "--trust-policy", str(policy), "--signing-key", str(path), "-q"]
    elif role == "policy-key":
        policy.write_text(f"version: 1\nverifiers:\n  - {{name: gpu, key: {path}, classes: ['*']}}\n")
        args = ["publish", "--out", str(out), "--trust-policy", str(policy), "-q"]
    elif role == "trust-policy":
        args = ["publish", "--out", str(out), "--trust-policy", str(path), "-q"]
    else:
        args = ["fleet", "verify", "--fleet", FLEET, "harbor.example.com/ml/x@sha256:" + "ab" * 32, "--out", str(tmp_path / "f"),
                "--verifier-key", str(path), "-q"]
    code, _, err = run(args, capsys)
    assert code != 3, err
    if code == 2:  # click's dir_okay=False answers a folder first
        assert "is a directory" in err, err
        return
    first = next(line for line in err.splitlines() if not line.startswith("warning: "))
    assert code == 1 and str(path) in first and "Traceback" not in err, err
    assert not (tmp_path / "f").exists(), "a fleet job was written"


def test_a_policy_naming_the_release_key_as_a_verifier_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _, _, policy = _trusted_out(tmp_path)
    release_key, release_pub = key_files(tmp_path / "release", "release")
    policy.write_text(trust.policy_text([("gpu", "gpu.pub", ["*"]), ("sneaky", str(release_pub), ["*"])]))
    code, _, err = run(["publish", "--out", str(out), "--trust-policy", str(policy), "--signing-key", str(release_key), "-q"], capsys)
    loaded = signing.load_public_key(release_pub)
    assert (code, err) == (1, f"error: {policy}: verifiers[1] (sneaky) has the release key (--signing-key, key ID "
                              f"{loaded.keyid[:16]}) as its key; roles stay apart: a verifier key signs verifications on GPU "
                              f"runners, the release key signs what publish attaches; give the verifier a key of its own\n")
