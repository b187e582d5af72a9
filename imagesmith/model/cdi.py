"""The Container Device Interface (CNCF container-device-interface, SPEC.md 1.1.0), pure.

A CDI spec (``nvidia-ctk cdi generate`` writes one to /etc/cdi/nvidia.yaml) says what a device brings into a
container: device nodes, bind mounts, environment entries and hooks (``containerEdits``), once for the whole
spec and once per device. Here:

* :func:`parse` turns one document, already bounded, strict and schema-valid (``cdi-spec-1.schema.json``, read by
  :mod:`imagesmith.stages.verify.gpus` through the strict loader), into a frozen :class:`Spec`, checking what a schema
  cannot say: ``kind`` is ``vendor/class``, device names follow CDI's grammar and are unique, device nodes lie
  under /dev, every path is absolute, no mount targets ``/``, ``/proc``, ``/sys`` or ``/dev`` itself, environment
  entries are ``NAME=VALUE``, hook names are OCI's. A refusal is a :class:`LoadError`: file (and line, for YAML),
  key path, why.
* :class:`Registry` holds every spec read, in the CDI spec's order of folders: a device a later folder defines
  wins over the same device in an earlier one; two files of one folder defining it make it unusable (the
  reference implementation's rule). :meth:`Registry.resolve` turns fully-qualified names
  (``nvidia.com/gpu=0``, ``=all``, ``=GPU-<uuid>``) into the merged edits: each spec's own edits once, then each
  device's.
* :func:`translate` turns merged edits into what an engine without CDI takes (device mappings, read-only bind
  mounts, environment, symbolic links) and emulates the two hooks ``nvidia-ctk`` writes that matter to CUDA:
  ``create-symlinks`` (links placed in the container before it starts) and ``update-ldcache`` (its folders
  first on ``LD_LIBRARY_PATH``, and the links ldconfig would make from each mounted library's ELF SONAME,
  read through the ``soname`` seam). Every other hook, and every edit the Docker API cannot express, is named
  in a note, never applied silently.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from imagesmith.errors import UserError
from imagesmith.model.grammar import ENV_NAME
from imagesmith.model.loader import LoadError
from imagesmith.model.located import KeyPath, Lines, dotted, line_of, printable

DEFAULT_DIRS = ("/etc/cdi", "/var/run/cdi")  # the CDI spec's folders, in its order: a later one wins
SUFFIXES = (".json", ".yaml", ".yml")
NVIDIA_GPU = "nvidia.com/gpu"
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
NODE_TYPES = ("", "b", "c", "u", "p")
FIX = "correct the spec, or write NVIDIA's again: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
# vendor: a DNS-like name; class: letters, digits, '_', '-', '.'; each starts with a letter and ends alphanumeric
_SEGMENT = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
KIND = re.compile(rf"^{_SEGMENT}/{_SEGMENT}$")
DEVICE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
VERSION = re.compile(r"^\d{1,9}\.\d{1,9}\.\d{1,9}$")
PERMISSIONS = re.compile(r"^[rwm]*$")
RESERVED_TARGETS = ("/", "/proc", "/sys", "/dev")  # a mount over one of these would replace the container's own
ENGINE_OWNED = ("/dev", "/proc", "/sys")  # mounted by the engine at start: a link placed there beforehand is hidden
TRANSLATED = ("env", "deviceNodes", "mounts", "hooks")  # the edits translate() applies (additionalGids, intelRdt,
# netDevices and keys of a newer CDI are named in a note instead)
SHOWN = 3  # names listed in a note before "and N more"


# -- records ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceNode:
    path: str  # in the container
    host_path: str  # on the host (the spec's hostPath, else path)
    permissions: str = "rwm"  # cgroup permissions; "" in a spec means rwm; "none" means none
    set_by_spec: tuple[str, ...] = ()  # type, major, minor, fileMode, uid, gid: the keys the spec set


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str = ""

    @property
    def bind(self) -> bool:
        """A bind mount (OCI: no type, or a dummy one such as ``none``, or the option bind/rbind): ``host_path`` is
        a path of the host; for another type (``tmpfs``) it is the file system's source name."""
        return self.type in ("", "bind", "none") or bool({"bind", "rbind"} & set(self.options))


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()  # NAME=VALUE, in order (a later entry for a name wins)
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    other: tuple[str, ...] = ()  # keys of edits set here that are not translated (additionalGids, intelRdt, ...)

    def merged(self, more: ContainerEdits) -> ContainerEdits:
        """These edits, then ``more``'s (CDI appends every list)."""
        return ContainerEdits(*(getattr(self, f.name) + getattr(more, f.name) for f in dataclasses.fields(self)))


