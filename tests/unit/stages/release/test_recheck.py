"""``vulns recheck`` without a registry: which tags are floating and their lines (from the labels publish writes),
which release a floating tag moves to, what the report says per tag, its Markdown and Prometheus renderings, a stale
snapshot, and the command's refusals. The registry end to end: tests/integration/test_recheck_registry.py."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pytest

from imagesmith import cli
from imagesmith.model import advisories, vulns
from imagesmith.model.tags import FloatingTag, TagPolicy
from imagesmith.report import recheck as recheck_report
from imagesmith.stages.evidence import vulngate
from imagesmith.stages.release import recheck
from tests.unit.stages.release.test_publish import FakeRegistry, manifest_for

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
POLICY = TagPolicy(floating=(FloatingTag("v{torch_minor}-{accel}"), FloatingTag("latest", (("layer", "base"),))))
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def labels(torch: str, created: str = "2026-11-20", layer: str = "base") -> dict[str, str]:
    return {"io.imagesmith.torch": torch, "io.imagesmith.cuda": "cpu", "io.imagesmith.python": "3.11.2", "io.imagesmith.os": "debian12",
            "io.imagesmith.layer": layer, "io.imagesmith.cell": "c", "org.opencontainers.image.created": created + "T00:00:00Z"}


def registry(*images: tuple[str, dict[str, str], tuple[str, ...]]) -> FakeRegistry:
    reg = FakeRegistry()
    for name, labelled, tags in images:
        config = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        reg.labels[config] = labelled
        for tag in tags:
            reg.repo_tags[tag] = manifest_for(config)
    return reg


def test_released_images_their_tags_and_their_lines() -> None:
    reg = registry(("a", labels("2.12.0"), ("2.12.0-base", "sha256-abc.sig")), ("b", labels("2.13.0"), ("2.13.0-base", "latest", "v2.13-cpu")),
                   ("c", {}, ("foreign",)))
    images = recheck.released(reg, "ml/x")
    assert sorted(tuple(sorted(i.tags)) for i in images) == [("2.12.0-base",), ("2.13.0-base", "latest", "v2.13-cpu"), ("foreign",)]
    line_of = recheck.lines(POLICY, images)
    assert {tag: sorted(i.fields["torch"] for i in line if i.fields) for tag, line in line_of.items()} == {
        "latest": ["2.12.0", "2.13.0"], "v2.12-cpu": ["2.12.0"], "v2.13-cpu": ["2.13.0"]}


def image(torch: str, status: str, tags: tuple[str, ...] = (), created: str = "2026-11-20", blocking: int = 1) -> recheck.Image:
    from imagesmith.stages.release.publish import label_fields

    digest = "sha256:" + hashlib.sha256(f"{torch}{created}{tags}".encode()).hexdigest()
    out = recheck.Image(digest, "application/vnd.oci.image.manifest.v1+json", label_fields(labels(torch, created)), list(tags or (f"{torch}-{created}",)))
    if status == "not-judged":
        out.problem = "no SBOM signed by the given key is attached to it"
    else:
        failures = tuple(f"F-{i} critical: torch {torch}" for i in range(blocking)) if status == "vulnerable" else ()
        out.result = vulngate.ImageResult((), failures, (), NOW, "high")
    return out


NEWEST = [  # (the line, the clean release latest moves to)
    ([image("2.12.0", "clean"), image("2.12.1", "clean")], "2.12.1"),
    ([image("2.12.0", "clean"), image("2.12.1", "vulnerable")], "2.12.0"),
    ([image("2.12.0", "clean"), image("2.12.1", "not-judged")], "2.12.0"),  # unjudged is not clean
    ([image("2.12.0", "clean"), image("2.13.0rc1", "clean")], "2.12.0"),  # no pre-release: prerelease: false
    ([image("2.12.0", "clean", ("2.12.0-a",)), image("2.12.1", "clean", ("2.12.1-cpu-not-gpu-verified",))], "2.12.0"),
    ([image("2.12.0", "clean", created="2026-11-01"), image("2.12.0", "clean", created="2026-11-02")], "2.12.0 of 20261102"),
    ([image("2.12.0", "vulnerable")], None),
]


@pytest.mark.parametrize(("line", "expected"), NEWEST)
def test_the_newest_clean_release_of_the_line(line: list[recheck.Image], expected: str | None) -> None:
    current = image("2.13.0", "vulnerable", ("latest",))
    found = recheck.newest_clean([*line, current], POLICY, current)
    got = None if found is None else found.fields["torch"] if found.fields else "?"
    if expected and " of " in expected:
        assert found is not None and found.fields is not None and f"{got} of {found.fields['date']}" == expected
    else:
        assert got == expected


def test_an_index_floats_to_an_index_only() -> None:
    current = image("2.13.0", "vulnerable", ("latest",))
    current.media_type = "application/vnd.oci.image.index.v1+json"
    platform_image = image("2.12.1", "clean")  # a platform's image of a newer release: publish never floats it
    index = image("2.12.0", "clean")
    index.media_type = current.media_type
    assert recheck.newest_clean([platform_image, index, current], POLICY, current) is index


def test_an_index_is_judged_through_its_platform_images() -> None:
    amd, arm = image("2.13.0", "clean", ("a-amd64",)), image("2.13.0", "vulnerable", ("a-arm64",))
    index = recheck.Image("sha256:" + "1" * 64, "application/vnd.oci.image.index.v1+json", amd.fields, ["a"])
    recheck.index_verdict(index, [amd, arm])
    assert index.status == "vulnerable" and index.result is not None and index.result.failures == ("F-0 critical: torch 2.13.0",)
    unjudged = recheck.Image(index.digest, index.media_type, amd.fields, ["a"])
    recheck.index_verdict(unjudged, [amd, image("2.13.0", "not-judged", ("a-arm64",))])
    assert unjudged.status == "not-judged"
    assert unjudged.problem is not None and unjudged.problem.endswith(": no SBOM signed by the given key is attached to it")
    empty = recheck.Image(index.digest, index.media_type, None, ["a"])
    recheck.index_verdict(empty, [])
    assert empty.problem == "an image index without images"


def test_an_index_in_the_registry_has_its_first_platforms_fields_and_its_images() -> None:
    reg = registry(("amd", labels("2.13.0"), ("2.13.0-base-amd64",)), ("arm", labels("2.13.0"), ("2.13.0-base-arm64",)))
    reg.push_index("ml/x", "2.13.0-base", [reg.repo_tags["2.13.0-base-amd64"].digest, reg.repo_tags["2.13.0-base-arm64"].digest])
    [index] = [i for i in recheck.released(reg, "ml/x") if i.is_index]
    assert index.tags == ["2.13.0-base"] and index.fields is not None and index.fields["torch"] == "2.13.0"
    assert index.platforms == (reg.repo_tags["2.13.0-base-amd64"].digest, reg.repo_tags["2.13.0-base-arm64"].digest)


def report(images: list[recheck.Image], floating: frozenset[str]) -> recheck.Recheck:
    return recheck.Recheck("reg.test:5000/ml/x", NOW, ({"location": "osv", "digest": "sha256:" + "0" * 64, "date": "2026-11-30T00:00:00Z",
                                                          "advisories": 4},), "high", (), True, images, floating)


def test_holds_name_what_happens_to_each_floating_tag() -> None:
    old, new = image("2.12.0", "clean", ("2.12.0-base",)), image("2.13.0", "vulnerable", ("2.13.0-base", "latest", "v2.13-cpu"))
    r = report([old, new], frozenset({"latest", "v2.13-cpu"}))
    line_of = {"latest": [old, new], "v2.13-cpu": [new]}
    moved: list[tuple[str, str]] = []
    r.holds = recheck.holds(r, line_of, recheck.HoldOptions(None, POLICY), lambda h, held, target: moved.append((h.tag, target.digest)))  # type: ignore[arg-type]
    assert [(h.tag, h.action, h.digest == old.digest) for h in r.holds] == [("latest", "moved", True), ("v2.13-cpu", "kept", False)]
    assert moved == [("latest", old.digest)]
    assert r.holds[0].reason == (f"moved to the newest clean release of its line, 2.12.0-base ({old.digest[:19]}), off {new.digest[:19]}: "
                                 "known vulnerabilities at or above high: F-0 critical: torch 2.13.0")
    assert r.holds[1].reason == ("no clean release of its line to move to; it stays on a digest that known vulnerabilities at or above "
                                 "high: F-0 critical: torch 2.13.0")
    rows = {row["tag"]: (row["kind"], row["digest"] == old.digest, row["status"]) for row in r.tag_rows()}
    assert rows == {"2.12.0-base": ("immutable", True, "clean"), "2.13.0-base": ("immutable", False, "vulnerable"),
                    "latest": ("floating", True, "clean"), "v2.13-cpu": ("floating", False, "vulnerable")}
    assert r.unsafe() == [f"v2.13-cpu ({new.digest[:19]}): known vulnerabilities at or above high: F-0 critical: torch 2.13.0"]
    assert not r.ok


def test_without_hold_floating_nothing_moves() -> None:
    old, new = image("2.12.0", "clean", ("2.12.0-base",)), image("2.13.0", "vulnerable", ("2.13.0-base", "latest"))
    r = report([old, new], frozenset({"latest"}))
    r.holds = recheck.holds(r, {"latest": [old, new]}, None, recheck._no_move)
    assert [(h.action, h.digest == new.digest) for h in r.holds] == [("would-move", True)]
    assert r.holds[0].reason.startswith("would move (--hold-floating) to the newest clean release of its line, 2.12.0-base")
    assert [row["status"] for row in r.tag_rows() if row["tag"] == "latest"] == ["vulnerable"]


def test_a_vulnerable_immutable_tag_alone_does_not_fail_the_recheck() -> None:
    r = report([image("2.12.0", "vulnerable", ("2.12.0-base",)), image("2.13.0", "clean", ("2.13.0-base", "latest"))], frozenset({"latest"}))
    assert r.unsafe() == [] and r.ok
    assert [row["status"] for row in r.to_json()["tags"]] == ["clean", "vulnerable", "clean"]


def test_a_floating_tag_on_an_unjudged_digest_fails_it() -> None:
    r = report([image("2.13.0", "not-judged", ("2.13.0-base", "latest"))], frozenset({"latest"}))
    assert r.unsafe() == [f"latest ({r.images[0].digest[:19]}): no SBOM signed by the given key is attached to it"]


def test_a_stale_snapshot_judges_nothing(tmp_path: Path) -> None:
    reg = registry(("a", labels("2.13.0"), ("2.13.0-base", "latest")))
    snapshot = advisories.load(FIXTURES / "osv")
    r = recheck.run(reg, "ml/x", POLICY, vulns.Policy(), [snapshot], [], NOW)
    assert not r.ok and r.stale and [i.status for i in r.images] == ["not-judged"]
    assert r.images[0].problem is not None and r.images[0].problem.startswith(f"not judged: the advisory snapshot {FIXTURES / 'osv'} is 458d old")
    assert reg.writes == []


def test_the_report_renders_inert(tmp_path: Path) -> None:
    hostile = image("2.13.0", "vulnerable", ("2.13.0-base", "latest"))
    hostile.result = vulngate.ImageResult((vulns.Finding("GHSA-x", ("CVE-1",), "[click](https://evil.example)", "critical", 9.8, "PyPI",
                                                         "torch", "2.13.0+cpu", None, ("t",), None,
                                                         (vulns.Record("GHSA-x", "critical", 9.8, None), vulns.Record("PYSEC-x", "unknown", None, None))),),
                                          ("GHSA-x critical: torch 2.13.0+cpu \x1b[31m<b>",), (), NOW, "high")
    r = report([hostile], frozenset({"latest"}))
    paths = recheck.write(r, tmp_path)
    md = paths["markdown"].read_text()
    assert "\x1b" not in md and "[click]" not in md and "\\<b>" in md and "<b>" not in md.replace("\\<b>", "")
    assert ("| `latest` | floating | `" + hostile.digest[:19] + "` | ❌ vulnerable | 1 critical | 1 | known vulnerabilities at or above "
            "high: GHSA-x critical: torch 2.13.0+cpu \\\\x1b\\[31m\\<b> |") in md
    assert "| `2.13.0-base` | GHSA-x | GHSA-x, PYSEC-x | critical | torch | 2.13.0+cpu | - | - |" in md
    prom = paths["prometheus"].read_text()
    assert ('imagesmith_vulnerabilities{digest="' + hostile.digest + '",kind="floating",repository="reg.test:5000/ml/x",'
            'severity="critical",tag="latest"} 1.0') in prom
    assert 'imagesmith_vulnerabilities_snapshot_age_seconds{snapshot="osv"} 129600.0' in prom
    assert "imagesmith_vulnerabilities_recheck_timestamp_seconds 1.7961264e+09" in prom


def test_prometheus_says_when_a_tag_could_not_be_judged() -> None:
    r = report([image("2.13.0", "not-judged", ("latest",))], frozenset({"latest"}))
    prom = recheck_report.to_prometheus(r.to_json()).decode()
    assert 'imagesmith_vulnerabilities_judged{digest="' in prom and 'tag="latest"} 0.0' in prom
    assert "imagesmith_vulnerabilities{" not in prom.replace("# HELP imagesmith_vulnerabilities ", "").replace("# TYPE imagesmith_vulnerabilities ", "")


REFUSED = [
    ([], "error: vulns recheck: give the release's public key (--key): only signed evidence is believed"),
    (["--key", "{pub}", "--hold-floating"],
     "error: --hold-floating moves floating tags: it signs with the release key (--signing-key or IMAGESMITH_SIGNING_KEY)"),
    (["--key", "{pub}"], "error: vulns recheck: no advisories: give --advisories SNAPSHOT or set the matrix's sources.advisories"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_the_command_refuses_what_it_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                              args: list[str], message: str) -> None:
    monkeypatch.delenv("IMAGESMITH_SIGNING_KEY", raising=False)
    (tmp_path / "matrix.yaml").write_text('version: 1\nimage: {registry: reg.test, repository: ml/x}\n'
                                          'matrix: {torch: ["2.13"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n')
    (tmp_path / "k.pub").write_text("not read before the refusal")
    with pytest.raises(SystemExit) as info:
        cli.main(["vulns", "recheck", "-m", str(tmp_path / "matrix.yaml"), *[a.replace("{pub}", str(tmp_path / "k.pub")) for a in args]])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == message
