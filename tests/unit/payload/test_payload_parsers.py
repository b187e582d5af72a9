"""The payload's parsers of system files and tool output (parsers.py): text in, values out."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import parsers
from imagesmith_payload.checks.layers import nms_reference


@pytest.mark.parametrize("text, tag", [
    ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n', "debian12"),
    ('ID=ubuntu\nVERSION_ID="22.04"\nID_LIKE=debian\n', "ubuntu22.04"),
    ('ID="rocky"\nVERSION_ID="9.4"\n', "rocky9.4"),
    ("ID=debian\nVERSION_ID=11.7\n", "debian117"),
    ("# comment\nNAME=x\n", "unknown"),
])
def test_os_tag_from_os_release(text: str, tag: str) -> None:
    assert parsers.os_tag(parsers.parse_os_release(text)) == tag


@pytest.mark.parametrize("text, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 30 2026\nGCC version:  gcc 12\n",
     "580.159.04"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.10  Release Build\n", "570.86.10"),
    ("nothing here", None),
])
def test_proc_driver_version(text: str, version: Any) -> None:
    assert parsers.parse_proc_driver_version(text) == version


@pytest.mark.parametrize("text, parsed", [
    ("torch=2.9.1,cuda=12.8", {"torch": "2.9.1", "cuda": "12.8"}),
    (" torch = 2.9.1 , torchvision=0.24 ,", {"torch": "2.9.1", "torchvision": "0.24"}),
    ("", {}),
    ("cuda=cpu", {"cuda": "cpu"}),
    ("cuda=CPU,Torch=2.13.0+cpu", {"cuda": "cpu", "torch": "2.13.0+cpu"}),
    ("cudnn=9.10.2.21,nccl=2.27.5,python=3.11,os=ubuntu24.04", {"cudnn": "9.10.2.21", "nccl": "2.27.5",
                                                                "python": "3.11", "os": "ubuntu24.04"}),
    ("pip:Einops_X=0.8.1,torch=2.10.0rc1", {"einops-x": "0.8.1", "torch": "2.10.0rc1"}),
    ("cuda_libs=/opt/imagesmith/cuda,cuda=13.0", {"cuda_libs": "/opt/imagesmith/cuda", "cuda": "13.0"}),
])
def test_parse_expect(text: str, parsed: dict[str, Any]) -> None:
    assert parsers.parse_expect(text) == parsed


KNOWN = ("known: torch, cuda, cudnn, nccl, python, os, cuda_libs, torchvision, torchaudio, triton, numpy, transformers, "
         "tokenizers, opencv-python-headless, opencv-python, or pip:NAME for any other Python distribution")
VERSION = "a version such as 2.9.1 (a prefix such as 2.9 matches 2.9.x)"


@pytest.mark.parametrize("text, message", [
    ("torch", "item 'torch': expected NAME=VERSION, e.g. torch=2.9.1"),
    ("torch=", "item 'torch=': expected NAME=VERSION, e.g. torch=2.9.1"),
    ("=2.9", "item '=2.9': expected NAME=VERSION, e.g. torch=2.9.1"),
    ("torch==2.9.1", "item 'torch==2.9.1': write one '=': torch=2.9.1"),
    ("torch=2.13.0;cuda=12.8", f"item 'torch=2.13.0;cuda=12.8': '2.13.0;cuda=12.8' is not {VERSION}; "
                               "separate items with commas: torch=2.9.1,cuda=12.8"),
    ("torch=2.9.1 cuda=12.8", f"item 'torch=2.9.1 cuda=12.8': '2.9.1 cuda=12.8' is not {VERSION}; "
                              "separate items with commas: torch=2.9.1,cuda=12.8"),
    ("torhc=2.9.1", f"item 'torhc=2.9.1': unknown name 'torhc'; did you mean 'torch'? {KNOWN}"),
    ("einops=0.8", f"item 'einops=0.8': unknown name 'einops'; {KNOWN}"),
    ("cuda=12", "item 'cuda=12': '12' is not a CUDA version such as 12.8, or cpu for a CPU-only build"),
    ("cuda=cu128", "item 'cuda=cu128': 'cu128' is not a CUDA version such as 12.8, or cpu for a CPU-only build"),
    ("torch=latest", f"item 'torch=latest': 'latest' is not {VERSION}"),
    ("os=Debian 12", "item 'os=Debian 12': 'Debian 12' is not an OS tag such as debian12 or ubuntu24.04"),
    ("pip:=1", "item 'pip:=1': '' is not a Python distribution name"),
    ("cuda_libs=opt/cuda", "item 'cuda_libs=opt/cuda': 'opt/cuda' is not an absolute folder such as /opt/imagesmith/cuda"),
    ("torch=2.9,torch=2.10", "item 'torch=2.10': torch is expected twice; give it once"),
])
def test_parse_expect_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parsers.parse_expect(text)
    assert str(err.value) == message


# ------------------------------------------------------------------------ sshd
def fake_fs(files: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[str], list[str]]]:
    def read(path: str) -> Any:
        return files.get(path)

    def glob(pattern: str) -> list[str]:
        import fnmatch
        return [p for p in files if fnmatch.fnmatch(p, pattern)]
    return read, glob


@pytest.mark.parametrize("files, settings", [
    ({"/etc/ssh/sshd_config": "PasswordAuthentication no\nPermitRootLogin no\n"},
     {"passwordauthentication": "no", "permitrootlogin": "no"}),
    # first value wins, and an Include before it counts first (Debian's layout)
    ({"/etc/ssh/sshd_config": "Include /etc/ssh/sshd_config.d/*.conf\nPasswordAuthentication no\n",
      "/etc/ssh/sshd_config.d/50-cloud.conf": "PasswordAuthentication yes\n"},
     {"include": None, "passwordauthentication": "yes"}),
    # relative Include, comments, '=' syntax, case
    ({"/etc/ssh/sshd_config": "# x\nInclude sshd_config.d/*.conf\npermitrootlogin=yes # old\n",
      "/etc/ssh/sshd_config.d/10.conf": "PERMITROOTLOGIN no\n"},
     {"permitrootlogin": "no"}),
    # Match blocks are not global
    ({"/etc/ssh/sshd_config": "PermitRootLogin no\nMatch User bob\n  PasswordAuthentication yes\n"},
     {"permitrootlogin": "no"}),
    ({}, {}),
])
def test_sshd_effective(files: dict[str, Any], settings: dict[str, Any]) -> None:
    got = parsers.sshd_effective(*fake_fs(files))
    expected = {k: v for k, v in settings.items() if v is not None}
    assert {k: got.get(k) for k in expected} == expected
    assert ("passwordauthentication" in got) == ("passwordauthentication" in expected)


def test_sshd_t_output() -> None:
    assert parsers.parse_sshd_t("port 22\npermitrootlogin without-password\npasswordauthentication no\n") == \
        {"port": "22", "permitrootlogin": "without-password", "passwordauthentication": "no"}


@pytest.mark.parametrize("settings, status, problems", [
    ({"passwordauthentication": "no", "permitrootlogin": "no"}, "pass", []),
    ({}, "fail", ["PasswordAuthentication yes (default yes); set it to no",
                  "PermitRootLogin prohibit-password: root may log in with a key; set it to no"]),
    ({"passwordauthentication": "no", "permitrootlogin": "prohibit-password"}, "warn",
     ["PermitRootLogin prohibit-password: root may log in with a key; set it to no"]),
    ({"passwordauthentication": "no", "permitrootlogin": "yes"}, "fail", ["PermitRootLogin yes; set it to no"]),
])
def test_judge_sshd(settings: dict[str, Any], status: str, problems: list[Any]) -> None:
    assert parsers.judge_sshd(settings) == (status, problems)


@pytest.mark.parametrize("text, open_", [
    ("c.ServerApp.token = ''\n", True),
    ('c.NotebookApp.token = ""\nc.NotebookApp.password = ""\n', True),
    ("c.ServerApp.token = ''\nc.ServerApp.password = 'argon2:$abc'\n", False),
    ("c.ServerApp.token = 'secret'\n", False),
    ("# c.ServerApp.token = ''\n", False),
])
def test_jupyter_config_disables_auth(text: str, open_: bool) -> None:
    assert parsers.jupyter_config_disables_auth(text) is open_


@pytest.mark.parametrize("name, patterns, hit", [
    ("gemm.bf16", ["gemm.bf16"], True), ("gemm.bf16", ["gemm"], True), ("gemm.bf16", ["gem"], False),
    ("gemm.bf16", ["gemm.*"], True), ("layers.cv.ops", ["layers.cv"], True), ("leak.host", ["*.host"], True),
    ("driver", ["drive"], False), ("driver", [], False),
])
def test_check_selection_patterns(name: str, patterns: list[Any], hit: bool) -> None:
    assert parsers.matches_any(name, patterns) is hit


@pytest.mark.parametrize("boxes, scores, keep", [
    ([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], [0.9, 0.8, 0.7], [0, 2]),
    ([[0, 0, 10, 10], [1, 1, 11, 11]], [0.1, 0.8], [1]),
    ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.9, 0.8], [0, 1]),  # IoU 1/3 <= 0.5: both kept
])
def test_nms_reference(boxes: list[Any], scores: list[Any], keep: list[Any]) -> None:
    assert nms_reference(boxes, scores, 0.5) == keep


MAPS = """\
7f0000000000-7f0000001000 r--p 00000000 00:2a 123 /opt/imagesmith/cuda/nvidia/cudnn/lib/libcudnn.so.9
7f0000001000-7f0000002000 r-xp 00001000 00:2a 123 /opt/imagesmith/cuda/nvidia/cudnn/lib/libcudnn.so.9
7f0000003000-7f0000004000 r--p 00000000 00:2a 124 /opt/imagesmith/cuda/nvidia/nccl/lib/libnccl.so.2
7f0000005000-7f0000006000 r--p 00000000 00:2a 125 /opt/imagesmith/cuda/nvidia/cu13/lib/libcublasLt.so.13
7f0000007000-7f0000008000 r--p 00000000 00:2a 126 /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so
7f0000009000-7f000000a000 r--p 00000000 00:2a 127 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06
7f000000b000-7f000000c000 r--p 00000000 00:2a 128 /opt/imagesmith/cuda/nvidia/cu13/lib/libnvrtc-builtins.so.13.0
7f000000d000-7f000000e000 rw-p 00000000 00:00 0 [heap]
7f000000f000-7f0000010000 rw-p 00000000 00:00 0
"""


def test_loaded_cuda_libraries_are_read_from_proc_maps() -> None:
    assert parsers.loaded_cuda_libraries(MAPS) == {
        "cudnn": "/opt/imagesmith/cuda/nvidia/cudnn/lib/libcudnn.so.9",
        "nccl": "/opt/imagesmith/cuda/nvidia/nccl/lib/libnccl.so.2",
        "cublasLt": "/opt/imagesmith/cuda/nvidia/cu13/lib/libcublasLt.so.13",
        "nvrtc-builtins": "/opt/imagesmith/cuda/nvidia/cu13/lib/libnvrtc-builtins.so.13.0",
    }


STATUS = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u10
Description: GNU C Library
 continuation: not a field

Package: removed-thing
Status: deinstall ok config-files
Version: 1.0

Package: zlib1g
Status: install ok installed
Architecture: amd64
Source: zlib (1:1.2.13.dfsg-1)
Version: 1:1.2.13.dfsg-1

Package: adduser
Status: install ok installed
Architecture: all
Version: 3.134
"""


@pytest.mark.parametrize("text, expected", [
    (STATUS, [("adduser", "3.134", "all", "adduser", "3.134"),
              ("libc6", "2.36-9+deb12u10", "amd64", "glibc", "2.36-9+deb12u10"),
              ("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib", "1:1.2.13.dfsg-1")]),
    ("", []),
    ("Package: x\nStatus: purge ok not-installed\n", []),
])
def test_dpkg_status_lists_installed_packages_with_their_source(text: str, expected: list[tuple[str, ...]]) -> None:
    keys = ("package", "version", "architecture", "source", "source_version")
    assert [tuple(p[k] for k in keys) for p in parsers.parse_dpkg_status(text)] == expected
