"""Targets -> build contexts on disk (Dockerfile + files), byte-for-byte
deterministic. ``check`` reports drift between disk and what would render.

Values are escaped for the file they land in (shell words with ``quote``,
Dockerfile double-quoted strings with ``dq``, Python literals with
``pystr``), and every rendered file passes :mod:`imagesmith.render.guard` (BuildKit's
parser for Dockerfiles) before anything is written. A layer's own template is
trusted code from the matrix's folder, rendered in Jinja's sandbox; files it
includes stay inside the folder (or an allowed root), like every other path.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import jinja2
import jinja2.sandbox

from imagesmith.atomic import write_bytes
from imagesmith.errors import ValidationError
from imagesmith.model import compat, grammar
from imagesmith.model.matrix.context import TEMPLATE_LIMIT
from imagesmith.model.matrix.layers import is_shipped_template
from imagesmith.model.matrix.records import Layer, Matrix
from imagesmith.model.paths import PathProblem, Roots, confined, read_text
from imagesmith.model.plan import Plan, Target, cuda_image
from imagesmith.render import cudalayer, guard
from imagesmith.resources import templates_dir

UV_VERSION = "0.9.30"
BASE_TEMPLATE = "base.Dockerfile.j2"
MANIFEST = ".rendered"  # the file list older versions wrote beside each context
EXECUTABLE = frozenset({"services/imagesmith-services"})
BUILD_OUTPUTS = ("build.log", "*.json", MANIFEST)  # written beside a context by later stages, never sent to docker
DOCKERIGNORE = "# build outputs that live beside the context\n" + "".join(f"{p}\n" for p in BUILD_OUTPUTS)


@dataclass(frozen=True)
class Context:
    """One target's build context: relative path -> bytes (and which files are executable)."""

    target: Target
    files: Mapping[str, bytes]
    executable: frozenset[str] = field(default=EXECUTABLE)
    in_place: bool = False  # Python and torch installed where the image keeps them: no builder stage to build ahead

    @property
    def folder(self) -> str:
        return self.target.id

    def mode(self, rel: str) -> int:
        return 0o755 if rel in self.executable else 0o644


# -- escaping filters --------------------------------------------------------------------


def dq(value: object) -> str:
    """Text for a Dockerfile double-quoted string (ENV, LABEL, ARG): \\ " and $ escaped."""
    text = str(value)
    if "\\" not in text and '"' not in text and "$" not in text:
        return text
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def pystr(value: object) -> str:
    """A Python string literal (JSON's quoting is valid Python)."""
    return json.dumps(str(value))


# -- templates -------------------------------------------------------------------------------


class _Loader(jinja2.BaseLoader):
    """Our templates by name; then the user's, inside the matrix folder or an allowed root only."""

    def __init__(self, roots: Roots | None) -> None:
        self.ours = jinja2.FileSystemLoader(str(templates_dir()))
        self.roots = roots

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str | None, Callable[[], bool]]:
        if is_shipped_template(template, templates_dir()):
            return self.ours.get_source(environment, template)
        if self.roots is None:
            raise jinja2.TemplateNotFound(template)
        try:
            path = confined(self.roots, template)
            return read_text(path, template, TEMPLATE_LIMIT)[1], str(path), lambda: True
        except PathProblem as exc:
            raise jinja2.TemplateNotFound(template, str(exc)) from None


def environment(matrix_dir: Path | None = None, roots: Roots | None = None, sandboxed: bool = False) -> jinja2.Environment:
    """Templates from templates/, then the user's (a layer's own ``template:``,
    which may extend ours). ``sandboxed`` for user templates."""
    if roots is None and matrix_dir is not None:
        roots = Roots(matrix_dir.resolve())
    cls = jinja2.sandbox.SandboxedEnvironment if sandboxed else jinja2.Environment
    env = cls(
        loader=_Loader(roots),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        auto_reload=False,
        finalize=guard.mark,
    )
    env.filters.update(quote=shlex.quote, dq=dq, pystr=pystr, template_text=guard.template_text)
    return env


