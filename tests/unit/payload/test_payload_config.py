"""The payload's config (config.py) and baselines (baselines.py): parsing, errors, overrides."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

VERIFY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify")
sys.path.insert(0, VERIFY)

from imagesmith_payload import baselines, config  # noqa: E402
from imagesmith_payload.config import Config, ConfigError, Expected  # noqa: E402

FULL = {
    "schema": "imagesmith.verify-config/1", "tier": "standard", "require_gpu": True, "expect_gpus": 8,
    "expected": {"torch": "2.14.1", "cuda": "13.0", "cudnn": "9.24.0", "nccl": "2.30.7", "python": "3.11",
                 "os": "debian12", "packages": {"torchvision": "0.29.1"}},
    "driver": {"toolkit_driver": "580.65.06", "min_driver": "580.00.00"},
    "layers": ["cv", "nlp"], "security": {"expect_non_root": True},
    "thresholds": {"gemm.bf16": {"baseline": 784.0, "fail_fraction": 0.75, "warn_fraction": 0.9}},
    "soak_minutes": 30, "leak_inject_mib": 1,
}


def test_the_documented_example_parses() -> None:
    cfg = config.parse_config(FULL)
    assert cfg.tier == "standard" and cfg.require_gpu and cfg.expect_gpus == 8
    assert cfg.expected == Expected("2.14.1", "13.0", "9.24.0", "2.30.7", "3.11", "debian12",
                                    {"torchvision": "0.29.1"})
    assert (cfg.toolkit_driver, cfg.min_driver) == ("580.65.06", "580.00.00")
    assert cfg.layers == ("cv", "nlp") and cfg.expect_non_root is True
    assert cfg.thresholds == {"gemm.bf16": {"baseline": 784.0, "fail_fraction": 0.75, "warn_fraction": 0.9}}
    assert (cfg.soak_minutes, cfg.leak_inject_mib) == (30.0, 1.0)


@pytest.mark.parametrize("data", [{}, None, {"schema": "imagesmith.verify-config/1"}])
def test_every_key_is_optional(data: Any) -> None:
    assert config.parse_config(data) == Config()


@pytest.mark.parametrize("data, message", [
    ([], "config key '': expected an object, got []"),
    ({"tier": "fast"}, "config key 'tier': expected one of quick, standard, soak, got 'fast'"),
    ({"schema": "v2"}, "config key 'schema': expected 'imagesmith.verify-config/1', got 'v2'"),
    ({"tiers": "quick"}, "config key 'tiers': unknown key; known: tier, require_gpu, expect_gpus, gpus, allow_cpu, allow_shared_gpu, gpu_unavailable, soak_minutes, "
     "leak_inject_mib, burn_seconds, contention_processes, collective_timeout_s, schema, expected, driver, "
     "layers, security, thresholds, nonce, checks, image"),
    ({"require_gpu": "yes"}, "config key 'require_gpu': expected true or false, got 'yes'"),
    ({"gpus": "0;1"}, "config key 'gpus': expected all, none, auto or a list such as 0,1, got '0;1'"),
    ({"gpus": "0,,1"}, "config key 'gpus': expected all, none, auto or a list such as 0,1, got '0,,1'"),
    ({"gpus": 0}, "config key 'gpus': expected a string, got 0 (quote version numbers: \"3.10\", not 3.10)"),
    ({"allow_cpu": 1}, "config key 'allow_cpu': expected true or false, got 1"),
    ({"expect_gpus": 1.5}, "config key 'expect_gpus': expected an integer, got 1.5"),
    ({"expect_gpus": True}, "config key 'expect_gpus': expected an integer, got True"),
    ({"soak_minutes": -1}, "config key 'soak_minutes': must be >= 0, got -1.0"),
    ({"expected": {"python": 3.1}},
     "config key 'expected.python': expected a string, got 3.1 (quote version numbers: \"3.10\", not 3.10)"),
    ({"expected": {"torchvision": "0.24"}},
     "config key 'expected.torchvision': unknown key; known: torch, cuda, cudnn, nccl, python, os, cuda_libs, packages"),
    ({"expected": {"packages": {"numpy": 2}}},
     "config key 'expected.packages.numpy': expected a string, got 2 (quote version numbers: \"3.10\", not 3.10)"),
    ({"driver": {"toolkit": "580"}}, "config key 'driver.toolkit': unknown key; known: toolkit_driver, min_driver, "
                                      "releases"),
    ({"driver": {"releases": {"release": "12.8.1"}}}, "config key 'driver.releases': expected a list, got "
                                                      "{'release': '12.8.1'}"),
    ({"driver": {"releases": [{"release": "12.8.1", "cudart": 12.8, "driver": "570.124.06"}]}},
     "config key 'driver.releases[0].cudart': expected a string, got 12.8 (quote version numbers: \"3.10\", not 3.10)"),
    ({"driver": {"releases": [{"release": "12.8.1", "cudart": "12.8.90"}]}},
     "config key 'driver.releases[0].driver': missing; a release needs release, cudart, driver"),
    ({"driver": {"releases": [{"release": "12.8.1", "cudart": "12.8.90", "driver": "1", "when": "x"}]}},
     "config key 'driver.releases[0].when': unknown key; known: release, cudart, driver, min_driver"),
    ({"layers": "cv"}, "config key 'layers': expected a list of names, got 'cv'"),
    ({"layers": ["cv", 1]}, "config key 'layers[1]': expected a string, got 1 (quote version numbers: \"3.10\", "
     "not 3.10)"),
    ({"security": {"expect_non_root": "true"}},
     "config key 'security.expect_non_root': expected true or false, got 'true'"),
    ({"thresholds": {"gemm.bf16": {"base": 1}}},
     "config key 'thresholds.gemm.bf16.base': unknown key; known: baseline, fail_fraction, warn_fraction"),
    ({"thresholds": {"gemm.bf16": {"baseline": "784"}}},
     "config key 'thresholds.gemm.bf16.baseline': expected a number, got '784'"),
])
def test_config_errors_name_the_key(data: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.parse_config(data)
    assert str(err.value) == message


def test_cli_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"tier": "quick", "require_gpu": False, "expected": {"torch": "2.9"}}))
    cfg = config.with_overrides(config.load_config_file(str(path)), tier="standard", require_gpu=True,
                                soak_minutes=None, only=("gemm",), skip=None)
    assert (cfg.tier, cfg.require_gpu, cfg.only, cfg.skip, cfg.soak_minutes) == ("standard", True, ("gemm",), (), 30.0)


def test_expect_splits_core_versions_from_packages() -> None:
    base = config.parse_config({"expected": {"torch": "2.9", "packages": {"numpy": "2"}}})
    cfg = config.with_expectations(base, {"torch": "2.10.0", "cuda": "12.8", "torchvision": "0.25"})
    assert cfg.expected == Expected(torch="2.10.0", cuda="12.8", packages={"numpy": "2", "torchvision": "0.25"})


@pytest.mark.parametrize("text, message", [
    (None, "cannot read"), ("{not json", "not valid JSON"),
])
def test_unreadable_config_file(tmp_path: Path, text: Any, message: str) -> None:
    path = tmp_path / "c.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        config.load_config_file(str(path))


# ------------------------------------------------------------------- baselines
def test_the_baselines_file_holds_the_h200_reference() -> None:
    data = baselines.load_baselines()
    h200 = {k: v["value"] for k, v in data["gpus"]["NVIDIA H200"].items()}
    assert {k: h200[k] for k in ("gemm.bf16", "gemm.fp16", "gemm.tf32", "gemm.fp32", "bandwidth.d2d",
                                 "bandwidth.h2d", "sdpa.perf")} == {
        "gemm.bf16": 784.0, "gemm.fp16": 754.0, "gemm.tf32": 345.0, "gemm.fp32": 49.0,
        "bandwidth.d2d": 4238.0, "bandwidth.h2d": 55.0, "sdpa.perf": 476.0}
    assert all(v["unit"] and v["source"] for v in data["gpus"]["NVIDIA H200"].values())


@pytest.mark.parametrize("gpu, check_id, overrides, expected", [
    ("NVIDIA H200", "gemm.bf16", {}, (784.0, 588.0, 705.6)),
    ("NVIDIA H200", "gemm.bf16", {"gemm.bf16": {"fail_fraction": 0.5}}, (784.0, 392.0, 705.6)),
    ("NVIDIA H200", "gemm.bf16", {"gemm.bf16": {"baseline": 1000.0}}, (1000.0, 750.0, 900.0)),
    ("NVIDIA A100-SXM4-80GB", "gemm.bf16", {}, None),
    ("NVIDIA A100-SXM4-80GB", "gemm.bf16", {"gemm.bf16": {"baseline": 280.0}}, (280.0, 210.0, 252.0)),
    (None, "gemm.bf16", {}, None),
    ("NVIDIA H200", "no.such.check", {}, None),
])
def test_threshold_for(gpu: Any, check_id: str, overrides: dict[str, Any], expected: Any) -> None:
    thr = baselines.threshold_for(baselines.load_baselines(), gpu, check_id, overrides)
    got = None if thr is None else (thr.baseline, thr.fail_below, thr.warn_below)
    assert got == (None if expected is None else pytest.approx(tuple(expected)))


def test_a_missing_baselines_file_means_no_baselines(tmp_path: Path) -> None:
    assert baselines.load_baselines(str(tmp_path / "none.json")) == {"schema": baselines.SCHEMA, "gpus": {}}


def test_a_baselines_file_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "baselines.json"
    path.write_text("[]")
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}: expected a JSON object with schema 'imagesmith.baselines/1', got a list") + "$"):
        baselines.load_baselines(str(path))
