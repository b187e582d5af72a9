"""The layer plan: which cells share which CUDA wheel set, and what the plan says about it."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest

from imagesmith.model import compat, footprint, matrix, plan
from imagesmith.model.buildreport import BuildReport, CudaLayer, TargetResult
from tests.conftest import LOCAL_ROOTS, ROOT

DATE = "20261130"
MATRIX = textwrap.dedent("""\
    version: 1
    matrix:
      torch: ["2.14.1"]
      cuda: ["13.0"]
      python: ["3.11", "3.12"]
      os: [debian12, debian13]
      include:
        - {torch: "2.13", cuda: cpu, python: "3.11", os: debian12}
    layers:
      base: {}
      nlp: {packages: ["transformers==5.18.0"]}
    """)


def expand(write_matrix: Any, text: str = MATRIX, kb: compat.KnowledgeBase | None = None) -> plan.Plan:
    return plan.expand(matrix.load(write_matrix(text)), DATE, kb)


def sets(p: plan.Plan) -> dict[str, str | None]:
    return {t.id: t.cuda_set.id if t.cuda_set else None for t in p.targets}


def test_every_cuda_cell_of_one_torch_variant_shares_one_set(write_matrix: Any) -> None:
    p = expand(write_matrix)
    bases = {tid: s for tid, s in sets(p).items() if tid.endswith("-base")}
    assert bases["2.13.0-cpu-py3.11-debian12-base"] is None
    cuda = {tid: s for tid, s in bases.items() if "cu130" in tid}
    assert len(cuda) == 4 and len(set(cuda.values())) == 1  # two Pythons x two OSes: one set
    assert all(s is None for tid, s in sets(p).items() if not tid.endswith("-base"))  # children inherit it


def test_the_set_is_torch_s_cuda_wheels_from_the_knowledge_base(write_matrix: Any) -> None:
    t = next(t for t in expand(write_matrix).targets if t.cuda_set)
    assert t.cuda_set is not None
    kb_wheels = compat.load().torch["2.14.1"].variants["cu130"].wheels
    assert t.cuda_set.wheels == tuple(sorted(kb_wheels, key=lambda w: w.name))
    assert "nvidia-cudnn-cu13==9.24.0.43" in t.cuda_set.pins and "nvidia-nccl-cu13==2.30.7" in t.cuda_set.pins
    assert t.cuda_set.prefix == "/opt/imagesmith/cuda" and t.cuda_set.id.startswith("cu130-")
    assert plan.cuda_image(t, "imagesmith/local") == f"imagesmith/local:cuda-{t.cuda_set.id}-{t.versions.os}"


def test_cuda_libs_venv_keeps_today_s_layout(write_matrix: Any) -> None:
    p = expand(write_matrix, MATRIX.replace("base: {}", "base: {cuda_libs: venv}"))
    assert set(sets(p).values()) == {None} and not p.warnings


def with_wheels(kb: compat.KnowledgeBase, torch: str, variant: str, wheels: tuple[compat.Wheel, ...]) -> compat.KnowledgeBase:
    release = kb.torch[torch]
    variants = dict(release.variants) | {variant: dataclasses.replace(release.variants[variant], wheels=wheels)}
    return dataclasses.replace(kb, torch=dict(kb.torch) | {torch: dataclasses.replace(release, variants=variants)})


def test_two_torch_releases_with_the_same_pins_share_one_set_and_one_pin_more_splits_them(write_matrix: Any) -> None:
    kb = compat.load()
    same = with_wheels(kb, "2.14.0", "cu130", kb.torch["2.14.1"].variants["cu130"].wheels)
    text = MATRIX.replace('torch: ["2.14.1"]', 'torch: ["2.14.0", "2.14.1"]').replace("python: [\"3.11\", \"3.12\"]", "python: [\"3.11\"]")
    shared = {s for tid, s in sets(expand(write_matrix, text, same)).items() if "cu130" in tid and s}
    assert len(shared) == 1
    extra = same.torch["2.14.0"].variants["cu130"].wheels + (compat.Wheel("nvidia-extra", "1.0", 1),)
    split = {s for tid, s in sets(expand(write_matrix, text, with_wheels(same, "2.14.0", "cu130", extra))).items() if "cu130" in tid and s}
    assert len(split) == 2


def test_a_variant_without_a_recorded_set_keeps_its_libraries_in_the_venv_and_says_so(write_matrix: Any) -> None:
    text = MATRIX.replace('"2.14.1"', '"2.14.1"').replace('cuda: ["13.0"]', 'cuda: ["12.6"]')
    p = expand(write_matrix, text)
    assert set(sets(p).values()) == {None}
    assert p.warnings == (
        "matrix.yaml:10 layers.base.cuda_libs: warning: the knowledge base records no CUDA wheel set for torch 2.14.1 cu126; "
        "its CUDA libraries stay in each cell's venv (record the set in compat.yaml, see bench/kb_cuda_wheels.py)",)


def test_shipped_sets_agree_with_the_variant_s_cudnn_and_nccl() -> None:
    """One fact, two places: the cuDNN/NCCL pins of a recorded set are the variant's cudnn/nccl."""
    for release in compat.load().torch.values():
        for variant in release.variants.values():
            if not variant.wheels:
                continue
            pins = {w.name: w.version for w in variant.wheels}
            cudnn = next(v for n, v in pins.items() if n.startswith("nvidia-cudnn"))
            nccl = next(v for n, v in pins.items() if n.startswith("nvidia-nccl"))
            assert (cudnn, nccl) == (variant.cudnn, variant.nccl), f"{release.version} {variant.name}"
            assert all(w.bytes > 0 for w in variant.wheels)


