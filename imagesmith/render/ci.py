"""The fan-out for the CI system a team already runs (pure: a Plan in, a document out).

``gitlab_pipeline``: a GitLab dynamic child pipeline (``trigger: include:
artifact:``). One build job per target on a Docker runner, ``needs:`` its
parent's build job (whose artifact carries the parent's staged digest), so a
child starts as soon as its parent is staged, on any runner; one verify job
per target on a GPU runner, ``needs:`` only that build job (it pulls the
staged digest); one publish job in the last stage that gathers every job's
artifacts (no ``needs:``: GitLab then hands it all earlier stages' artifacts,
and ``needs:`` is capped at 50 jobs) and promotes with no engine.

``github_matrix``: GitHub Actions has no per-target dependencies inside a
matrix, so targets are grouped by depth in the DAG: ``depth0`` (bases),
``depth1`` (their children), ... each a ``{"include": [...]}`` object for
``strategy.matrix: ${{ fromJSON(...).depthN }}``; the workflow runs one
matrix job per depth, each ``needs:`` the one before (a child waits for every
target one level up, not only its parent). ``verify`` lists every target.

Platforms: every job names its target's platform (GitLab: the job variables
``PLATFORM``, ``linux/arm64``, and ``ARCH``, ``arm64``; GitHub: the entry keys
``platform``, ``arch`` and ``runner_arch``, the architecture label GitHub gives
self-hosted runners, ``X64`` or ``ARM64``). A job of a platform other than
linux/amd64 asks for a runner of that architecture (GitLab: its arch as one
more runner tag), a native one; a build job may instead run on the usual build
runners under emulation (``Options.emulated``: QEMU through binfmt_misc, several
times slower). Verify jobs always run natively: a GPU cannot be reached
through an emulator.

Every value that lands in a shell command is quoted; YAML and JSON are written
by their libraries, never by string pasting. Every value copied into the GitLab
document (the matrix path, the staging repository, ``--allow-root`` folders,
the tier, runner tags) is checked at emission: a control character (a newline
would end the header comment and start YAML of its own) is refused with a
UserError, and ``$`` is written ``$$`` (GitLab expands variables in
``variables:`` values, so ``$CI_JOB_TOKEN`` in a path would be the token).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields
from typing import Any

import yaml

from imagesmith.errors import UserError
from imagesmith.model.located import control_character, printable
from imagesmith.model.plan import Plan, Target
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import problem as platform_problem

GITHUB_MAX_JOBS = 256  # jobs one matrix may generate
GITHUB_DEPTHS = 4  # depth0..depth3 always present (the example workflow has a job for each)
INSTALL = ("python3 -m venv .venv", ". .venv/bin/activate", "pip install --quiet .")
# Each key lives with one job kind (docs/trust.md): IMAGESMITH_VERIFIER_KEY (a File variable) is scoped to the
# verifier environment (the GPU verify jobs), IMAGESMITH_SIGNING_KEY to the release environment (the publish job);
# build jobs run the project's own requirements and get neither.
VERIFIER_ENVIRONMENT = "verifier"
RELEASE_ENVIRONMENT = "release"
TRUST_POLICY = "trust-policy.yaml"  # committed: the verifiers' public keys
GITHUB_RUNNER_ARCH = {"amd64": "X64", "arm64": "ARM64"}  # the architecture labels of GitHub's self-hosted runners


@dataclass(frozen=True)
class Options:
    matrix: str  # the matrix file as the jobs see it (relative to the repository)
    stage: str  # the staging repository, host/path
    release: str = ""  # the release repository, host/path (the matrix's image): publish --registry declares it
    out: str = "build"
    tier: str = "standard"
    build_tags: tuple[str, ...] = ("self-hosted", "linux", "docker")
    gpu_tags: tuple[str, ...] = ("self-hosted", "linux", "gpu")
    publish_tags: tuple[str, ...] = ("self-hosted", "linux")
    install: tuple[str, ...] = INSTALL
    allow_roots: tuple[str, ...] = ()  # plan --allow-root: every job gets them (IMAGESMITH_ALLOW_ROOT)
    emulated: tuple[str, ...] = ()  # platforms (linux/arm64) whose build jobs run on the build runners under QEMU


def build_job(t: Target) -> str:
    return f"build:{t.id}"


def verify_job(t: Target) -> str:
    return f"verify:{t.id}"


def _q(value: str) -> str:
    return shlex.quote(value)


# -- GitLab -----------------------------------------------------------------------------------------


def checked(o: Options) -> Options:
    """``o`` if no value holds a control character and each emulated platform is one (UserError naming the option otherwise)."""
    for name in o.emulated:
        why = platform_problem(name)
        if why:
            raise UserError(f"the emulated value {why}")
    for f in fields(o):
        value = getattr(o, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            bad = control_character(item)
            if bad:
                raise UserError(f"the {f.name.replace('_', ' ')} value {printable(item)} holds control character {bad}: it cannot be "
                                f"written into a CI document safely; rename it (or move the file) and generate again")
    return o


def literal(value: str) -> str:
    """``value`` as GitLab reads it literally in ``variables:`` (``$`` -> ``$$``)."""
    return value.replace("$", "$$")


def gitlab_document(plan: Plan, o: Options, version: str) -> str:
    """The child pipeline as YAML (a real dumper), under a comment header that names its source."""
    checked(o)
    head = (f"# Generated by imagesmith {version} from {o.matrix} ({len(plan.targets)} targets, date {plan.date}):\n"
            f"# imagesmith plan --format gitlab-ci. Do not edit; generate again.\n")
    return head + yaml.safe_dump(gitlab_pipeline(plan, o), sort_keys=False, width=1000)


def gitlab_pipeline(plan: Plan, o: Options) -> dict[str, Any]:
    """The child pipeline: build (one job per target, parents first), verify (GPU runners), publish."""
    checked(o)
    variables = {"MATRIX": o.matrix, "IMAGESMITH_STAGE": o.stage, "IMAGESMITH_DATE": plan.date, "TIER": o.tier,
                 "TRUST_POLICY": TRUST_POLICY, "PIP_DISABLE_PIP_VERSION_CHECK": "1"} | _allow_roots(o)
    doc: dict[str, Any] = {
        "stages": ["build", "verify", "publish"],
        "variables": {k: literal(v) for k, v in variables.items()},
        "default": {"interruptible": True, "before_script": list(o.install)},
    }
    doc |= {build_job(t): _gitlab_build(t, o) for t in plan.targets}
    doc |= {verify_job(t): _gitlab_verify(t, o) for t in plan.targets}
    doc["publish"] = _gitlab_publish(o)
    return doc


def _allow_roots(o: Options) -> dict[str, str]:
    for root in o.allow_roots:
        if ":" in root:
            raise UserError(f"--allow-root {printable(root)} holds ':', which separates the folders of IMAGESMITH_ALLOW_ROOT; rename it")
    return {"IMAGESMITH_ALLOW_ROOT": ":".join(o.allow_roots)} if o.allow_roots else {}


def platform_variables(t: Target) -> dict[str, str]:
    """What a job knows of its target's platform: ``PLATFORM`` (``linux/arm64``) and ``ARCH`` (``arm64``)."""
    return {"PLATFORM": literal(t.platform.docker), "ARCH": literal(t.platform.arch)}