@functools.lru_cache(maxsize=4096)
def _pinned(spec: str) -> str | None:
    """``name==version`` for a pinned requirement, else None."""
    from packaging.requirements import Requirement

    return f"{Requirement(spec).name}{Requirement(spec).specifier}" if grammar.is_pinned(spec) else None


def _services_label(layer: Layer) -> str:
    on = [f"sshd:{layer.sshd.port}"] if layer.sshd.enabled else []
    return " ".join(on + ([f"jupyter:{layer.jupyter.bind}:{layer.jupyter.port}"] if layer.jupyter.enabled else []))


class Renderer:
    """Renders the targets of one plan; shares environments, the guard's verdicts and labels."""

    def __init__(self, plan: Plan, matrix: Matrix, kb: compat.KnowledgeBase | None = None) -> None:
        self.plan, self.matrix, self.kb = plan, matrix, kb or compat.load()
        roots = matrix.roots or Roots(matrix.file.resolve().parent)
        self.env = environment(roots=roots)
        self.sandbox = environment(roots=roots, sandboxed=True)
        self.guard = guard.Guard()
        self.layers = {layer.name: layer for layer in matrix.layers}
        self._labels: dict[str, str] = {}
        self._services: dict[str, dict[str, bytes]] = {}
        self.delta = (templates_dir() / "files" / "layer_delta.py").read_bytes()

    def packages_label(self, t: Target) -> str:
        """Every pinned pip package this image declares, its ancestors' included."""
        if t.id not in self._labels:
            own = [p for p in map(_pinned, t.packages) if p] + list(self.layers[t.layer].requirements_pins)
            parent = self.packages_label(self.plan.by_id()[t.parent]) if t.parent else ""
            self._labels[t.id] = " ".join(filter(None, [parent, *own]))
        return self._labels[t.id]

    def variables(self, t: Target) -> dict[str, object]:
        layer = self.layers[t.layer]
        parent = self.plan.by_id()[t.parent] if t.parent else None
        return {
            "t": t, "v": t.versions, "layer": layer, "image": self.matrix.image,
            "has_ca": self.matrix.sources.ca_bundle is not None, "in_place": self.in_place(t),
            "parent_image": parent.image if parent else "", "pip_specs": list(t.packages),
            "has_requirements": layer.requirements is not None,
            "os_python": self.kb.os[t.versions.os].python, "uv_version": UV_VERSION,
            "packages_label": self.packages_label(t), "services_label": _services_label(layer),
            "extra_index_urls": list(t.pip.extras()),
            "lineage": " ".join(a.layer for a in self.plan.ancestors(t) + [t]),
            "base_ref": cuda_image(t, self.matrix.image.repository) if t.cuda_set else t.base_image,
            "cuda_pth": cudalayer.PTH_NAME,
        }

    def in_place(self, t: Target) -> bool:
        """The shipped base template installs Python and torch in the stage the image keeps (no builder stage, no
        copy of the venv), unless a CA bundle must reach pip and the build cannot fetch it from the loopback server
        (``sources.network`` not ``host``): then a builder stage holds the bundle and the venv is copied out of it."""
        shipped = t.template == BASE_TEMPLATE and not self.layers[t.layer].template_path
        return shipped and (self.matrix.sources.ca_bundle is None or self.matrix.sources.ca_on_loopback)

    def _render(self, t: Target, name: str, variables: dict[str, object], kind: str, rel: str) -> bytes:
        users = bool(self.layers[t.layer].template_path) and name == t.template
        where = ("layers", t.layer, "template") if users else ("layers", t.layer)
        try:
            marked = (self.sandbox if users else self.env).get_template(name).render(variables)
        except jinja2.TemplateError as exc:
            raise self._refused(where, f"{t.id}: template {name}: {type(exc).__name__}: {str(exc)[:300]}") from None
        except Exception as exc:  # a user's template is code: its failure is the user's to fix
            if not users:
                raise
            raise self._refused(where, f"{t.id}: template {name} failed: {type(exc).__name__}: {str(exc)[:300]}") from None
        findings = self.guard.check(kind, marked, trusted_macros=users)
        if findings:
            raise ValidationError(problems=[self.matrix.problem(where, (
                f"{t.id}/{rel}:{f.line}: {f.why}; nothing was written (template {name})" + (
                    "" if users else ": a gap in imagesmith's validation or escaping, please report it with the matrix")))
                for f in findings])
        return guard.unmark(marked).encode()

    def _refused(self, where: tuple[str, ...], message: str) -> ValidationError:
        return ValidationError(problems=[self.matrix.problem(where, message)])

    def target(self, t: Target) -> Context:
        layer = self.layers[t.layer]
        variables = self.variables(t)
        in_place = self.in_place(t)
        files = {"Dockerfile": self._render(t, t.template, variables, "dockerfile", "Dockerfile"),
                 ".dockerignore": DOCKERIGNORE.encode()}
        if t.parent:
            files["layer_delta.py"] = self.delta
        if t.cuda_set and not in_place:  # the builder stage's stand-ins for the CUDA wheels
            files.update({f"cuda-stubs/{rel}": data for rel, data in cudalayer.stub_files(t.cuda_set.pins).items()})
        if layer.requirements:
            files["requirements.txt"] = layer.requirements_data
        if self.matrix.sources.ca_bundle:
            files["certs/extra-ca.pem"] = self.matrix.sources.ca_bundle_data
        files.update(self._service_files(t, layer))
        return Context(t, dict(sorted(files.items())), in_place=in_place)

    def _service_files(self, t: Target, layer: Layer) -> dict[str, bytes]:
        """The dev services' files: they see only the layer and the image, so they are
        rendered (and checked) once per layer."""
        if layer.name not in self._services:
            checks = {"sshd_config": "config", "jupyter_server_config.py": "python", "imagesmith-services": "shell"}
            names = (["sshd_config"] if layer.sshd.enabled else []) + \
                    (["jupyter_server_config.py"] if layer.jupyter.enabled else [])
            names += ["imagesmith-services"] if names else []
            variables: dict[str, object] = {"layer": layer, "image": self.matrix.image}
            self._services[layer.name] = {f"services/{n}": self._render(t, f"services/{n}.j2", variables, checks[n], f"services/{n}")
                                          for n in names}
        return self._services[layer.name]


