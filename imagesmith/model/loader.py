"""One loader for every file another job (or another machine) wrote.

Build, verify and release artifacts, run and build reports, fleet files, fleet
reports and release lists all enter through here, in three steps, each of which
refuses with a :class:`LoadError` (a ``UserError``: exit 1, one line naming the
file, the key path and what to do), never a traceback:

1. **bytes** (:func:`read_confined`): a regular file under the expected folder
   only. The path is resolved; a symbolic link that leaves the folder is refused;
   the resolved file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO or a
   device is refused without blocking), its size checked against the kind's cap,
   and at most ``cap + 1`` bytes are read.
2. **text and values** (:func:`parse_json`, :func:`load_yaml`): strict UTF-8 (a
   byte-order mark, UTF-16/32 or Latin-1 is refused with the line and column);
   strict JSON: no ``NaN``/``Infinity``, no number that is not finite as a float
   (``1e400``), no integer of more than :data:`MAX_INT_DIGITS` digits, no
   duplicate key, no lone surrogate (``"\\ud800"``), nesting at most
   :data:`MAX_DEPTH`. YAML goes through the matrix's hardened loader
   (:func:`imagesmith.model.located.load_located`).
3. **shape** (:func:`check_schema`): JSON Schema (draft 2020-12) against the
   versioned schema of the artifact (``imagesmith/data/schemas/``, by the names in
   :mod:`imagesmith.model.schemas`).

:func:`load_json_artifact` does all three. docs/loaders.md lists every kind, its
cap and its schema.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping, NoReturn

from imagesmith.errors import UserError, ValidationError
from imagesmith.model import schemas
from imagesmith.model.located import MAX_DEPTH, KeyPath, Lines, dotted, line_of, load_located, printable
from imagesmith.resources import data_file

KIB, MIB = 1 << 10, 1 << 20
# Size caps per kind (bytes). What imagesmith writes is far smaller: a build.json is
# about 3 KiB, a quick verify report 20-60 KiB, a soak one with NVML series a few MiB.
CAPS: Mapping[str, int] = {
    schemas.BUILD_ARTIFACT: 1 * MIB,
    schemas.BUILD_REPORT: 16 * MIB,
    schemas.VERIFY_REPORT: 16 * MIB,
    schemas.RELEASE: 16 * MIB,
    schemas.RUN_REPORT: 64 * MIB,
    schemas.FLEET_REPORT: 16 * MIB,
    "fleet.yaml": 1 * MIB,
    "inventory": 16 * MIB,
    schemas.CDI_SPEC: 4 * MIB,  # nvidia-ctk's spec for one GPU is about 13 KiB; 8 GPUs with MIG devices some 300 KiB
}
KEY_CAP = 64 * KIB  # a PEM key: an ECDSA P-256 key is under 300 bytes, an RSA-8192 one under 7 KiB
STATEMENT_CAP = 64 * MIB  # a DSSE envelope: a standard-tier report with its inventory is well under 2 MiB
POLICY_CAP = 256 * KIB  # a trust policy
MANIFEST_CAP = 4 * MIB  # an OCI manifest or index a registry serves (the distribution spec's own limit)
LINE_CAP = 64 * MIB  # one JSON line a process printed (the payload's report, facts.py's inventory)
REPORT_CAP = max(CAPS.values())  # `imagesmith report` reads any of the report kinds
MAX_INT_DIGITS = 20  # 2**64 has 20 digits; no count, size or time imagesmith writes comes near
SCHEMA_FILES: Mapping[str, str] = {
    schemas.BUILD_ARTIFACT: "build-1.schema.json",
    schemas.BUILD_REPORT: "build-report-1.schema.json",
    schemas.VERIFY_REPORT: "verify-report-1.schema.json",
    schemas.RELEASE: "release-1.schema.json",
    schemas.RUN_REPORT: "run-report-1.schema.json",
    schemas.FLEET_REPORT: "fleet-report-1.schema.json",
}
# Files others write (no ``schema`` key of their own: load_json_any never takes them for one of ours).
INPUT_SCHEMA_FILES: Mapping[str, str] = {
    schemas.CDI_SPEC: "cdi-spec-1.schema.json",
}
_SURROGATE = re.compile("[\ud800-\udfff]")


class LoadError(UserError):
    """A file refused at the door: ``FILE: KEY.PATH: why; fix`` (exit 1)."""

    def __init__(self, file: str, why: str, where: str = "", fix: str = "") -> None:
        self.file, self.why, self.where, self.fix = file, why, where, fix
        super().__init__(f"{file}: {where + ': ' if where else ''}{why}{'; ' + fix if fix else ''}")


# -- 1. bytes -------------------------------------------------------------------------------------


def confined(path: Path, root: Path | None = None) -> Path:
    """``path`` resolved, if it stays inside ``root`` (default: its own folder)."""
    base = Path(os.path.abspath(path.parent if root is None else root))
    try:
        base = base.resolve()
        resolved = (base / path.name if root is None else Path(os.path.abspath(path))).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a loop of links, a name too long
        raise LoadError(str(path), f"cannot be resolved ({getattr(exc, 'strerror', None) or exc})") from None
    if resolved != base and base not in resolved.parents:
        raise LoadError(str(path), f"is a symbolic link to {printable(str(resolved), 120)}, outside {base}",
                        fix="copy the file itself into the folder instead of linking to it")
    return resolved


def read_confined(path: Path, *, root: Path | None = None, cap: int) -> bytes:
    """The bytes of a regular file inside ``root``, at most ``cap`` of them (LoadError otherwise)."""
    resolved = confined(path, root)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError as exc:
        raise LoadError(str(path), f"cannot be read ({exc.strerror})", fix="check the path and that the job that writes it ran") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LoadError(str(path), "is not a regular file (a folder, FIFO, socket or device)", fix="give the file itself")
        if info.st_size > cap:
            raise LoadError(str(path), f"is {info.st_size:,} bytes, over the {cap:,}-byte limit for this kind of file",
                            fix="it is not a file imagesmith wrote; write it again")
        data = _read_at_most(fd, cap + 1)
    except OSError as exc:
        raise LoadError(str(path), f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise LoadError(str(path), f"is over the {cap:,}-byte limit for this kind of file", fix="it is not a file imagesmith wrote; write it again")
    return data


def read_regular(path: Path, *, cap: int, what: str = "") -> bytes:
    """The bytes of a regular file the *operator* named (a key, a trust policy, a credentials file, a CDI spec):
    symbolic links are followed (a secret mounted by Kubernetes is one), but the file they lead to must be a
    regular file (no FIFO, socket, device or /proc file: opened without blocking, refused before a read) of at
    most ``cap`` bytes. ``what`` names it in the LoadError (``signing key``)."""
    name = f"{what} {path}".strip()
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise LoadError(name, f"cannot be read ({exc.strerror})", fix="check the path") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LoadError(name, "is not a regular file (a folder, FIFO, socket or device)", fix="give the file itself")
        if info.st_size > cap or _proc_like(path):
            raise LoadError(name, f"is {info.st_size:,} bytes, over the {cap:,}-byte limit for this kind of file"
                            if info.st_size > cap else "is a file of /proc or /sys, not a file anyone wrote",
                            fix="give the file itself")
        data = _read_at_most(fd, cap + 1)
    except OSError as exc:
        raise LoadError(name, f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise LoadError(name, f"is over the {cap:,}-byte limit for this kind of file", fix="give the file itself")
    return data


def _proc_like(path: Path) -> bool:
    """A file of a kernel pseudo file system (/proc, /sys): its size says 0 or 4096, whatever it holds."""
    try:
        resolved = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return False
    return resolved.parts[1:2] in (("proc",), ("sys",))


def read_tail(path: Path, *, root: Path | None = None, size: int) -> bytes:
    """The last ``size`` bytes of a regular file inside ``root`` (a log named in a report: it may be
    huge, a FIFO or /dev/zero; only its tail is read). LoadError otherwise."""
    resolved = confined(path, root)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError as exc:
        raise LoadError(str(path), f"cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LoadError(str(path), "is not a regular file (a folder, FIFO, socket or device)")
        os.lseek(fd, max(0, info.st_size - size), os.SEEK_SET)
        return _read_at_most(fd, size)
    except OSError as exc:
        raise LoadError(str(path), f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, MIB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- 2. text and values ---------------------------------------------------------------------------


def _position(data: bytes, offset: int) -> str:
    line, start = data.count(b"\n", 0, offset) + 1, data.rfind(b"\n", 0, offset) + 1
    return f"line {line} column {offset - start + 1}"


def strict_text(data: bytes, file: str) -> str:
    """UTF-8 text, no byte-order mark, no NUL (LoadError saying where otherwise; the bytes are never quoted)."""
    if data[:3] == b"\xef\xbb\xbf":
        raise LoadError(file, "starts with a UTF-8 byte-order mark", fix="save it as UTF-8 without a BOM")
    head = data[:64]
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or (b"\x00" in head and head.count(b"\x00") * 4 >= len(head)):
        raise LoadError(file, "is UTF-16 or UTF-32 text", fix="save it as UTF-8")
    if b"\x00" in data:
        raise LoadError(file, f"holds a NUL byte at {_position(data, data.index(0))}: it is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(file, f"is not UTF-8 text (at {_position(data, exc.start)}; Latin-1?)", fix="save it as UTF-8") from None


class _Refused(Exception):
    def __init__(self, why: str, token: str = "") -> None:
        super().__init__(why)
        self.why, self.token = why, token


def _constant(token: str) -> NoReturn:
    raise _Refused(f"{token} is not JSON (NaN and Infinity are not numbers JSON allows)", token)


def _float(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {printable(token, 40)} is too large to be finite", token)
    return value


def _int(token: str) -> int:
    if len(token.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(token.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})", token[:40])
    return int(token)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {printable(key, 40)} appears twice in one object (JSON readers disagree on which wins)")
        out[key] = value
    return out


def parse_json(data: bytes, file: str, fix: str = "") -> Any:
    """Strict JSON from bytes (see the module docstring); LoadError otherwise."""
    text = strict_text(data, file)
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int, object_pairs_hook=_pairs)
    except _Refused as exc:
        where = _text_position(text, exc.token) if exc.token else ""
        raise LoadError(file + where, exc.why, fix=fix) from None
    except json.JSONDecodeError as exc:
        raise LoadError(f"{file}:{exc.lineno}:{exc.colno}", f"not JSON ({exc.msg})", fix=fix) from None
    except RecursionError:
        raise LoadError(file, f"nested deeper than {MAX_DEPTH} levels", fix=fix) from None
    _check_values(value, file, fix)
    return value


def parse_json_line(data: bytes | str, source: str, fix: str = "") -> Any:
    """Strict JSON from what a process printed or a server answered (the payload's report line, a registry's
    manifest): the same rules as a file's, bounded by :data:`LINE_CAP`; LoadError naming ``source`` otherwise."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
    if len(raw) > LINE_CAP:
        raise LoadError(source, f"is {len(raw):,} bytes, over the {LINE_CAP:,}-byte limit", fix=fix)
    try:
        return parse_json(raw, source, fix)
    except LoadError as exc:  # the place goes into the reason: a line has no file name to carry it
        line, _, column = exc.file[len(source) + 1:].partition(":")
        if not line:
            raise
        raise LoadError(source, f"{exc.why} at line {line} column {column}", exc.where, fix) from None


