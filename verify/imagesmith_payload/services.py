"""Services an image starts without authentication, judged from its configuration.

Pure: the image's ENTRYPOINT + CMD, its ENV, and the text of scripts and
config files they name go in; findings (status, message) come out. What is
looked for, in any spelling the tools accept:

* Jupyter with an empty token and no password: ``--ServerApp.token=``,
  ``--NotebookApp.token=''``, ``--IdentityProvider.token ""``, a token taken
  from a variable the image leaves empty or unset, ``c.ServerApp.token = ''``
  in a config file or an environment value, ``{"ServerApp": {"token": ""}}``,
  ``JUPYTER_TOKEN`` set empty where the image starts Jupyter;
* sshd allowing passwords, empty passwords or root: ``-o PasswordAuthentication=yes``,
  ``-oPermitRootLogin yes``, or a script writing such a line into its config;
* code-server / openvscode-server started with ``--auth none`` or
  ``--without-connection-token``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .judge import FAIL, PASS, WARN, worst

Finding = Tuple[str, str]  # (status, message)
SHELLS = ("sh", "bash", "dash", "ash", "zsh", "ksh", "busybox")
JUPYTER_APPS = r"(?:ServerApp|NotebookApp|LabApp|LabServerApp|IdentityProvider)"
_TOKEN_FLAG = re.compile(rf"^--{JUPYTER_APPS}\.token(?:=(.*))?$", re.S)
_PASSWORD_FLAG = re.compile(
    rf"^--(?:{JUPYTER_APPS}|PasswordIdentityProvider)\.(?:hashed_)?password(?:=(.*))?$", re.S)
_PY_EMPTY_TOKEN = re.compile(rf"c\.{JUPYTER_APPS}\.token\s*=\s*[uUrR]?(['\"])\1")
_PY_PASSWORD = re.compile(
    rf"c\.(?:{JUPYTER_APPS}|PasswordIdentityProvider)\.(?:hashed_)?password\s*=\s*[uUrR]?(['\"])[^'\"\n]+\1")
_VAR = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))$")
_SSHD_BAD = {"passwordauthentication": "passwords", "permitrootlogin": "root logins",
             "permitemptypasswords": "empty passwords", "kbdinteractiveauthentication": "keyboard-interactive passwords",
             "challengeresponseauthentication": "keyboard-interactive passwords"}
_SSHD_TEXT = re.compile(r"\b(PasswordAuthentication|PermitRootLogin|PermitEmptyPasswords)[\s=]+[\"']?yes\b", re.I)
UNSET = "\0unset"  # a variable the image does not define
_PY_LITERAL = re.compile(r'"([^"\n]*)"|\'([^\'\n]*)\'')


@dataclass(frozen=True)
class Source:
    """Something the image runs or reads: argv tokens, or text (a script, a config file, an ENV value)."""

    where: str
    lines: Tuple[Tuple[str, ...], ...] = ()  # token lists (argv, or the lines of a script)
    text: str = ""
    shell: bool = False  # $VARS are expanded (a shell line or script), not literal (exec form)
    kind: str = "script"  # script | python | json


@dataclass
class Facts:
    empty_token: List[str]
    token_set: List[str]
    unset_token: List[str]
    password: List[str]
    jupyter: List[str]
    sshd: List[Finding]
    other: List[Finding]


def command_argv(entrypoint: Sequence[str], cmd: Sequence[str]) -> List[str]:
    """What `docker run IMAGE` executes: ENTRYPOINT + CMD."""
    return [*entrypoint, *cmd]


def shell_script(argv: Sequence[str]) -> Optional[str]:
    """The script of `sh -c SCRIPT ...` (any shell; `-ec`, `-o pipefail -c` and the like), else None."""
    if not argv or os.path.basename(argv[0]) not in SHELLS:
        return None
    args, has_c = list(argv[1:]), False
    while args:
        arg = args.pop(0)
        if arg in ("-o", "+o", "-O", "+O"):
            args = args[1:]  # the option's name
        elif arg == "--":
            return args[0] if has_c and args else None
        elif arg[:1] in ("-", "+") and not arg.startswith("--"):
            has_c = has_c or "c" in arg[1:]
        elif not arg.startswith("--"):
            return arg if has_c else None
    return None


def split_shell(text: str) -> Tuple[Tuple[str, ...], ...]:
    """Shell text as token lists, one per line (continuations joined); never raises."""
    joined = re.sub(r"\\\r?\n", " ", text)
    out = []
    for line in joined.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.append(tuple(shlex.split(line, comments=True)))
        except ValueError:
            out.append(tuple(line.split()))
    return tuple(out)


def sources_of(argv: Sequence[str], env: Mapping[str, str]) -> List[Source]:
    """The command (and the script of `sh -c`) and every ENV value as sources."""
    out = [Source("ENTRYPOINT/CMD", (tuple(argv),))]
    script = shell_script(argv)
    if script is not None:
        out.append(Source("ENTRYPOINT/CMD (sh -c)", split_shell(script), script, shell=True))
    for arg in argv[1:]:  # a command line handed to an entrypoint script as one argument
        if arg != script and len(arg.split()) > 1:
            out.append(Source("ENTRYPOINT/CMD (argument)", split_shell(arg), arg, shell=True))
    out += [Source(f"ENV {name}", split_shell(value), value, shell=True) for name, value in sorted(env.items())]
    return out


def file_source(path: str, text: str) -> Source:
    """A script or config file the command names."""
    if path.endswith(".json"):
        return Source(path, text=text, kind="json")
    python = path.endswith(".py") or (text.startswith("#!") and "python" in text.split("\n", 1)[0])
    if python:  # a start script in Python builds its command from string literals
        literals = tuple(a if a is not None else b for a, b in _PY_LITERAL.findall(text))
        return Source(path, (literals,), text, kind="python")
    return Source(path, split_shell(text), text, shell=True)


SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".json", ".conf", ".cfg")


def referenced_paths(sources: Iterable[Source]) -> List[str]:
    """Paths the tokens name (scripts, config files): absolute ones, and relative ones
    (to the working directory) that look like scripts or configs; first-seen order."""
    found: Dict[str, None] = {}
    for src in sources:
        for token in (t for line in src.lines for t in line):
            value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
            if len(value) >= 4096 or "\0" in value or "$" in value:
                continue
            if value.startswith(("/", "./", "../")) or (value.endswith(SCRIPT_SUFFIXES) and "://" not in value):
                found.setdefault(os.path.normpath(value))
    return list(found)


# ------------------------------------------------------------------- the scan
def scan(sources: Sequence[Source], env: Mapping[str, str]) -> Facts:
    facts = Facts([], [], [], [], [], [], [])
    for src in sources:
        _scan_tokens(src, env, facts)
        _scan_text(src, facts)
    return facts


def _scan_tokens(src: Source, env: Mapping[str, str], facts: Facts) -> None:
    for tokens in src.lines:
        _scan_line(src, tokens, env, facts)


def _scan_line(src: Source, tokens: Tuple[str, ...], env: Mapping[str, str], facts: Facts) -> None:
    for i, token in enumerate(tokens):
        base = os.path.basename(token)
        if base.startswith("jupyter") or base in ("start-notebook.sh", "start-notebook.py", "start-singleuser.sh"):
            facts.jupyter.append(src.where)
        for pattern, bucket in ((_TOKEN_FLAG, "token"), (_PASSWORD_FLAG, "password")):
            m = pattern.match(token)
            if m:
                raw = m.group(1) if m.group(1) is not None else (tokens[i + 1] if i + 1 < len(tokens) else "")
                _jupyter_value(src, token.split("=", 1)[0], raw, bucket, env, facts)
        if base == "sshd":
            facts.sshd += _sshd_options(src.where, tokens[i + 1:])
        if base in ("code-server", "openvscode-server"):
            facts.other += _code_server(src.where, base, tokens[i + 1:])


def _jupyter_value(src: Source, flag: str, raw: str, bucket: str, env: Mapping[str, str], facts: Facts) -> None:
    value = resolve(unquote(raw), env) if src.shell else unquote(raw)
    if bucket == "password":
        if value not in ("", UNSET):
            facts.password.append(src.where)
        return
    if value not in ("", UNSET):
        facts.token_set.append(src.where)
    elif value == UNSET:
        facts.unset_token.append(f"{flag}={raw} ({src.where}): {raw} is not set in the image's ENV")
    elif value == "":
        facts.empty_token.append(f"{flag}={raw or chr(39) * 2} ({src.where})")


def _scan_text(src: Source, facts: Facts) -> None:
    if not src.text:
        return
    if src.kind == "json":
        _scan_json(src, facts)
        return
    text = "\n".join(line for line in src.text.splitlines() if not line.lstrip().startswith("#"))
    empty = _PY_EMPTY_TOKEN.search(text)
    if empty:
        facts.empty_token.append(f"{empty.group(0)} ({src.where})")
    if _PY_PASSWORD.search(text):
        facts.password.append(src.where)
    for m in _SSHD_TEXT.finditer(text if not src.where.startswith("ENTRYPOINT/CMD") else ""):  # -o: see _sshd_options
        facts.sshd.append((FAIL, f"sshd allowed {_SSHD_BAD[m.group(1).lower()]}: '{m.group(0)}' ({src.where})"))


def _scan_json(src: Source, facts: Facts) -> None:
    try:
        doc = json.loads(src.text)
    except (ValueError, RecursionError):
        return
    for app in ("ServerApp", "NotebookApp", "IdentityProvider", "PasswordIdentityProvider"):
        section = doc.get(app) if isinstance(doc, dict) else None
        if not isinstance(section, dict):
            continue
        if section.get("token") == "":
            facts.empty_token.append(f'{{"{app}": {{"token": ""}}}} ({src.where})')
        if any(isinstance(section.get(k), str) and section.get(k) for k in ("password", "hashed_password")):
            facts.password.append(src.where)


def unquote(value: str) -> str:
    """Traitlets strips one pair of quotes from a command-line value: '' and "" are empty."""
    value = value.strip()
    for prefix in ("u", "U", ""):
        for q in ("'", '"'):
            if len(value) >= 2 + len(prefix) and value.startswith(prefix + q) and value.endswith(q):
                return value[len(prefix) + 1:-1]
    return value


def resolve(value: str, env: Mapping[str, str]) -> str:
    """$NAME, ${NAME}, ${NAME:-default} against the image's ENV (UNSET when it has none)."""
    m = _VAR.match(value)
    if not m:
        return value
    name = m.group(1) or m.group(3)
    if env.get(name):
        return env[name]
    if m.group(2) is not None:
        return m.group(2)
    return "" if name in env else UNSET


