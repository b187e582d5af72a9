"""One error family.

A :class:`UserError` is something the user can fix (bad input, a missing
engine, a failed build): the CLI prints its message on one line and exits 1.
Anything else escaping a command is a bug: exit 3, traceback to a log file.
"""

from __future__ import annotations

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
    """The Docker engine is unreachable or refused a request."""


class RegistryError(UserError):
    """A registry refused a push or pull; the message carries a hint."""


class VerifyError(UserError):
    """Verification could not be run or judged."""