@dataclass(frozen=True)
class Device:
    name: str
    edits: ContainerEdits


@dataclass(frozen=True)
class Spec:
    file: str
    cdi_version: str
    kind: str  # vendor/class
    devices: tuple[Device, ...]
    edits: ContainerEdits = field(default_factory=ContainerEdits)  # applied once when any of its devices is asked for
    priority: int = 0  # the index of its folder: a higher one wins

    def qualified(self, device: Device) -> str:
        return f"{self.kind}={device.name}"


# -- parsing ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _At:
    """Where a spec's problems are: the file, and for YAML the line of each key path."""

    file: str
    lines: Lines | None = None

    def refuse(self, path: KeyPath, why: str) -> LoadError:
        where = f"{self.file}:{line_of(self.lines, path)}" if self.lines else self.file
        return LoadError(where, why, dotted(path) or "(top)", FIX)


def parse(doc: Mapping[str, Any], file: str, priority: int = 0, lines: Lines | None = None) -> Spec:
    """A schema-valid CDI document as a :class:`Spec`; a :class:`LoadError` naming the file, the key path and why
    for what the schema cannot say."""
    at = _At(file, lines)
    version, kind = str(doc["cdiVersion"]), str(doc["kind"])
    if not VERSION.match(version):
        raise at.refuse(("cdiVersion",), f"{printable(version)} is not a version (MAJOR.MINOR.PATCH, e.g. 0.5.0)")
    if not KIND.match(kind):
        raise at.refuse(("kind",), f"{printable(kind)} is not of the form vendor/class (e.g. nvidia.com/gpu)")
    devices = tuple(_device(at, d, ("devices", i)) for i, d in enumerate(doc["devices"]))
    _unique(at, devices)
    return Spec(file, version, kind, devices, _edits(at, doc.get("containerEdits") or {}, ("containerEdits",)), priority)


def _device(at: _At, doc: Mapping[str, Any], path: KeyPath) -> Device:
    name = str(doc["name"])
    if not DEVICE_NAME.match(name):
        raise at.refuse(path + ("name",), f"{printable(name)} is not a device name (letters, digits, '_', '-', '.', ':'; "
                                          "first and last a letter or digit)")
    return Device(name, _edits(at, doc["containerEdits"], path + ("containerEdits",)))


def _unique(at: _At, devices: Sequence[Device]) -> None:
    seen: dict[str, int] = {}
    for i, device in enumerate(devices):
        if device.name in seen:
            raise at.refuse(("devices", i, "name"), f"device {printable(device.name)} is defined twice (also devices[{seen[device.name]}])")
        seen[device.name] = i


def _edits(at: _At, doc: Mapping[str, Any], path: KeyPath) -> ContainerEdits:
    return ContainerEdits(
        env=tuple(_env(at, e, path + ("env", i)) for i, e in enumerate(doc.get("env") or ())),
        device_nodes=tuple(_node(at, n, path + ("deviceNodes", i)) for i, n in enumerate(doc.get("deviceNodes") or ())),
        mounts=tuple(_mount(at, m, path + ("mounts", i)) for i, m in enumerate(doc.get("mounts") or ())),
        hooks=tuple(_hook(at, h, path + ("hooks", i)) for i, h in enumerate(doc.get("hooks") or ())),
        other=tuple(sorted(k for k, v in doc.items() if k not in TRANSLATED and v not in (None, [], {}))),
    )


def _env(at: _At, entry: str, path: KeyPath) -> str:
    name, eq, _ = entry.partition("=")
    if not eq or not ENV_NAME.fullmatch(name):
        raise at.refuse(path, f"{printable(entry)} is not NAME=VALUE (NAME: letters, digits and '_', not first a digit)")
    return entry


def _node(at: _At, doc: Mapping[str, Any], path: KeyPath) -> DeviceNode:
    node = str(doc["path"])
    host = str(doc.get("hostPath") or node)
    for key, value in (("path", node), ("hostPath", host)):
        if not _under_dev(value):
            raise at.refuse(path + (key,), f"{printable(value)} is not a device node: it must be an absolute path under /dev")
    kind, permissions = str(doc.get("type") or ""), str(doc.get("permissions") or "")
    if kind not in NODE_TYPES:
        raise at.refuse(path + ("type",), f"{printable(kind)} is not a device type (b, c, u or p)")
    if permissions != "none" and not PERMISSIONS.match(permissions):
        raise at.refuse(path + ("permissions",), f"{printable(permissions)} is not cgroup permissions (r, w and m, or none)")
    if permissions != "none":  # empty means all three; docker wants them in this order
        permissions = "".join(c for c in "rwm" if c in permissions) or "rwm"
    set_by_spec = tuple(k for k in ("type", "major", "minor", "fileMode", "uid", "gid") if doc.get(k) not in (None, ""))
    return DeviceNode(node, host, permissions, set_by_spec)


