"""The shared helpers of errors.py: one line for a foreign exception, secret redaction."""

from __future__ import annotations

import pytest

from imagesmith.errors import Redactor, short


class Explained(Exception):
    """Like docker.errors.APIError: the daemon's words in ``explanation``."""

    def __init__(self, message: str, explanation: str) -> None:
        super().__init__(message)
        self.explanation = explanation


SHORT = [
    (OSError("HTTPConnectionPool(host='x', port=1): Max retries exceeded (Caused by NewConnectionError("
             "'<urllib3.connection.HTTPConnection object>: Failed to establish a new connection: [Errno 111] Connection refused'))"),
     "Connection refused"),
    (OSError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate (_ssl.c:1000)"),
     "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate (_ssl.c:1000"),
    (Explained("500 Server Error", "manifest unknown\nno such image"), "no such image"),
    (ValueError("first line\nlast line"), "last line"),
    (ValueError(""), "ValueError"),
    (ValueError("x" * 300), "x" * 200),
]


@pytest.mark.parametrize("exc, expected", SHORT)
def test_short(exc: BaseException, expected: str) -> None:
    assert short(exc) == expected


REDACT = [
    (["s3cret"], "login s3cret failed", "login **** failed"),
    (["abc", "abcdef"], "token abcdef and abc", "token **** and ****"),  # longest first: no 'def' left over
    (["", "pw"], "pw is set", "**** is set"),  # empty secrets are ignored
    ([], "nothing to hide", "nothing to hide"),
]


@pytest.mark.parametrize("secrets, text, expected", REDACT)
def test_redactor(secrets: list[str], text: str, expected: str) -> None:
    assert Redactor(secrets)(text) == expected


def test_redactor_ignores_secrets_too_short_to_mean_anything() -> None:
    assert Redactor(["ab", "abcd"], min_length=3).secrets == ["abcd"]