def render_target(plan: Plan, matrix: Matrix, t: Target, kb: compat.KnowledgeBase | None = None) -> Context:
    return Renderer(plan, matrix, kb).target(t)


def render_all(plan: Plan, matrix: Matrix, kb: compat.KnowledgeBase | None = None) -> list[Context]:
    """Every target's context, then one per CUDA wheel set (``cuda-<set id>``)."""
    renderer = Renderer(plan, matrix, kb)
    return [renderer.target(t) for t in plan.targets]


def user_templates(matrix: Matrix) -> list[tuple[str, Path, list[str]]]:
    """(layer, template file, files it extends/includes/imports that are the user's):
    the code ``render`` would run from the matrix's folder."""
    from jinja2 import meta

    env = environment(roots=matrix.roots or Roots(matrix.file.resolve().parent), sandboxed=True)
    out = []
    for layer in matrix.layers:
        if layer.template_path is None:
            continue
        seen, todo = [], [layer.template]
        while todo:
            name = todo.pop()
            try:
                source = env.loader.get_source(env, name)[0]  # type: ignore[union-attr]
                refs = [r for r in meta.find_referenced_templates(env.parse(source)) if r]
            except jinja2.TemplateError:
                continue
            for ref in refs:
                if ref not in seen and not is_shipped_template(ref, templates_dir()):
                    seen.append(ref)
                    todo.append(ref)
        out.append((layer.name, layer.template_path, seen))
    return out


# -- disk ------------------------------------------------------------------------


def _is_context(folder: Path) -> bool:
    """A folder imagesmith rendered (its .dockerignore is ours; older renders left a manifest)."""
    try:
        return (folder / MANIFEST).is_file() or (folder / ".dockerignore").read_text().startswith(DOCKERIGNORE)
    except OSError:
        return False


