"""The CI emitters (imagesmith.render.ci, `imagesmith plan --format gitlab-ci|github-matrix`).

The documents are validated by a tool that is not imagesmith: check-jsonschema
with the GitLab CI and GitHub workflow schemas it vendors (run as its own
process), and their shape is checked here: one build job per target, parents
before children, each build job needing its parent's, verify jobs on GPU
runners needing their build job, one publish job gathering everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from imagesmith.cli import cli
from imagesmith.errors import UserError
from imagesmith.model import matrix, plan
from imagesmith.render import ci
from tests.conftest import LOCAL_ROOTS, ROOT
from tests.unit.project.test_ci_examples import imagesmith_calls, problems

STAGE = "harbor.example.com/ml/staging"
DATE = "20261130"
ALLOW = [arg for root in LOCAL_ROOTS for arg in ("--allow-root", str(root))]  # examples/local.yaml's wheels and CA
MATRICES = {"local": ROOT / "examples" / "local.yaml", "production": ROOT / "matrix.yaml"}


def p_release(name: str) -> str:
    """The release repository the matrix names (host/path): what publish --registry declares."""
    image = matrix.load(MATRICES[name], allowed_roots=LOCAL_ROOTS).image
    assert image.registry
    return image.name


def plan_of(name: str) -> plan.Plan:
    return plan.expand(matrix.load(MATRICES[name], allowed_roots=LOCAL_ROOTS), DATE)


def check_jsonschema(schema: str, docs: dict[str, Any], folder: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema (its own process, its vendored schema) over each document written as YAML."""
    paths = []
    for name, doc in docs.items():
        path = folder / f"{name}.yml"
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
        paths.append(str(path))
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *paths],
                          capture_output=True, text=True, timeout=120)


def gitlab_cli(name: str, *extra: str) -> str:
    result = CliRunner().invoke(cli, ["plan", "-m", str(MATRICES[name]), "--format", "gitlab-ci", "--stage", STAGE,
                                      "--date", DATE, *ALLOW, *extra])
    assert result.exit_code == 0, result.output
    return result.output


def github_cli(name: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["plan", "-m", str(MATRICES[name]), "--format", "github-matrix", "--date", DATE, *ALLOW])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1  # one line: it goes into $GITHUB_OUTPUT as matrix=<json>
    return dict(json.loads(result.output))


# -- GitLab -------------------------------------------------------------------------------------------