def runner_tags(tags: tuple[str, ...], t: Target, emulated: bool = False) -> list[str]:
    """A job's runner tags: ``tags``, and for a platform other than linux/amd64 its architecture (``arm64``), so a
    native runner takes it; ``emulated``: the usual runners, which build it under QEMU."""
    native = t.platform is not DEFAULT_PLATFORM and not emulated
    return [*tags, *([t.platform.arch] if native and t.platform.arch not in tags else [])]


def _gitlab_build(t: Target, o: Options) -> dict[str, Any]:
    folder = f"{o.out}/{t.id}"
    needs = [{"job": f"build:{t.parent}", "artifacts": True}] if t.parent else []
    return {
        "stage": "build", "tags": runner_tags(o.build_tags, t, str(t.platform) in o.emulated), "needs": needs, "timeout": "4h",
        "variables": platform_variables(t),
        "script": [f'imagesmith build --matrix "$MATRIX" --date "$IMAGESMITH_DATE" --only {_q(t.id)} '
                   f'--stage "$IMAGESMITH_STAGE" --out {_q(o.out)}'],
        "artifacts": {"when": "always", "expire_in": "30 days", "paths": [f"{folder}/"]},
    }


def _gitlab_verify(t: Target, o: Options) -> dict[str, Any]:
    """On a GPU runner, in the ``verifier`` environment: the only jobs that get the verifier key (a File variable
    scoped to that environment); the signed statement travels as an artifact."""
    folder = f"{o.out}/{t.id}"
    return {
        "stage": "verify", "tags": runner_tags(o.gpu_tags, t), "needs": [{"job": build_job(t), "artifacts": True}], "timeout": "2h",
        "variables": platform_variables(t),
        "environment": {"name": VERIFIER_ENVIRONMENT, "action": "prepare"},
        "script": [f'imagesmith verify --build-report {_q(folder + "/build.json")} --stage "$IMAGESMITH_STAGE" --tier "$TIER" --gpus all '
                   f'--verifier-key "$IMAGESMITH_VERIFIER_KEY" --json {_q(folder + "/run-report.json")} || rc=$?',
                   f"imagesmith report {_q(folder + '/run-report.json')} --format junit --out {_q(folder + '/junit.xml')}",
                   "exit ${rc:-0}"],
        "artifacts": {"when": "always", "expire_in": "90 days",
                      "paths": [f"{folder}/verify.json", f"{folder}/verify.dsse.json", f"{folder}/run-report.json",
                                f"{folder}/junit.xml"],
                      "reports": {"junit": f"{folder}/junit.xml"}},
    }


