"""YAML loaded into plain values plus the line of every key path.

``load_located(text, file)`` returns ``(data, lines)`` where ``lines`` maps a
key path such as ``("matrix", "cuda", 1)`` to its 1-based line, so every
validation message can say ``matrix.yaml:4 matrix.cuda``.
"""

from __future__ import annotations

from typing import Any, Union

import yaml

from imagesmith.errors import Problem, ValidationError

KeyPath = tuple[Union[str, int], ...]
Lines = dict[KeyPath, int]

_scalar = yaml.SafeLoader("")
_NUMERIC = {"tag:yaml.org,2002:float", "tag:yaml.org,2002:int"}


def dotted(path: KeyPath) -> str:
    """``("matrix", "include", 0, "cuda")`` -> ``matrix.include[0].cuda``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _walk(node: yaml.Node, path: KeyPath, lines: Lines) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar.construct_object(key_node)
            key = key if isinstance(key, str) else str(key)
            out[key] = _walk(value_node, path + (key,), lines)
            lines[path + (key,)] = key_node.start_mark.line + 1  # a key is located at its own line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, path + (i,), lines) for i, item in enumerate(node.value)]
    if node.tag in _NUMERIC:
        return node.value  # "3.10" stays "3.10": versions are never floats
    return _scalar.construct_object(node)


def load_located(text: str, file: str) -> tuple[Any, Lines]:
    """Parse ``text``; malformed YAML raises a ValidationError with line:col."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        msg = f"{file}:{line}:{col}: invalid YAML: {exc.problem}"
        raise ValidationError(problems=[Problem(msg)]) from None
    lines: Lines = {}
    if node is None:
        return None, lines
    return _walk(node, (), lines), lines


def line_of(lines: Lines, path: KeyPath) -> int:
    """The line of ``path``, or of its nearest located ancestor."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 0)