def _sshd_options(where: str, args: Sequence[str]) -> List[Finding]:
    out = []
    for i, arg in enumerate(args):
        if not arg.startswith("-o"):
            continue
        option = arg[2:] or (args[i + 1] if i + 1 < len(args) else "")
        parts = re.split(r"\s*=\s*|\s+", option.strip(), maxsplit=1)
        key, value = parts[0].lower(), (parts[1] if len(parts) > 1 else "").strip("\"'").lower()
        if key in _SSHD_BAD and value == "yes":
            out.append((FAIL, f"sshd -o {option.strip()} allows {_SSHD_BAD[key]} ({where}); set it to no"))
    return out


def _code_server(where: str, name: str, args: Sequence[str]) -> List[Finding]:
    joined = " ".join(args)
    if re.search(r"--auth(?:=|\s+)none\b", joined) or "--without-connection-token" in args:
        return [(FAIL, f"{name} runs without authentication ({where}): drop --auth none / --without-connection-token")]
    return []


# ---------------------------------------------------------------- the verdict
def judge(facts: Facts, env: Mapping[str, str]) -> List[Finding]:
    """Findings, worst first; empty when nothing starts without auth."""
    out = list(facts.sshd) + list(facts.other)
    out += _judge_jupyter(facts, env)
    return sorted(dict.fromkeys(out), key=lambda f: f[0] != FAIL)


