"""Pure parsers of system files and tool output (text in, values out)."""

from __future__ import annotations

import difflib
import fnmatch
import re
import shlex
from typing import Callable, Dict, Iterable, List, Optional, Tuple

TCP_LISTEN = "0A"


def parse_os_release(text: str) -> Dict[str, str]:
    """/etc/os-release KEY=value lines, quotes removed."""
    fields = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        fields[key.strip()] = parts[0] if parts else ""
    return fields


def os_tag(fields: Dict[str, str]) -> str:
    """ID + VERSION_ID: 'debian12' (dots removed for debian), 'ubuntu22.04'."""
    ident = fields.get("ID", "unknown").lower()
    version = fields.get("VERSION_ID", "")
    if ident == "debian":
        version = version.replace(".", "")
    return f"{ident}{version}"


def parse_dpkg_status(text: str) -> List[Dict[str, str]]:
    """/var/lib/dpkg/status -> the installed packages, sorted by name:
    {package, version, architecture, source, source_version} (source: the
    source package, defaulting to the binary's own name and version)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        fields = _rfc822_fields(block)
        if "installed" not in fields.get("Status", "").split() or not fields.get("Package"):
            continue
        version = fields.get("Version", "")
        source, _, rest = fields.get("Source", fields["Package"]).partition(" ")
        out.append({"package": fields["Package"], "version": version, "architecture": fields.get("Architecture", ""),
                    "source": source, "source_version": rest.strip("() ") or version})
    return sorted(out, key=lambda p: (p["package"], p["architecture"]))


def _rfc822_fields(block: str) -> Dict[str, str]:
    """The first line of each field of one deb822 paragraph (continuation lines dropped)."""
    fields = {}
    for line in block.splitlines():
        if line[:1] in (" ", "\t") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def parse_proc_driver_version(text: str) -> Optional[str]:
    """'NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ...' -> '580.159.04'."""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if match:
        return match.group(1)
    match = re.search(r"NVRM version:.*?(\d{3}\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


def parse_torch_version_py(text: str) -> Dict[str, Optional[str]]:
    """torch/version.py without importing torch: __version__ and cuda."""
    out: Dict[str, Optional[str]] = {"version": None, "cuda": None}
    for key, name in (("version", "__version__"), ("cuda", "cuda")):
        match = re.search(rf"^{name}\s*(?::[^=\n]*)?=\s*(.+)$", text, re.M)
        if match:
            out[key] = _literal(match.group(1))
    return out


def _literal(raw: str) -> Optional[str]:
    raw = raw.strip()
    if raw.startswith(("'", '"')):
        return raw[1:].split(raw[0], 1)[0]
    return None


def parse_listening_ports(text: str) -> List[Tuple[str, int]]:
    """/proc/net/tcp{,6}: (address, port) of sockets in LISTEN state."""
    found = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 4 or cols[3] != TCP_LISTEN or ":" not in cols[1]:
            continue
        addr_hex, port_hex = cols[1].rsplit(":", 1)
        found.append((_hex_address(addr_hex), int(port_hex, 16)))
    return found


def _hex_address(addr_hex: str) -> str:
    if len(addr_hex) == 8:
        return ".".join(str(int(addr_hex[i:i + 2], 16)) for i in (6, 4, 2, 0))
    return "::" if set(addr_hex) == {"0"} else addr_hex


# --------------------------------------------------------------------- --expect
# Names --expect knows, with what their VERSION must look like; any other
# Python distribution is written pip:NAME=VERSION.
EXPECT_CORE = ("torch", "cuda", "cudnn", "nccl", "python", "os")
EXPECT_PACKAGES = ("torchvision", "torchaudio", "triton", "numpy", "transformers", "tokenizers",
                   "opencv-python-headless", "opencv-python")
EXPECT_PATHS = ("cuda_libs",)  # a folder: where torch's CUDA libraries must load from
EXPECT_NAMES = EXPECT_CORE + EXPECT_PATHS + EXPECT_PACKAGES
_VERSION = re.compile(r"^v?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$", re.I)
_CUDA = re.compile(r"^(cpu|\d+\.\d+(\.\d+)?)$", re.I)
_OS = re.compile(r"^[a-z][a-z0-9._-]*$")
_DIST = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$", re.I)
_FOLDER = re.compile(r"^(/[A-Za-z0-9._+-]+)+/?$")
_EXPECT_SHAPES = {"cuda": (_CUDA, "a CUDA version such as 12.8, or cpu for a CPU-only build"),
                  "cuda_libs": (_FOLDER, "an absolute folder such as /opt/imagesmith/cuda"),
                  "os": (_OS, "an OS tag such as debian12 or ubuntu24.04")}
_VERSION_SHAPE = (_VERSION, "a version such as 2.9.1 (a prefix such as 2.9 matches 2.9.x)")


def parse_expect(text: str) -> Dict[str, str]:
    """'torch=2.9.1,cuda=12.8,pip:einops=0.8' -> {'torch': '2.9.1', 'cuda': '12.8', 'einops': '0.8'}.

    Comma-separated NAME=VERSION items; NAME is one of EXPECT_NAMES or pip:DIST;
    cuda=cpu expects a CPU-only torch (as the io.imagesmith.cuda=cpu label does).
    A ValueError names the item and what to write instead."""
    out: Dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, value = _expect_item(item)
        if name in out:
            raise ValueError(f"item {item!r}: {name} is expected twice; give it once")
        out[name] = value
    return out


def _expect_item(item: str) -> Tuple[str, str]:
    key, sep, value = (part.strip() for part in item.partition("="))
    if not sep or not key or not value:
        raise ValueError(f"item {item!r}: expected NAME=VERSION, e.g. torch=2.9.1")
    if value.startswith("="):
        raise ValueError(f"item {item!r}: write one '=': {key}={value.lstrip('=').strip()}")
    name = _expect_name(item, key)
    pattern, shape = _EXPECT_SHAPES.get(name, _VERSION_SHAPE)
    if not pattern.match(value):
        hint = "; separate items with commas: torch=2.9.1,cuda=12.8" if re.search(r"[;=&|]", value) else ""
        raise ValueError(f"item {item!r}: {value!r} is not {shape}{hint}")
    return name, value.lower() if name == "cuda" else value


def _expect_name(item: str, key: str) -> str:
    if key.lower().startswith("pip:"):
        dist = key[4:].strip()
        if not _DIST.match(dist):
            raise ValueError(f"item {item!r}: {dist!r} is not a Python distribution name")
        return dist.lower().replace("_", "-")
    if key.lower() in EXPECT_NAMES:
        return key.lower()
    close = difflib.get_close_matches(key.lower(), EXPECT_NAMES, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"item {item!r}: unknown name {key!r}; {guess}known: {', '.join(EXPECT_NAMES)}, "
                     f"or pip:NAME for any other Python distribution")


# ------------------------------------------------------------------------ sshd
def sshd_effective(read: Callable[[str], Optional[str]], glob: Callable[[str], Iterable[str]],
                   main: str = "/etc/ssh/sshd_config") -> Dict[str, str]:
    """Global sshd settings, first value wins, Include followed, Match blocks ignored.

    `read(path)` returns a file's text or None; `glob(pattern)` lists paths.
    """
    settings: Dict[str, str] = {}
    _sshd_walk(main, read, glob, settings, depth=0)
    return settings


def _sshd_walk(path: str, read: Callable[[str], Optional[str]],
               glob: Callable[[str], Iterable[str]], settings: Dict[str, str], depth: int) -> bool:
    """Returns False once a Match block starts (the rest is not global)."""
    text = read(path)
    if text is None or depth > 8:
        return True
    for key, value in _sshd_lines(text):
        if key == "match":
            return False
        if key == "include":
            for pattern in value.split():
                if not _sshd_include(pattern, read, glob, settings, depth):
                    return False
            continue
        settings.setdefault(key, value)
    return True


def _sshd_include(pattern: str, read: Callable[[str], Optional[str]],
                  glob: Callable[[str], Iterable[str]], settings: Dict[str, str], depth: int) -> bool:
    if not pattern.startswith("/"):
        pattern = "/etc/ssh/" + pattern
    return all(_sshd_walk(path, read, glob, settings, depth + 1) for path in sorted(glob(pattern)))


def _sshd_lines(text: str) -> Iterable[Tuple[str, str]]:
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = re.split(r"\s*=\s*|\s+", line, maxsplit=1)
        yield parts[0].lower(), (parts[1].strip().strip('"') if len(parts) > 1 else "")


def parse_sshd_t(text: str) -> Dict[str, str]:
    """`sshd -T` output: 'key value' lines, keys already lower case."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out.setdefault(key.lower(), value.strip())
    return out


