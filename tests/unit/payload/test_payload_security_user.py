"""security.user as root: the verdict says why non-root is required and what the image's USER declares."""

from __future__ import annotations

import os
import sys
from typing import Optional

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload.checks import security
from imagesmith_payload.config import Config, ImageConfig
from imagesmith_payload.context import Context

REQUIRED = "runs as root (uid 0 (root)) but a non-root user is required (verify --require-non-root, or an image imagesmith built) and "
FIX = "; add a non-root USER to the Dockerfile"


@pytest.mark.parametrize("expect, image, status, detail", [
    (True, ImageConfig(user=""), "fail", REQUIRED + "the image declares no USER (root)" + FIX),
    (True, ImageConfig(user="root"), "fail", REQUIRED + "the image declares USER root (root)" + FIX),
    (True, ImageConfig(user="0:0"), "fail", REQUIRED + "the image declares USER 0:0 (root)" + FIX),
    (True, ImageConfig(user="1000"), "fail", REQUIRED + "the image declares USER 1000, yet the payload ran as root" + FIX),
    (True, None, "fail", REQUIRED + "the image's USER is not known here" + FIX),
    (None, ImageConfig(user=""), "warn", "runs as root (uid 0 (root)); add a non-root USER to the Dockerfile"),
])
def test_root_verdict_names_the_declared_user(monkeypatch: pytest.MonkeyPatch, expect: Optional[bool],
                                              image: Optional[ImageConfig], status: str, detail: str) -> None:
    monkeypatch.setattr(security, "user", lambda: {"uid": 0, "name": "root"})
    got = security.non_root(Context(Config(expect_non_root=expect, image=image)))
    assert (got["status"], got["detail"]) == (status, detail)
