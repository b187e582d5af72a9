"""One error family.

A :class:`UserError` is something the user can fix (bad input, a missing
engine, a failed build): the CLI prints its message on one line and exits 1.
Anything else escaping a command is a bug: exit 3, traceback to a log file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class ImagesmithError(Exception):
    """Base of every error imagesmith raises on purpose."""

    exit_code = 1


class UserError(ImagesmithError):
    """Bad input or environment; the message says what and how to fix it."""


class UsageError(UserError):
    """A command line that cannot mean anything (exit 2, like click's usage errors);
    raised before any work starts."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One validation finding, located in the input file."""

    message: str
    file: str = ""
    line: int = 0
    path: str = ""
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        prefix = " ".join(p for p in (where, self.path) if p)
        tag = "" if self.severity == "error" else "warning: "
        return f"{prefix + ': ' if prefix else ''}{tag}{self.message}"


@dataclass
class ValidationError(UserError):
    """Every error found in one input, reported together."""

    problems: list[Problem] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class BuildError(UserError):
    """One or more targets failed to build."""


class EngineError(UserError):
    """The Docker engine is unreachable or refused a request; the message carries what it said."""


class EngineConnectionLost(EngineError):
    """The engine stopped answering in the middle of a request (reset, refused, timed out)."""


class ContainerRefused(EngineError):
    """The engine would not create or start a container (the image's command, a device, a limit)."""


class CommandNotFound(ContainerRefused):
    """The container's command is not in the image (``exec: "python3": executable file not found``)."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class GpuRuntimeMissing(ContainerRefused):
    """GPUs were asked for but the engine cannot give them (no NVIDIA container runtime, no CDI spec offering
    them). ``fix`` is what gives this engine's containers GPUs (Docker's by default; Podman's is a CDI spec)."""

    fix = ("the Docker engine has no NVIDIA container runtime: install nvidia-container-toolkit, then "
           "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker")

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        if fix is not None:
            self.fix = fix


class GpuRequestDropped(GpuRuntimeMissing):
    """The engine created the container without the GPUs it was asked for, saying nothing (Podman's Docker API
    drops --gpus): found by inspecting the container after create, never left to the payload to notice."""


class RegistryError(UserError):
    """A registry refused a push or pull; the message carries a hint."""


_CAUSE = re.compile(r"\[Errno -?\d+\] ([^'\")]+)|(Connection refused|Connection reset[^'\")]*|CERTIFICATE_VERIFY_FAILED[^'\")]*)")


def short(exc: BaseException) -> str:
    """One line for a foreign exception (requests, OS; engine.py passes docker's own words to
    :func:`one_line`): the OS-level cause buried in a urllib3 chain, else the last line."""
    return one_line(str(exc), type(exc).__name__)


def one_line(text: str, fallback: str) -> str:
    """The OS-level cause in ``text`` (a urllib3 chain), else its last line cut at 200; ``fallback`` when empty."""
    text = text.strip()
    m = _CAUSE.search(text)
    if m:
        return (m.group(1) or m.group(2)).strip()
    return text.splitlines()[-1][:200] if text else fallback


class Redactor:
    """Replaces every secret in a text (credentials must never reach logs or messages); longest first,
    so that a secret containing another is replaced whole."""

    def __init__(self, secrets: list[str], min_length: int = 1) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= max(1, min_length)}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "****")
        return text