@pytest.mark.parametrize("name", ["examples/local.yaml", "matrix.yaml"])
def test_cuda_sets_survive_plan_json(name: str, tmp_path: Path) -> None:
    p = plan.expand(matrix.load(ROOT / name, allowed_roots=LOCAL_ROOTS), DATE)
    plan.write(p, tmp_path / "plan.json")
    assert [t.cuda_set for t in plan.read(tmp_path / "plan.json").targets] == [t.cuda_set for t in p.targets]


# -- what the plan says each target stores and shares (footprint) --------------------------------


def test_estimate_counts_one_copy_per_cell_today_and_one_per_set_shared(write_matrix: Any) -> None:
    p = expand(write_matrix)
    kb = compat.load()
    wheels = sum(w.bytes for w in kb.torch["2.14.1"].variants["cu130"].wheels)
    est = footprint.estimate(p, kb)
    assert (est.cells, est.sets, est.today_bytes, est.shared_bytes, est.unknown) == (4, 1, 4 * wheels, wheels, ())
    venv = footprint.estimate(expand(write_matrix, MATRIX.replace("base: {}", "base: {cuda_libs: venv}")), kb)
    assert (venv.sets, venv.today_bytes, venv.shared_bytes) == (0, 4 * wheels, 4 * wheels)


def test_layer_rows_estimate_before_a_build_and_measure_after(write_matrix: Any) -> None:
    p = expand(write_matrix, MATRIX.replace('python: ["3.11", "3.12"]', 'python: ["3.11"]').replace(", debian13", ""))
    kb = compat.load()
    base, nlp = "2.14.1-cu130-py3.11-debian12-base", "2.14.1-cu130-py3.11-debian12-nlp"
    before = {r.target: r for r in footprint.rows(p, kb)}
    t = p.by_id()[base]
    assert before[base] == footprint.LayerRow(base, t.cuda_set.id, 1, t.cuda_set.wheel_bytes, None, False)  # type: ignore[union-attr]
    assert before[nlp] == footprint.LayerRow(nlp, t.cuda_set.id, 1, None, None, False)  # type: ignore[union-attr]
    assert before["2.13.0-cpu-py3.11-debian12-base"].cuda == "-"
    report = BuildReport("m.yaml", "t", 1.0, {}, (TargetResult(base, "built", size_bytes=6_000), TargetResult(nlp, "built", size_bytes=6_500)),
                         (CudaLayer(t.cuda_set.id, t.base_image, layer_bytes=3_000, image_bytes=3_100),))  # type: ignore[union-attr]
    after = {r.target: r for r in footprint.rows(p, kb, report)}
    assert (after[base].cuda_bytes, after[base].own_bytes, after[base].measured) == (3_000, 2_900, True)
    assert (after[nlp].cuda_bytes, after[nlp].own_bytes) == (None, 500)