def _mount(at: _At, doc: Mapping[str, Any], path: KeyPath) -> Mount:
    host, target = str(doc["hostPath"]), str(doc["containerPath"])
    mount = Mount(host, target, tuple(str(o) for o in doc.get("options") or ()), str(doc.get("type") or ""))
    if mount.bind and not _absolute(host):
        raise at.refuse(path + ("hostPath",), f"{printable(host)} is not an absolute path")
    if not _absolute(target):
        raise at.refuse(path + ("containerPath",), f"{printable(target)} is not an absolute path")
    if _normal(target) in RESERVED_TARGETS:
        raise at.refuse(path + ("containerPath",), f"{printable(target)} would mount over the container's own "
                                                   f"{_normal(target)}: a mount may not target /, /proc, /sys or /dev")
    return mount


def _hook(at: _At, doc: Mapping[str, Any], path: KeyPath) -> Hook:
    name, program = str(doc["hookName"]), str(doc["path"])
    if name not in HOOK_NAMES:
        raise at.refuse(path + ("hookName",), f"{printable(name)} is not a hook name (one of {', '.join(HOOK_NAMES)})")
    if not _absolute(program):
        raise at.refuse(path + ("path",), f"{printable(program)} is not an absolute path")
    env = tuple(_env(at, e, path + ("env", i)) for i, e in enumerate(doc.get("env") or ()))
    timeout = doc.get("timeout")
    return Hook(name, program, tuple(str(a) for a in doc.get("args") or ()), env, int(timeout) if timeout is not None else None)


def _absolute(path: str) -> bool:
    return path.startswith("/") and "\x00" not in path


def _normal(path: str) -> str:
    """``path`` as the kernel would reach it (``//x/../proc/`` is ``/proc``)."""
    return "/" + posixpath.normpath(path).lstrip("/")


def _under_dev(path: str) -> bool:
    return _absolute(path) and _normal(path).startswith("/dev/")


# -- folders and names --------------------------------------------------------------------------------------------


def qualified_names(gpus: str, kind: str = NVIDIA_GPU) -> tuple[str, ...]:
    """``--gpus`` as CDI device names: ``all`` -> ``nvidia.com/gpu=all``, ``0,1`` -> ``=0`` and ``=1``,
    ``GPU-<uuid>`` -> ``=GPU-<uuid>``; ``none`` -> none."""
    if gpus in ("", "none"):
        return ()
    return tuple(f"{kind}={g.strip()}" for g in gpus.split(",") if g.strip())


@dataclass(frozen=True)
class Resolved:
    names: tuple[str, ...]
    files: tuple[str, ...]  # the spec files the devices came from
    edits: ContainerEdits


@dataclass(frozen=True)
class Registry:
    """Every CDI spec read, in folder order (then file name)."""

    specs: tuple[Spec, ...] = ()

    @functools.cached_property
    def _index(self) -> tuple[dict[str, tuple[Spec, Device]], dict[str, tuple[str, str]]]:
        devices: dict[str, tuple[Spec, Device]] = {}
        conflicts: dict[str, tuple[str, str]] = {}
        for spec in self.specs:
            for device in spec.devices:
                name, old = spec.qualified(device), devices.get(spec.qualified(device))
                if old is not None and old[0].priority == spec.priority:
                    conflicts[name] = (old[0].file, spec.file)
                if old is None or spec.priority >= old[0].priority:
                    devices[name] = (spec, device)
        return {n: d for n, d in devices.items() if n not in conflicts}, conflicts

    def offered(self) -> tuple[str, ...]:
        """Every fully-qualified device name a spec offers (those of conflicting files left out)."""
        return tuple(sorted(self._index[0]))

    def resolve(self, names: Iterable[str]) -> Resolved:
        """The merged edits of ``names``: each spec's own once (at its first device), then each device's.
        A name no spec offers is a UserError listing what they offer."""
        devices, conflicts = self._index
        edits, files, asked = ContainerEdits(), [], tuple(names)
        for name in asked:
            if name in conflicts:
                a, b = conflicts[name]
                raise UserError(f"CDI device {name} is defined by both {a} and {b}, files of one folder: CDI uses "
                                "neither; remove one of them")
            if name not in devices:
                raise UserError(self.unknown(name))
            spec, device = devices[name]
            if spec.file not in files:
                files.append(spec.file)
                edits = edits.merged(spec.edits)
            edits = edits.merged(device.edits)
        return Resolved(asked, tuple(files), edits)

    def unknown(self, name: str) -> str:
        offered = self.offered()
        if not offered:
            return f"no CDI spec offers {name}: the specs read offer no device"
        return f"no CDI spec offers {name}; the specs offer {listed(offered, 12)}"