def _text_position(text: str, token: str) -> str:
    at = text.find(token)
    return "" if at < 0 else f":{text.count(chr(10), 0, at) + 1}:{at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def _check_values(value: Any, file: str, fix: str) -> None:
    """Depth and text checks over parsed JSON, without recursion (key path on refusal)."""
    stack: list[tuple[Any, KeyPath]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) >= MAX_DEPTH and isinstance(node, (dict, list)):  # the top value is level 1
            raise LoadError(file, f"nested deeper than {MAX_DEPTH} levels", dotted(path), fix)
        if isinstance(node, str) and _SURROGATE.search(node):
            raise LoadError(file, "holds a lone surrogate (\\ud800-\\udfff): not text", dotted(path), fix)
        if isinstance(node, dict):
            for key, item in node.items():
                if _SURROGATE.search(key):
                    raise LoadError(file, "a key holds a lone surrogate (\\ud800-\\udfff): not text", dotted(path), fix)
                stack.append((item, path + (key,)))
        elif isinstance(node, list):
            stack.extend((item, path + (i,)) for i, item in enumerate(node))


def load_yaml(path: Path, *, root: Path | None = None, cap: int) -> tuple[Any, Lines]:
    """A YAML file inside ``root`` through the matrix's hardened loader: ``(values, lines)``.
    A refusal is a ValidationError located at ``file:line``."""
    try:
        data = read_confined(path, root=root, cap=cap)
    except LoadError as exc:
        from imagesmith.errors import Problem

        raise ValidationError(problems=[Problem(str(exc))]) from None
    return load_located(data, path.name)