def _judge_jupyter(facts: Facts, env: Mapping[str, str]) -> List[Finding]:
    if facts.password:
        return []
    fix = "set a token (docker run -e JUPYTER_TOKEN=...) or a hashed password"
    out: List[Finding] = []
    if facts.empty_token:
        out.append((FAIL, f"Jupyter runs without authentication (empty token, no password): "
                          f"{'; '.join(dict.fromkeys(facts.empty_token))}; {fix}"))
    if env.get("JUPYTER_TOKEN", None) == "" and not facts.token_set and not facts.empty_token:
        status = FAIL if facts.jupyter else WARN
        out.append((status, f"ENV JUPYTER_TOKEN is empty{' and the image starts Jupyter' if facts.jupyter else ''}: "
                            f"a start script passing it on (--ServerApp.token=$JUPYTER_TOKEN) runs Jupyter open; {fix}"))
    for unset in dict.fromkeys(facts.unset_token):
        out.append((WARN, f"Jupyter's token comes from a variable: {unset}; Jupyter runs open unless it is set "
                          "at run time: make the start script refuse to run without it"))
    return out


def config_disables_auth(path: str, text: str) -> bool:
    """A Jupyter config file (.py or .json) that sets an empty token and no password."""
    facts = scan([file_source(path, text)], {})
    return bool(facts.empty_token) and not facts.password


def verdict(findings: Sequence[Finding]) -> str:
    return worst([f[0] for f in findings]) if findings else PASS