def counted(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def listed(items: Sequence[str], shown: int = SHOWN) -> str:
    """``a, b, c and 4 more``."""
    head = ", ".join(items[:shown])
    return head + (f" and {len(items) - shown} more" if len(items) > shown else "")


# -- translation for an engine without CDI --------------------------------------------------------------------------

Soname = Callable[[str], "str | None"]  # a host library's ELF SONAME (None: not an ELF library, or none)


@dataclass(frozen=True)
class DeviceMapping:
    """A host device node given to the container (docker's ``--device HOST:CONTAINER:PERMISSIONS``)."""

    host: str
    container: str
    permissions: str = "rwm"

    def docker(self) -> str:
        return f"{self.host}:{self.container}:{self.permissions}"


@dataclass(frozen=True)
class BindMount:
    source: str  # on the host
    target: str  # in the container
    read_only: bool = True


@dataclass(frozen=True)
class Symlink:
    """A symbolic link placed in the container before it starts: ``path`` -> ``target``."""

    path: str
    target: str


@dataclass(frozen=True)
class Translated:
    devices: tuple[DeviceMapping, ...] = ()
    mounts: tuple[BindMount, ...] = ()
    links: tuple[Symlink, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what was emulated, and every edit not applied


def translate(edits: ContainerEdits, image_env: Mapping[str, str], soname: Soname) -> Translated:
    """``edits`` for an engine without CDI. ``image_env``: the image's own ENV (the container's environment
    replaces a name the image sets, so ``LD_LIBRARY_PATH`` keeps the image's folders after the spec's);
    ``soname``: reads a host library's SONAME."""
    env = dict(item.partition("=")[::2] for item in edits.env)
    hooks = _hooks(edits.hooks)
    mounts, mount_notes = _mounts(edits.mounts)
    devices, device_notes = _devices(edits.device_nodes)
    taken = {_normal(m.target) for m in mounts} | {_normal(link.path) for link in hooks.links}
    by_soname = _soname_links(hooks.folders, mounts, soname, taken)
    if hooks.folders:
        before = env.get("LD_LIBRARY_PATH", image_env.get("LD_LIBRARY_PATH", ""))
        env["LD_LIBRARY_PATH"] = ":".join([*hooks.folders, *filter(None, before.split(":"))])
    notes = [*hooks.notes, *_ldcache_notes(hooks.folders, by_soname), *mount_notes, *device_notes,
             *(f"containerEdits.{key} not applied: the Docker API has no field for it here" for key in dict.fromkeys(edits.other))]
    return Translated(devices, mounts, hooks.links + by_soname, env, tuple(notes))


def _devices(nodes: Sequence[DeviceNode]) -> tuple[tuple[DeviceMapping, ...], list[str]]:
    out: dict[str, DeviceMapping] = {}
    notes = []
    for node in nodes:
        if node.permissions == "none":
            notes.append(f"device node {node.path} not given: its permissions are none")
            continue
        out.setdefault(node.path, DeviceMapping(node.host_path, node.path, node.permissions))
        if node.set_by_spec:
            notes.append(f"device node {node.path}: {', '.join(node.set_by_spec)} not applied (the engine copies the "
                         "host's node as it is)")
    return tuple(out.values()), list(dict.fromkeys(notes))


def _mounts(mounts: Sequence[Mount]) -> tuple[tuple[BindMount, ...], list[str]]:
    out: dict[str, BindMount] = {}
    notes, dropped = [], set()
    for m in mounts:
        if not m.bind:
            notes.append(f"mount of {m.container_path} (type {m.type}) not applied: only bind mounts are translated")
            continue
        out[_normal(m.container_path)] = BindMount(m.host_path, m.container_path, "rw" not in m.options)
        dropped |= set(m.options) - {"ro", "rw", "bind", "rbind"}
    if dropped:
        notes.append(f"mount options {', '.join(sorted(dropped))} not applied: the Docker API's bind mounts take "
                     "read-only or read-write only")
    return tuple(out.values()), notes


@dataclass(frozen=True)
class _Hooks:
    links: tuple[Symlink, ...] = ()
    folders: tuple[str, ...] = ()  # update-ldcache --folder, in order, once each
    notes: tuple[str, ...] = ()


def hook_command(hook: Hook) -> tuple[str, tuple[str, ...]] | None:
    """(subcommand, its arguments) of a hook nvidia-ctk writes: ``nvidia-cdi-hook SUB ...`` or the older
    ``nvidia-ctk hook SUB ...``; None for any other program."""
    program, args = posixpath.basename(hook.path), hook.args[1:]
    if program == "nvidia-cdi-hook" and args:
        return args[0], args[1:]
    if program == "nvidia-ctk" and len(args) >= 2 and args[0] == "hook":
        return args[1], args[2:]
    return None


def flag_values(args: Sequence[str], flag: str) -> list[str]:
    """Every value of ``--flag V``, ``--flag=V`` (or one dash, as urfave/cli takes them)."""
    names = (f"--{flag}", f"-{flag}")
    out = []
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            out.append(args[i + 1])
        out += [arg.split("=", 1)[1] for name in names if arg.startswith(name + "=")]
    return out


def _hooks(hooks: Sequence[Hook]) -> _Hooks:
    links: dict[str, Symlink] = {}
    folders: dict[str, None] = {}
    notes: dict[str, None] = {}
    hidden: dict[str, None] = {}
    for hook in hooks:
        command = hook_command(hook)
        if command is not None and command[0] == "create-symlinks":
            for text in flag_values(command[1], "link"):
                _link(text, links, hidden, notes)
        elif command is not None and command[0] == "update-ldcache":
            for folder in flag_values(command[1], "folder"):
                if _absolute(folder):
                    folders.setdefault(_normal(folder))
                else:
                    notes.setdefault(f"update-ldcache folder {printable(folder)} not used: not an absolute path")
        else:
            notes.setdefault(f"hook not applied (the Docker API runs no hooks): {hook.hook_name} "
                             f"{shlex.join(hook.args or (hook.path,))[:200]}")
    if links:
        notes = {f"hook create-symlinks emulated: {counted(len(links), 'symbolic link')} placed in the container before it "
                 "starts": None, **notes}
    if hidden:
        notes.setdefault("create-symlinks links under /dev, /proc or /sys not made: the engine mounts those at start "
                         f"({listed(list(hidden))})")
    return _Hooks(tuple(links.values()), tuple(folders), tuple(notes))


def _link(text: str, links: dict[str, Symlink], hidden: dict[str, None], notes: dict[str, None]) -> None:
    target, sep, path = text.partition("::")
    if not sep or not target or "::" in path or not _absolute(path) or _normal(path) == "/":
        notes.setdefault(f"create-symlinks link {printable(text)} not made: not TARGET::/ABSOLUTE/LINK")
    elif any(_normal(path) == root or _normal(path).startswith(root + "/") for root in ENGINE_OWNED):
        hidden.setdefault(_normal(path))
    else:
        links.setdefault(_normal(path), Symlink(_normal(path), target))


def _soname_links(folders: Sequence[str], mounts: Sequence[BindMount], soname: Soname, taken: set[str]) -> tuple[Symlink, ...]:
    """What ``ldconfig`` would add for the libraries mounted into ``folders``: ``FOLDER/SONAME -> file name``."""
    out: dict[str, Symlink] = {}
    for m in mounts:
        folder, name = posixpath.split(_normal(m.target))
        if folder not in folders or ".so" not in name:
            continue
        found = soname(m.source)
        link = posixpath.join(folder, found) if found and _file_name(found) else ""
        if link and found != name and link not in taken and link not in out:
            out[link] = Symlink(link, name)
    return tuple(out.values())


def _file_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..") and "\x00" not in name


def _ldcache_notes(folders: Sequence[str], links: Sequence[Symlink]) -> list[str]:
    if not folders:
        return []
    shown = [f"{posixpath.basename(link.path)} -> {link.target}" for link in links]
    return [f"hook update-ldcache emulated: {', '.join(folders)} first on LD_LIBRARY_PATH"
            + (f", {counted(len(links), 'link')} by SONAME ({listed(shown)})" if links else ", no library there to link by SONAME")]