def test_gitlab_child_pipelines_validate_against_gitlabs_schema(tmp_path: Path) -> None:
    docs = {name: gitlab_cli(name) for name in MATRICES}
    done = check_jsonschema("vendor.gitlab-ci", docs, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok -- validation done" in done.stdout


def test_the_schema_check_can_fail(tmp_path: Path) -> None:
    broken = yaml.safe_load(gitlab_cli("local"))
    broken["build:2.13.0-cpu-py3.11-debian12-base"]["needs"] = "not-a-list-of-jobs"
    broken["publish"]["when"] = "sometimes"
    done = check_jsonschema("vendor.gitlab-ci", {"broken": broken}, tmp_path)
    assert done.returncode == 1 and "publish" in done.stdout + done.stderr


@pytest.mark.parametrize("name", list(MATRICES))
def test_gitlab_one_build_job_per_target_parents_first_needing_the_parent(name: str) -> None:
    p = plan_of(name)
    doc = yaml.safe_load(gitlab_cli(name))
    builds = [j for j in doc if j.startswith("build:")]
    assert builds == [f"build:{t.id}" for t in p.targets]  # the plan's order: parents before children
    for t in p.targets:
        job = doc[f"build:{t.id}"]
        assert job["stage"] == "build" and job["tags"] == ["self-hosted", "linux", "docker"]
        if t.parent:
            assert job["needs"] == [{"job": f"build:{t.parent}", "artifacts": True}]
            assert builds.index(f"build:{t.parent}") < builds.index(f"build:{t.id}")
        else:
            assert job["needs"] == []
        assert job["artifacts"]["paths"] == [f"build/{t.id}/"]
        (args,) = list(imagesmith_calls(job["script"][0]))
        assert args == ["build", "--matrix", "$MATRIX", "--date", "$IMAGESMITH_DATE", "--only", t.id,
                        "--stage", "$IMAGESMITH_STAGE", "--out", "build"]
    assert doc["variables"]["IMAGESMITH_STAGE"] == STAGE and doc["variables"]["IMAGESMITH_DATE"] == DATE


@pytest.mark.parametrize("name", list(MATRICES))
def test_gitlab_verify_jobs_on_gpu_runners_and_one_publish_job_gathering_everything(name: str) -> None:
    p = plan_of(name)
    doc = yaml.safe_load(gitlab_cli(name))
    for t in p.targets:
        job = doc[f"verify:{t.id}"]
        assert job["stage"] == "verify" and job["tags"] == ["self-hosted", "linux", "gpu"]
        assert job["needs"] == [{"job": f"build:{t.id}", "artifacts": True}]
        assert f"build/{t.id}/verify.json" in job["artifacts"]["paths"]
        assert job["artifacts"]["reports"]["junit"] == f"build/{t.id}/junit.xml"
        (args,) = list(imagesmith_calls(job["script"][0]))
        assert args[args.index("--stage") + 1] == "$IMAGESMITH_STAGE"  # the staging host is declared, not read from build.json
    publish = doc["publish"]
    assert publish["stage"] == "publish" == doc["stages"][-1]
    (args,) = list(imagesmith_calls(publish["script"][0]))  # the hosts credentials go to come from the matrix, not artifacts
    assert args[args.index("--stage") + 1] == "$IMAGESMITH_STAGE" and args[args.index("--registry") + 1] == p_release(name)
    assert "needs" not in publish and "dependencies" not in publish  # every earlier job's artifacts
    assert publish["resource_group"]
    jobs = [k for k, v in doc.items() if isinstance(v, dict) and "script" in v]
    assert len(jobs) == 2 * len(p.targets) + 1
    paths = [path for k in jobs for path in doc[k]["artifacts"]["paths"] if k != "publish"]
    assert len(paths) == len(set(paths))  # no two jobs write the same artifact path


def test_gitlab_each_key_lives_with_one_job_kind() -> None:
    """Build jobs (the project's own requirements run there) get no key; the GPU verify jobs, in the verifier
    environment, sign with the verifier key; publish, in the release environment, believes the trust policy."""
    doc = yaml.safe_load(gitlab_cli("local"))
    jobs = {k: v for k, v in doc.items() if isinstance(v, dict) and "script" in v}
    text = {k: json.dumps(v) for k, v in jobs.items()}
    for name, job in jobs.items():
        kind = name.split(":", 1)[0]
        env = {"build": None, "verify": {"name": "verifier", "action": "prepare"}, "publish": {"name": "release"}}[kind]
        assert job.get("environment") == env, name
        assert ("--verifier-key \\\"$IMAGESMITH_VERIFIER_KEY\\\"" in text[name]) is (kind == "verify"), name
        assert ("--trust-policy" in text[name]) is (kind == "publish"), name
    for t in plan_of("local").targets:
        assert f"build/{t.id}/verify.dsse.json" in jobs[f"verify:{t.id}"]["artifacts"]["paths"]
    assert doc["variables"]["TRUST_POLICY"] == "trust-policy.yaml"


def test_every_imagesmith_line_of_the_child_pipeline_parses() -> None:
    doc = yaml.safe_load(gitlab_cli("local", "--build-tag", "docker", "--gpu-tag", "h200", "--tier", "quick"))
    lines = [line for job in doc.values() if isinstance(job, dict) for line in job.get("script", [])]
    found = [args for line in lines for args in imagesmith_calls(line)]
    assert {a[0] for a in found} == {"build", "verify", "report", "publish"}
    assert [p for args in found for p in problems(args)] == []
    assert doc["build:2.13.0-cpu-py3.11-debian12-base"]["tags"] == ["docker"]
    assert doc["verify:2.13.0-cpu-py3.11-debian12-base"]["tags"] == ["h200"] and doc["variables"]["TIER"] == "quick"


@pytest.mark.parametrize("args, message", [
    ([], "--format gitlab-ci needs --stage REGISTRY/REPO"),
    (["--stage", "127.0.0.1:5000/imagesmith/local"], "is the release repository"),
    (["--stage", "staging"], "does not start with a registry host"),
    (["--stage", "harbor.example.com/ML/Staging"], "is not a repository path"),
])
def test_gitlab_needs_a_staging_repository_that_is_not_the_release_one(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["plan", "-m", str(MATRICES["local"]), "--format", "gitlab-ci", *ALLOW, *args])
    assert result.exit_code == 1 and isinstance(result.exception, UserError)
    assert message in str(result.exception)


def test_target_ids_are_quoted_for_the_shell() -> None:
    p = plan_of("local")
    odd = plan.Plan(p.matrix, p.date, (p.targets[0].__class__(**{**p.targets[0].__dict__, "id": "a b;rm -rf ~"}),))
    (line,) = ci.gitlab_pipeline(odd, ci.Options("m.yaml", STAGE))["build:a b;rm -rf ~"]["script"]
    assert "--only 'a b;rm -rf ~' " in line


# -- GitHub -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MATRICES))
def test_github_matrix_groups_targets_by_depth_parents_one_level_up(name: str) -> None:
    p = plan_of(name)
    doc = github_cli(name)
    depth_of = {}
    for d in range(ci.GITHUB_DEPTHS):
        for entry in doc[f"depth{d}"]["include"]:
            depth_of[entry["target"]] = d
            assert (entry["parent"] == "") == (d == 0)
            assert not entry["parent"] or depth_of[entry["parent"]] == d - 1  # built by the job before
    assert sorted(depth_of) == sorted(t.id for t in p.targets)
    assert [e["target"] for e in doc["verify"]["include"]] == [t.id for t in p.targets]
    assert doc["max_depth"] == max(t.depth for t in p.targets) < ci.GITHUB_DEPTHS  # the example workflow's build-0..3
    assert doc["date"] == DATE and doc["targets"] == len(p.targets)
    assert doc["release"] == p_release(name)  # publish --registry in the example workflow


def test_github_matrices_validate_as_workflow_matrices(tmp_path: Path) -> None:
    """Each depth's object, put where fromJSON puts it (strategy.matrix), in a workflow
    check-jsonschema validates with GitHub's workflow schema."""
    doc = github_cli("production")
    jobs = {key: {"runs-on": "ubuntu-latest", "strategy": {"matrix": doc[key]}, "steps": [{"run": "true"}]}
            for key in doc if isinstance(doc[key], dict) and doc[key]["include"]}
    done = check_jsonschema("vendor.github-workflows", {"matrices": {"on": "push", "jobs": jobs}}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_github_example_workflow_uses_every_depth_the_matrix_has() -> None:
    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    keys = {job["strategy"]["matrix"].split(".")[-1].rstrip(" }") for job in workflow["jobs"].values() if "strategy" in job}
    assert keys == {f"depth{d}" for d in range(ci.GITHUB_DEPTHS)} | {"verify"}
    assert set(github_cli("local")) >= keys


def test_github_refuses_a_matrix_github_cannot_run() -> None:
    p = plan_of("local")
    base = p.targets[0]
    many = plan.Plan(p.matrix, p.date, tuple(base.__class__(**{**base.__dict__, "id": f"t{i}"}) for i in range(257)))
    with pytest.raises(UserError, match="257 targets in the GitHub matrix depth0: GitHub runs at most 256 jobs per matrix"):
        ci.github_matrix(many)


def test_plan_allow_roots_reach_every_job_of_the_child_pipeline() -> None:
    doc = yaml.safe_load(gitlab_cli("local"))
    assert doc["variables"]["IMAGESMITH_ALLOW_ROOT"] == ":".join(map(str, LOCAL_ROOTS))
    assert "IMAGESMITH_ALLOW_ROOT" not in ci.gitlab_pipeline(plan_of("local"), ci.Options("m.yaml", STAGE))["variables"]


@pytest.mark.parametrize(("args", "tier"), [((), "quick"), (("--tier", "standard"), "standard")])
def test_the_verify_jobs_run_the_matrix_tier_unless_told(args: tuple[str, ...], tier: str) -> None:
    """examples/local.yaml says verify.tier: quick; the child pipeline's verify jobs say the same unless --tier is given."""
    assert yaml.safe_load(gitlab_cli("local", *args))["variables"]["TIER"] == tier
