"""matrix.yaml validation: (bad input, exact message) tables, and what is accepted."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import pytest

from imagesmith.errors import ValidationError
from imagesmith.model import matrix

BASE = """\
version: 1
matrix:
  torch: ["2.9"]
  cuda: ["12.8"]
  python: ["3.11"]
  os: [ubuntu22.04]
"""


def messages(path: Path) -> list[str]:
    with pytest.raises(ValidationError) as info:
        matrix.load(path)
    return [str(p) for p in info.value.problems]


# Each row: a matrix file, and the exact first error it must produce.
BAD = [
    pytest.param(BASE.replace('cuda: ["12.8"]', 'cuda: ["12.1"]').replace('"2.9"', '"2.7"'),
                 "matrix.yaml:4 matrix.cuda[0]: torch 2.7 has no CUDA 12.1 wheels; it has 11.8, 12.6, 12.8",
                 id="torch-2.7-cuda-12.1"),
    pytest.param(BASE.replace('"12.8"', '"11.8"'),
                 "matrix.yaml:4 matrix.cuda[0]: torch 2.9 has no CUDA 11.8 wheels; it has 12.6, 12.8, 13.0",
                 id="torch-2.9-cuda-11.8"),
    pytest.param(BASE.replace('"3.11"', '"3.8"'),
                 "matrix.yaml:5 matrix.python[0]: torch 2.9 has no wheels for Python 3.8; it has 3.10, 3.11, 3.12, 3.13, 3.14",
                 id="python-too-old"),
    pytest.param(BASE.replace('"2.9"', '"2.0"').replace('"12.8"', '"11.8"').replace('"3.11"', '"3.12"'),
                 "matrix.yaml:5 matrix.python[0]: torch 2.0 has no wheels for Python 3.12; it has 3.8, 3.9, 3.10, 3.11",
                 id="torch-2.0-python-3.12"),
    pytest.param(BASE.replace('"2.9"', '"1.13"'),
                 "matrix.yaml:3 matrix.torch[0]: unknown torch 1.13; known: 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9, 2.10, 2.11, 2.12, 2.13, 2.14; did you mean '2.13'?",
                 id="unknown-torch"),
    pytest.param(BASE.replace("ubuntu22.04", "ubuntu2204"),
                 "matrix.yaml:6 matrix.os[0]: unknown os 'ubuntu2204'; known: ubuntu20.04, ubuntu22.04, ubuntu24.04, debian11, debian12, debian13; did you mean 'ubuntu22.04'?",
                 id="unknown-os"),
    pytest.param(BASE + '  cudnn: "8"\n',
                 "matrix.yaml:7 matrix.cudnn: torch 2.9.1 with CUDA 12.8 bundles cuDNN 9.10.2.21, not 8; cuDNN is fixed by torch and CUDA: write 9 or drop cudnn",
                 id="cudnn-assertion"),
    pytest.param(BASE.replace("  python:", "  pythn:"),
                 "matrix.yaml:5 matrix.pythn: unknown key; did you mean 'python'?",
                 id="unknown-key"),
    pytest.param(BASE + "layer:\n  base: {}\n",
                 "matrix.yaml:7 layer: unknown key; did you mean 'layers'?",
                 id="unknown-top-key"),
    pytest.param(BASE + "layers:\n  base: {}\n  cv: {parent: bse}\n",
                 "matrix.yaml:9 layers.cv.parent: parent 'bse' is not a layer here; layers: base, cv; did you mean 'base'?",
                 id="unknown-parent"),
    pytest.param(BASE + "verify:\n  thresholds: {gemm.bf16: {min: 0.5}}\n",
                 "matrix.yaml:8 verify.thresholds.gemm.bf16.min: unknown key",
                 id="threshold-key-the-payload-refuses"),
    pytest.param(BASE + "layers:\n  cv: {}\n",
                 "matrix.yaml:7 layers: a matrix needs a layer named base (OS + Python + torch)",
                 id="no-base-layer"),
    pytest.param(BASE + "layers:\n  base: {from: cuda-runtme}\n",
                 "matrix.yaml:8 layers.base.from: 'cuda-runtme' is not one of os, cuda-runtime, cuda-devel; did you mean 'cuda-runtime'?",
                 id="bad-choice"),
    pytest.param(BASE.replace("ubuntu22.04", "debian12") + "layers:\n  base: {from: cuda-devel}\n",
                 "matrix.yaml:6 matrix.os[0]: nvidia/cuda publishes no CUDA 12.8 images for debian12; it has ubuntu22.04, ubuntu24.04",
                 id="no-cuda-image-for-os"),
    pytest.param(BASE + "tags:\n  immutable: '{torch}-{cudaa}'\n",
                 "matrix.yaml:8 tags.immutable: unknown tag field {cudaa}; did you mean 'cuda'?; fields: torch, torch_minor, torch_major, cuda, cudnn, cudnn_major, nccl, python, os, layer, date, accel, variant, cell, arch",
                 id="bad-tag-field"),
    pytest.param(BASE + "tags:\n  immutable: '-{torch}'\n",
                 "matrix.yaml:8 tags.immutable: '-{torch}' cannot make a Docker tag ([A-Za-z0-9_.-], not starting with . or -, at most 128 characters)",
                 id="bad-tag-charset"),
    pytest.param(BASE + "tags:\n  immutable: '{torch}'\n  floating: ['v{torch_minor}']\n",
                 None,  # checked below: duplicate immutable tags are a plan-time error
                 id="placeholder-skip"),
    pytest.param(BASE + "verify:\n  tier: fast\n",
                 "matrix.yaml:8 verify.tier: 'fast' is not one of quick, standard, soak",
                 id="bad-tier"),
    pytest.param(BASE + "verify:\n  gpus: 0;1\n",
                 "matrix.yaml:8 verify.gpus: '0;1' is not all, none or a list of GPU indexes/UUIDs such as 0,1",
                 id="bad-gpus"),
    pytest.param(BASE + "verify:\n  require_gpu: sometimes\n",
                 "matrix.yaml:8 verify.require_gpu: expected true or false, got 'sometimes'",
                 id="bad-require-gpu"),
    pytest.param(BASE + "verify:\n  timeout: soon\n",
                 "matrix.yaml:8 verify.timeout: expected a whole number, got 'soon'",
                 id="bad-number"),
    pytest.param(BASE + "sources:\n  network: bridge\n",
                 "matrix.yaml:8 sources.network: 'bridge' is not one of default, host, none",
                 id="bad-network"),
    pytest.param(BASE + "sources:\n  credentials: [{host: pypi.example.com}]\n",
                 "matrix.yaml:8 sources.credentials[0]: a credential needs password_env (an environment variable) or file (holding user:password)",
                 id="credential-without-secret"),
    pytest.param(BASE + "layers:\n  base: {}\n  project: {requirements: nope.txt}\n",
                 "matrix.yaml:9 layers.project.requirements: nope.txt: no such file (looked at {tmp}/nope.txt)",
                 id="missing-requirements"),
    pytest.param(BASE + "matrix2: 1\n",
                 "matrix.yaml:7 matrix2: unknown key; did you mean 'matrix'?",
                 id="did-you-mean-matrix"),
    pytest.param("matrix: [1, 2\n",
                 "matrix.yaml:2:1: invalid YAML: did not find expected ',' or ']'",
                 id="malformed-yaml"),
    pytest.param("version: 2\n" + BASE.split("\n", 1)[1],
                 "matrix.yaml:1 version: schema version 2 is not supported; this imagesmith reads version 1",
                 id="schema-version"),
    pytest.param(BASE + "image:\n  repository: ML/Images\n",
                 "matrix.yaml:8 image.repository: 'ML/Images' is not a valid image repository (lowercase letters, digits, . _ - /)",
                 id="bad-repository"),
    pytest.param(BASE.replace("  os: [ubuntu22.04]\n", "  os: [ubuntu22.04]\n  include:\n    - {torch: '2.9', cuda: '12.6'}\n").replace('"2.9"', '"2.8"'),
                 "matrix.yaml:8 matrix.include[0]: this include matches no cell, so it adds one, but it lacks python, os",
                 id="include-partial-new-cell"),
    pytest.param("version: 1\nmatrix:\n  torch: []\n  cuda: []\n  python: []\n  os: []\n",
                 "matrix.yaml:2 matrix: the matrix has no cells; give each of torch, cuda, python, os at least one value, or list cells under include",
                 id="empty"),
    pytest.param(BASE + "layers:\n  base: {cuda_libs: copied}\n",
                 "matrix.yaml:8 layers.base.cuda_libs: 'copied' is not one of shared, venv",
                 id="bad-cuda-libs"),
    pytest.param(BASE + "layers:\n  base: {}\n  cv: {cuda_libs: venv}\n",
                 "matrix.yaml:9 layers.cv.cuda_libs: cuda_libs belongs to the base layer (where torch and its CUDA wheels are installed)",
                 id="cuda-libs-not-on-base"),
    pytest.param(BASE.replace('cuda: ["12.8"]', "cuda: [cpu]").replace('"2.9"', '"2.9"') + "layers:\n  base: {from: cuda-runtime}\n",
                 "matrix.yaml:8 layers.base.from: cuda-runtime needs a CUDA cell, but cell torch=2.9 cuda=cpu python=3.11 os=ubuntu22.04 is cpu; use from: os",
                 id="cuda-base-for-cpu-cell"),
]


@pytest.mark.parametrize("text, expected", [p for p in BAD if p.values[1] is not None])
def test_bad_matrix_first_message(write_matrix: Callable[..., Path], tmp_path: Path, text: str, expected: str) -> None:
    path = write_matrix(text)
    assert messages(path)[0] == expected.replace("{tmp}", str(tmp_path.resolve()))


def test_every_bad_cell_is_reported_once_with_alternatives(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(textwrap.dedent("""\
        matrix:
          torch: ["2.7", "2.8"]
          cuda: ["12.1", "13.0"]
          python: ["3.11"]
          os: [ubuntu22.04]
        """))
    assert messages(path) == [
        "matrix.yaml:3 matrix.cuda[0]: torch 2.7 has no CUDA 12.1 wheels; it has 11.8, 12.6, 12.8",
        "matrix.yaml:3 matrix.cuda[1]: torch 2.7 has no CUDA 13.0 wheels; it has 11.8, 12.6, 12.8",
        "matrix.yaml:3 matrix.cuda[0]: torch 2.8 has no CUDA 12.1 wheels; it has 12.6, 12.8, 12.9",
        "matrix.yaml:3 matrix.cuda[1]: torch 2.8 has no CUDA 13.0 wheels; it has 12.6, 12.8, 12.9",
    ]


def test_cells_removed_by_exclude_are_not_errors(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(textwrap.dedent("""\
        matrix:
          torch: ["2.8", "2.9"]
          cuda: ["12.8", "13.0"]
          python: ["3.11"]
          os: [ubuntu22.04]
          exclude:
            - {torch: "2.8", cuda: "13.0"}
        """))
    m = matrix.load(path)
    assert sorted((c.torch, c.cuda) for c in m.cells) == [("2.8", "12.8"), ("2.9", "12.8"), ("2.9", "13.0")]


def test_include_adds_cells_and_extra_keys_like_github_actions(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + "  include:\n    - {cuda: '12.8', cudnn: '9'}\n    - {torch: '2.13', cuda: cpu, python: '3.11', os: debian12}\n")
    m = matrix.load(path)
    assert [(c.torch, c.cuda, c.os, c.cudnn) for c in m.cells] == [("2.9", "12.8", "ubuntu22.04", "9"), ("2.13", "cpu", "debian12", None)]


def test_unquoted_versions_stay_strings(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix("matrix:\n  torch: [2.10]\n  cuda: [12.8]\n  python: [3.10]\n  os: [ubuntu22.04]\n")
    m = matrix.load(path)
    assert (m.cells[0].torch, m.cells[0].python) == ("2.10", "3.10")


WARN = [
    pytest.param("base_images:\n  ubuntu22.04: ubuntu:latest\n",
                 "matrix.yaml:8 base_images.ubuntu22.04: warning: 'ubuntu:latest' is a mutable tag; pin it by digest (ubuntu@sha256:...) or a dated tag so every build starts from the same bytes",
                 id="latest-base"),
    pytest.param("layers:\n  base: {}\n  cv: {packages: [opencv-python-headless]}\n",
                 "matrix.yaml:9 layers.cv.packages[0]: warning: 'opencv-python-headless' is not pinned; pin it (opencv-python-headless==X.Y.Z) so that rebuilds install the same thing",
                 id="unpinned-package"),
    pytest.param("layers:\n  base: {}\n  project: {parent: base, requirements: req.txt}\n",
                 "matrix.yaml:9 layers.project.requirements: warning: req.txt:2: numpy is not pinned; pin it (numpy==X.Y.Z) so that rebuilds install the same thing",
                 id="unpinned-requirement"),
]


@pytest.mark.parametrize("extra, expected", WARN)
def test_suspicious_input_warns_with_a_hint(write_matrix: Callable[..., Path], extra: str, expected: str) -> None:
    path = write_matrix(BASE + extra, **{"req.txt": "rich==15.0.0\nnumpy>=1.0\n"})
    assert [str(w) for w in matrix.load(path).warnings] == [expected]


def test_torch_and_torchvision_unpinned_are_resolved_not_warned(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + "layers:\n  base: {}\n  cv: {packages: [torchvision, torchaudio]}\n")
    assert matrix.load(path).warnings == ()


@pytest.mark.parametrize("name", ["matrix.yaml", "examples/local.yaml", "examples/multiarch.yaml"])
def test_shipped_matrices_are_valid_and_quiet(name: str) -> None:
    from tests.conftest import LOCAL_ROOTS, ROOT

    m = matrix.load(ROOT / name, allowed_roots=LOCAL_ROOTS)
    assert m.cells and m.warnings == ()


def test_layers_are_ordered_parents_first(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + "layers:\n  project: {parent: nlp}\n  nlp: {}\n  base: {}\n")
    assert [layer.name for layer in matrix.load(path).layers] == ["base", "nlp", "project"]


def test_layer_cycle_is_an_error(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + "layers:\n  base: {}\n  a: {parent: b}\n  b: {parent: a}\n")
    assert "layers form a cycle: a, b" in messages(path)[0]


def test_each_generation_of_layers_keeps_the_matrix_order(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + "layers:\n  project: {parent: nlp}\n  tools: {parent: cv}\n  nlp: {}\n  cv: {}\n  base: {}\n")
    assert [layer.name for layer in matrix.load(path).layers] == ["base", "nlp", "cv", "project", "tools"]


def test_a_layer_cycle_names_its_layers_not_their_children(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + "layers:\n  base: {}\n  a: {parent: b}\n  b: {parent: a}\n  c: {parent: a}\n")
    assert messages(path) == ["matrix.yaml:7 layers: layers form a cycle: a, b"]


# -- values that reach files, and paths ----------------------------------------------------

LAYERS = "layers:\n  base: {}\n  project: {parent: base, requirements: r.txt}\n"
ENTRY = [
    pytest.param(BASE + 'image:\n  user: "ml\\nRUN id"\n',
                 "matrix.yaml:8 image.user: holds control character U+000A; remove it (escapes such as \\n or \\t are not allowed in values)", id="control"),
    pytest.param(BASE + "image:\n  user: root\n", "matrix.yaml:8 image.user: the images' default user must not be root; write a name such as ml", id="user-root"),
    pytest.param(BASE + "layers:\n  base: {apt: ['curl; curl x | sh']}\n",
                 "matrix.yaml:8 layers.base.apt[0]: 'curl; curl x | sh' is not a Debian package name; write lowercase letters, digits, + - . (at least two characters), optionally =VERSION, e.g. curl or curl=7.88.1-10+deb12u8", id="apt"),
    pytest.param(BASE + "layers:\n  base: {env: {'A B': x}}\n",
                 "matrix.yaml:8 layers.base.env['A B']: 'A B' is not an environment variable name; write letters, digits and _, not starting with a digit (e.g. HF_HOME)", id="env-key"),
    pytest.param(BASE + "layers:\n  base: {packages: ['x @ https://evil/x.whl']}\n",
                 "matrix.yaml:8 layers.base.packages[0]: 'x @ https://evil/x.whl' installs from a URL; put wheel folders or indexes under sources: and write x==VERSION here", id="package-url"),
    pytest.param(BASE + "base_images:\n  ubuntu22.04: 'ubuntu:24.04 AS evil'\n",
                 "matrix.yaml:8 base_images.ubuntu22.04: 'ubuntu:24.04 AS evil' is not an image reference (invalid reference format); write e.g. ubuntu:24.04 or registry.example.com/base/ubuntu@sha256:...", id="base-image"),
    pytest.param(BASE + LAYERS.replace("r.txt", "/etc/passwd"),
                 "matrix.yaml:9 layers.project.requirements: /etc/passwd resolves to /etc/passwd, outside {tmp}; keep it in the matrix's folder, or allow its folder on the command line: --allow-root /etc", id="requirements-outside"),
    pytest.param(BASE + LAYERS.replace("r.txt", "link.txt"),
                 "matrix.yaml:9 layers.project.requirements: link.txt resolves to /etc/passwd, outside {tmp}; keep it in the matrix's folder, or allow its folder on the command line: --allow-root /etc", id="requirements-symlink"),
    pytest.param(BASE + LAYERS.replace("r.txt", "sub"), "matrix.yaml:9 layers.project.requirements: sub is not a regular file", id="requirements-folder"),
    pytest.param(BASE + LAYERS.replace("r.txt", "opts.txt"),
                 "matrix.yaml:9 layers.project.requirements: opts.txt:1: --index-url is not allowed here: the file is copied alone into the build context, so package sources belong in the matrix (sources:, packages:, requirements:)", id="requirements-index"),
    pytest.param(BASE + LAYERS.replace("r.txt", "passwd.txt"),
                 "matrix.yaml:9 layers.project.requirements: passwd.txt:1: not a requirement pip understands (PEP 508); write name==version, one per line", id="requirements-garbage"),
    pytest.param(BASE + "sources:\n  find_links: [/]\n",
                 "matrix.yaml:8 sources.find_links[0]: / resolves to /, outside {tmp}; keep it in the matrix's folder, or allow its folder on the command line: --allow-root /", id="find-links-root"),
    pytest.param(BASE + "sources:\n  ca_bundle: r.txt\n",
                 "matrix.yaml:8 sources.ca_bundle: r.txt holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA bundle of your proxy", id="ca-not-pem"),
    pytest.param(BASE + "layers:\n  base: {template: ../x.j2}\n",
                 "matrix.yaml:8 layers.base.template: ../x.j2 resolves to {parent}/x.j2, outside {tmp}; keep it in the matrix's folder, or allow its folder on the command line: --allow-root {parent}", id="template-outside"),
    pytest.param(BASE + "sources:\n  credentials: [{host: pypi.example.com, file: /root/.git-credentials}]\n",
                 "matrix.yaml:8 sources.credentials[0].file: /root/.git-credentials resolves to /root/.git-credentials, outside {tmp}; keep it in the matrix's folder, or allow its folder on the command line: --allow-root /root", id="credentials-file"),
]


@pytest.mark.parametrize("text, expected", ENTRY)
def test_values_are_checked_against_what_they_become(write_matrix: Callable[..., Path], tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "link.txt").symlink_to("/etc/passwd")
    (tmp_path / "x.j2").write_text("FROM scratch\n")
    path = write_matrix(text, name="m/matrix.yaml", **{"m/r.txt": "rich==15.0.0\n", "m/opts.txt": "--index-url https://evil/simple\n",
                                                       "m/passwd.txt": "root:x:0:0:root:/root:/bin/bash\n"})
    root = path.parent.resolve()
    assert messages(path)[0] == expected.replace("{tmp}", str(root)).replace("{parent}", str(root.parent))


def test_an_allowed_root_admits_a_path_outside_the_matrix_folder(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    outside = tmp_path / "shared"
    (outside / "req").mkdir(parents=True)
    (outside / "req" / "r.txt").write_text("rich==15.0.0\n")
    path = write_matrix(BASE + LAYERS.replace("r.txt", "../shared/req/r.txt"), name="m/matrix.yaml")
    assert "outside" in messages(path)[0]
    m = matrix.load(path, allowed_roots=[outside])
    assert m.layer("project").requirements_data == b"rich==15.0.0\n" and m.layer("project").requirements_pins == ("rich==15.0.0",)


def test_requirement_warnings_name_the_package_and_never_quote_the_file(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(BASE + LAYERS, **{"r.txt": "rich==15.0.0\nSECRET-TOKEN>=1  # x\n"})
    warnings = [str(w) for w in matrix.load(path).warnings]
    assert warnings == ["matrix.yaml:9 layers.project.requirements: warning: r.txt:2: SECRET-TOKEN is not pinned; pin it (SECRET-TOKEN==X.Y.Z) so that rebuilds install the same thing"]
    assert "# x" not in warnings[0] and ">=1" not in warnings[0]
