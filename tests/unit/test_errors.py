"""The shared helpers of errors.py: one line for a foreign exception, secret redaction."""

from __future__ import annotations

import pytest

from imagesmith.errors import Redactor, one_line, short

SHORT = [
    (OSError("HTTPConnectionPool(host='x', port=1): Max retries exceeded (Caused by NewConnectionError("
             "'<urllib3.connection.HTTPConnection object>: Failed to establish a new connection: [Errno 111] Connection refused'))"),
     "Connection refused"),
    (OSError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate (_ssl.c:1000)"),
     "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate (_ssl.c:1000"),
    (ValueError("first line\nlast line"), "last line"),
    (ValueError(""), "ValueError"),
    (ValueError("x" * 300), "x" * 200),
]


@pytest.mark.parametrize("exc, expected", SHORT)
def test_short(exc: BaseException, expected: str) -> None:
    assert short(exc) == expected


def test_one_line_of_a_text_falls_back_when_it_is_empty() -> None:
    assert (one_line("  manifest unknown\nno such image ", "APIError"), one_line(" ", "APIError")) == ("no such image", "APIError")


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