def _gitlab_publish(o: Options) -> dict[str, Any]:
    """In the ``release`` environment: the only job that gets the release key; it believes the verifiers that the
    committed trust policy names."""
    out = _q(o.out)
    return {
        "stage": "publish", "tags": list(o.publish_tags), "resource_group": "imagesmith-release", "interruptible": False,
        "environment": {"name": RELEASE_ENVIRONMENT},
        "rules": [{"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"}, {"if": "$CI_COMMIT_TAG"}],
        "script": [f'imagesmith publish --matrix "$MATRIX" --out {out} {_registry(o)}--stage "$IMAGESMITH_STAGE" --trust-policy "$TRUST_POLICY" || rc=$?',
                   f"imagesmith report {out}/run-report.json --format md --out {out}/summary.md",
                   f"imagesmith report {out}/run-report.json --format html --out {out}/report.html",
                   "exit ${rc:-0}"],
        "artifacts": {"when": "always", "expire_in": "1 year", "expose_as": "imagesmith release",
                      "paths": [f"{o.out}/release.json", f"{o.out}/release.md", f"{o.out}/run-report.json",
                                f"{o.out}/summary.md", f"{o.out}/report.html"]},
    }


def _registry(o: Options) -> str:
    """publish's --registry: the release host is declared from the matrix, never read from an artifact."""
    return f"--registry {_q(o.release)} " if o.release else ""


# -- GitHub -----------------------------------------------------------------------------------------


def github_matrix(plan: Plan, release: str = "") -> dict[str, Any]:
    """``{"depth0": {"include": [...]}, ..., "verify": {"include": [...]}, "max_depth": N, "date": ...,
    "release": "host/repo"}`` (``release``: the matrix's release repository, which publish --registry declares)."""
    deepest = max((t.depth for t in plan.targets), default=0)
    doc: dict[str, Any] = {f"depth{d}": {"include": [_entry(t) for t in plan.targets if t.depth == d]}
                           for d in range(max(GITHUB_DEPTHS, deepest + 1))}
    doc["verify"] = {"include": [_entry(t) for t in plan.targets]}
    for key, value in doc.items():
        if len(value["include"]) > GITHUB_MAX_JOBS:
            raise UserError(f"{len(value['include'])} targets in the GitHub matrix {key}: GitHub runs at most {GITHUB_MAX_JOBS} "
                            f"jobs per matrix; split the matrix file (or use the GitLab pipeline)")
    return doc | {"max_depth": deepest, "date": plan.date, "targets": len(plan.targets), "release": release}


def _entry(t: Target) -> dict[str, str]:
    """One matrix job; ``runner_arch`` goes into ``runs-on`` to pick a native runner of the target's architecture."""
    return {"target": t.id, "parent": t.parent or "", "layer": t.layer, "cell": t.cell,
            "platform": t.platform.docker, "arch": t.platform.arch, "runner_arch": GITHUB_RUNNER_ARCH[t.platform.arch]}