# -- 3. shape -------------------------------------------------------------------------------------


@functools.cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(data_file("schemas/" + (SCHEMA_FILES.get(name) or INPUT_SCHEMA_FILES[name])).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_document(name: str) -> dict[str, Any]:
    """The JSON Schema of an artifact, by its ``schema`` name (e.g. ``imagesmith.build/1``)."""
    return dict(_validator(name).schema)


def check_schema(doc: Any, name: str, file: str, fix: str = "", at: KeyPath = (), lines: Lines | None = None) -> None:
    """``doc`` against the schema of ``name``; the first (best) error as a LoadError with its key path (and,
    for YAML, ``lines`` from :func:`load_located`: the file named as ``FILE:LINE``).
    A run report's parts are checked against their own schemas too."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(name).iter_errors(doc))
    if error is not None:
        path = at + tuple(error.absolute_path)
        where = f"{file}:{line_of(lines, path)}" if lines else file
        raise LoadError(where, _why(error), dotted(path) or "(top)", fix)
    if name == schemas.RUN_REPORT:
        for key, part in _run_parts(doc):
            check_schema(part, _PARTS[str(key[0])], file, fix, at + key)


_PARTS = {"build": schemas.BUILD_REPORT, "release": schemas.RELEASE, "verify": schemas.VERIFY_REPORT}


def _run_parts(doc: Mapping[str, Any]) -> list[tuple[KeyPath, Any]]:
    parts: list[tuple[KeyPath, Any]] = [((k,), doc[k]) for k in ("build", "release") if doc.get(k) is not None]
    return parts + [(("verify", t), v) for t, v in (doc.get("verify") or {}).items() if v is not None]


def _why(error: Any) -> str:
    """A jsonschema error in our words, never quoting a long hostile value whole."""
    value = error.instance
    shown = printable(value, 60) if isinstance(value, str) else _kind(value)
    if error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, str) else " or ".join(error.validator_value)
        return f"expected {wanted}, got {shown}"
    if error.validator == "const":
        return f"{shown} is not {error.validator_value!r}"
    if error.validator == "enum":
        return f"{shown} is not one of {', '.join(map(repr, error.validator_value))}"
    if error.validator == "pattern":
        return f"{shown} is not of the form {error.validator_value}"
    if error.validator in ("minimum", "maximum", "maxLength"):
        return f"{shown} is out of range ({error.validator} {error.validator_value})"
    if error.validator == "required":
        return str(error.message).split(" is a required")[0] + " is missing"
    if error.validator == "additionalProperties":
        return "holds keys this kind of file does not have"
    return printable(error.message, 160)[1:-1]


def _kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return printable(str(value), 40)
    if isinstance(value, dict):
        return "an object"
    return "a list" if isinstance(value, list) else "text"


# -- all three ------------------------------------------------------------------------------------


def load_json_artifact(path: Path, *, root: Path | None = None, schema: str | None, cap: int | None = None,
                       fix: str = "") -> dict[str, Any]:
    """A JSON artifact: confined, bounded, strict, and (``schema`` given) schema-valid.
    ``root`` defaults to the file's own folder; ``cap`` to the schema's cap."""
    limit = cap if cap is not None else CAPS.get(schema or "", REPORT_CAP)
    doc = parse_json(read_confined(path, root=root, cap=limit), str(path), fix)
    if schema is not None:
        check_schema(doc, schema, str(path), fix)
    if not isinstance(doc, dict):
        raise LoadError(str(path), f"expected a JSON object, got {_kind(doc)}", "(top)", fix)
    return doc


def load_json_any(path: Path, *, root: Path | None = None, cap: int = REPORT_CAP, fix: str = "") -> dict[str, Any]:
    """A JSON artifact whose own ``schema`` key says which schema it must meet (one of SCHEMA_FILES)."""
    doc = parse_json(read_confined(path, root=root, cap=cap), str(path), fix)
    if not isinstance(doc, dict):
        raise LoadError(str(path), f"expected a JSON object, got {_kind(doc)}", "(top)", fix)
    name = doc.get("schema")
    if name not in SCHEMA_FILES:
        raise LoadError(str(path), f"{_kind(name) if not isinstance(name, str) else printable(name, 60)} is not one of "
                        f"{', '.join(SCHEMA_FILES)}", "schema", fix or "is this a file imagesmith wrote?")
    check_schema(doc, str(name), str(path), fix)
    return doc


def read_cache(path: Path) -> dict[str, Any]:
    """A cache file a job keeps in ``OUT/<target>/`` (inventory.json, facts.json): confined to OUT,
    bounded, strict. Anything refused (a link out of OUT, a FIFO, NaN, a huge file) is no cache."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        return load_json_artifact(path, root=path.parent.parent, schema=None, cap=CAPS["inventory"])
    except UserError:
        return {}