def _is_output(rel: str) -> bool:
    return "/" not in rel and any(fnmatch.fnmatchcase(rel, p) for p in BUILD_OUTPUTS)


def _on_disk(folder: Path) -> dict[str, os.stat_result]:
    """Every file (or link) under ``folder`` but the build outputs: relative path -> lstat."""
    found: dict[str, os.stat_result] = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if not _is_output(rel):
                found[rel] = os.lstat(os.path.join(root, name))
    return found


def write(contexts: list[Context], out: Path) -> list[Path]:
    """Write every context under ``out/<target id>/``: exactly its files, with
    their modes; anything else there (but build outputs) is removed. In a new
    context, a file whose bytes another new context already holds is a hard
    link to it: most files repeat across targets, and a link costs the disk
    far less than a new file (an interrupted write is repaired, or reported
    by ``check``, the next time)."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    same: dict[tuple[int, bytes], str] = {}
    for ctx in contexts:
        folder = out / ctx.folder
        if folder.is_dir():
            _update(ctx, folder)
        else:
            _create(ctx, folder, same)
        written.append(folder)
    return written


def _create(ctx: Context, folder: Path, same: dict[tuple[int, bytes], str]) -> None:
    base = str(folder)
    os.mkdir(base)
    for sub in sorted({os.path.dirname(rel) for rel in ctx.files} - {""}):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    for rel, data in ctx.files.items():
        key, path = (ctx.mode(rel), data), os.path.join(base, rel)
        if not _link(same.get(key), path):
            _new_file(path, data, ctx.mode(rel))
            same[key] = path


def _link(source: str | None, path: str) -> bool:
    if source is None:
        return False
    try:
        os.link(source, path)
        return True
    except OSError:  # no hard links here, or too many to one file: write it
        return False


def _new_file(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        if mode & _UMASK:
            os.fchmod(fd, mode)  # the umask took bits the file must have
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()


def _update(ctx: Context, folder: Path) -> None:
    existing = _on_disk(folder)
    for extra in set(existing) - set(ctx.files):
        (folder / extra).unlink(missing_ok=True)
    for rel, data in ctx.files.items():
        _write_file(folder / rel, data, ctx.mode(rel), existing.get(rel))


def _write_file(path: Path, data: bytes, mode: int, seen: os.stat_result | None) -> None:
    if seen is None or not stat.S_ISREG(seen.st_mode) or seen.st_size != len(data) or path.read_bytes() != data:
        write_bytes(path, data)
        path.chmod(mode)
    elif stat.S_IMODE(seen.st_mode) != mode:
        path.chmod(mode)


def check(contexts: list[Context], out: Path) -> list[str]:
    """What differs between ``out`` and ``contexts`` (empty: no drift): content,
    modes, and the set of files (an extra file changes the build context too)."""
    drift: list[str] = []
    for ctx in contexts:
        folder = out / ctx.folder
        on_disk = _on_disk(folder) if folder.is_dir() else {}
        for rel, data in ctx.files.items():
            drift += _drift(folder / rel, on_disk.get(rel), data, ctx.mode(rel), ctx.folder)
        drift += [f"{folder / rel}: not rendered by imagesmith (an extra file in the build context)"
                  for rel in sorted(set(on_disk) - set(ctx.files))]
    expected = {ctx.folder for ctx in contexts}
    if out.is_dir():
        drift += [f"{d}: stale target (not in the plan)" for d in sorted(out.iterdir())
                  if d.name not in expected and _is_context(d)]
    return drift


def _drift(path: Path, seen: os.stat_result | None, data: bytes, mode: int, target: str) -> list[str]:
    if seen is None:
        return [f"{path}: missing"]
    if not stat.S_ISREG(seen.st_mode):
        return [f"{path}: not a regular file"]
    if seen.st_size != len(data) or path.read_bytes() != data:
        return [f"{path}: differs from what {target} renders to"]
    if stat.S_IMODE(seen.st_mode) != mode:
        return [f"{path}: mode {stat.S_IMODE(seen.st_mode):o}, rendered as {mode:o}"]
    return []