def judge_sshd(settings: Dict[str, str]) -> Tuple[str, List[str]]:
    """(status, problems): passwords and root login must be refused."""
    problems, status = [], "pass"
    password = settings.get("passwordauthentication", "yes").lower()
    if password != "no":
        problems.append(f"PasswordAuthentication {password} (default yes); set it to no")
        status = "fail"
    root = settings.get("permitrootlogin", "prohibit-password").lower()
    if root in ("prohibit-password", "without-password", "forced-commands-only"):
        problems.append(f"PermitRootLogin {root}: root may log in with a key; set it to no")
        status = "warn" if status == "pass" else status
    elif root != "no":
        problems.append(f"PermitRootLogin {root}; set it to no")
        status = "fail"
    return status, problems


# --------------------------------------------------------------------- jupyter
def jupyter_config_disables_auth(text: str) -> bool:
    """A jupyter_*_config.py that sets an empty token and no password."""
    from .services import config_disables_auth
    return config_disables_auth("jupyter_config.py", text)


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Check id selection: an id, a group ('gemm' = 'gemm.*') or a shell pattern."""
    return any(name == p or name.startswith(p + ".") or fnmatch.fnmatchcase(name, p)
               for p in patterns)


# ------------------------------------------------------------- loaded libraries
CUDA_LIBRARY = re.compile(r"^lib(cudart|cublas|cublasLt|cudnn(?:_\w+)?|nccl|cufft|curand|cusparse|cusparseLt|cusolver"
                          r"|nvrtc(?:-builtins)?|nvJitLink|cupti|nvshmem_host|cufile|nvToolsExt)\.so[.\d]*$")


def loaded_cuda_libraries(maps: str) -> Dict[str, str]:
    """/proc/self/maps -> {library: path} for the CUDA libraries mapped (not the
    driver's libcuda, not torch's own libraries)."""
    found: Dict[str, str] = {}
    for line in maps.splitlines():
        path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else ""
        match = CUDA_LIBRARY.match(path.rsplit("/", 1)[-1]) if path.startswith("/") else None
        if match:
            found.setdefault(match.group(1), path)
    return found
