"""Targets -> build contexts on disk (Dockerfile + files), byte-for-byte
deterministic. ``check`` reports drift between disk and what would render."""

from __future__ import annotations

import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import jinja2

from imagesmith import compat, cudalayer
from imagesmith.atomic import write_bytes, write_text
from imagesmith.matrix import Layer, Matrix
from imagesmith.plan import CudaSet, Plan, Target, cuda_image
from imagesmith.resources import templates_dir

UV_VERSION = "0.9.30"
MANIFEST = ".rendered"
EXECUTABLE = {"services/imagesmith-services"}
DOCKERIGNORE = "# build outputs that live beside the context\nbuild.log\n*.json\n" + MANIFEST + "\n"


@dataclass(frozen=True)
class Context:
    """One target's build context: relative path -> bytes. A CUDA wheel set's
    context (``name`` cuda-<set id>) renders for the first target using it."""

    target: Target
    files: Mapping[str, bytes]
    name: str = ""

    @property
    def folder(self) -> str:
        return self.name or self.target.id


def environment(matrix_dir: Path | None = None) -> jinja2.Environment:
    """Templates from templates/, then from beside the matrix file (a layer's
    own ``template:``, which may extend ours)."""
    folders = [str(templates_dir())] + ([str(matrix_dir)] if matrix_dir else [])
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["quote"] = shlex.quote
    return env


def _ancestors(plan: Plan, t: Target) -> list[Target]:
    index, chain = plan.by_id(), []
    while t.parent:
        t = index[t.parent]
        chain.append(t)
    return chain[::-1]


def _pins(matrix: Matrix, t: Target) -> list[str]:
    layer = matrix.layer(t.layer)
    lines = layer.requirements.read_text().splitlines() if layer.requirements else []
    specs = list(t.packages) + [line.split("#", 1)[0].strip() for line in lines]
    return [s.replace(" ", "") for s in specs if "==" in s and not s.startswith("-")]


def _packages_label(plan: Plan, matrix: Matrix, t: Target) -> str:
    """Every pinned pip package this image declares, its ancestors' included."""
    return " ".join(s for a in _ancestors(plan, t) + [t] for s in _pins(matrix, a))


def _services_label(layer: Layer) -> str:
    on = [f"sshd:{layer.sshd.port}"] if layer.sshd.enabled else []
    return " ".join(on + ([f"jupyter:{layer.jupyter.bind}:{layer.jupyter.port}"] if layer.jupyter.enabled else []))


def _variables(plan: Plan, matrix: Matrix, t: Target, kb: compat.KnowledgeBase) -> dict[str, object]:
    layer = matrix.layer(t.layer)
    parent = plan.by_id()[t.parent] if t.parent else None
    return {
        "t": t, "v": t.versions, "layer": layer, "image": matrix.image,
        "matrix_name": matrix.file.name, "has_ca": matrix.sources.ca_bundle is not None,
        "parent_image": parent.image if parent else "", "pip_specs": list(t.packages),
        "has_requirements": layer.requirements is not None,
        "os_python": kb.os[t.versions.os].python, "uv_version": UV_VERSION,
        "packages_label": _packages_label(plan, matrix, t), "services_label": _services_label(layer),
        "extra_index_urls": list(t.pip.extras()),
        "lineage": " ".join(a.layer for a in _ancestors(plan, t) + [t]),
        "base_ref": cuda_image(t, matrix.image.repository) if t.cuda_set else t.base_image,
        "cuda_pth": cudalayer.PTH_NAME,
    }


def _service_files(env: jinja2.Environment, layer: Layer, variables: dict[str, object]) -> dict[str, bytes]:
    names = (["sshd_config"] if layer.sshd.enabled else []) + \
            (["jupyter_server_config.py"] if layer.jupyter.enabled else [])
    if names:
        names.append("imagesmith-services")
    return {f"services/{n}": env.get_template(f"services/{n}.j2").render(variables).encode() for n in names}


def render_target(plan: Plan, matrix: Matrix, t: Target, kb: compat.KnowledgeBase | None = None,
                  env: jinja2.Environment | None = None) -> Context:
    kb, env = kb or compat.load(), env or environment(matrix.file.parent)
    layer = matrix.layer(t.layer)
    variables = _variables(plan, matrix, t, kb)
    files = {"Dockerfile": env.get_template(t.template).render(variables).encode(),
             ".dockerignore": DOCKERIGNORE.encode()}
    if t.parent:
        files["layer_delta.py"] = (templates_dir() / "files" / "layer_delta.py").read_bytes()
    if t.cuda_set:
        files.update({f"cuda-stubs/{rel}": data for rel, data in cudalayer.stub_files(t.cuda_set.pins).items()})
    if layer.requirements:
        files["requirements.txt"] = layer.requirements.read_bytes()
    if matrix.sources.ca_bundle:
        files["certs/extra-ca.pem"] = matrix.sources.ca_bundle.read_bytes()
    files.update(_service_files(env, layer, variables))
    return Context(t, dict(sorted(files.items())))


def cuda_set_folder(cuda_set: CudaSet) -> str:
    return f"cuda-{cuda_set.id}"


def render_cuda_set(plan: Plan, matrix: Matrix, cuda_set: CudaSet, kb: compat.KnowledgeBase | None = None,
                    env: jinja2.Environment | None = None) -> Context:
    """The context that downloads a CUDA wheel set (for the first base target using it)."""
    kb, env = kb or compat.load(), env or environment(matrix.file.parent)
    users = [t for t in plan.targets if t.cuda_set == cuda_set]
    variables = _variables(plan, matrix, users[0], kb) | {"set": cuda_set, "users": [t.cell for t in users]}
    files = {"Dockerfile": env.get_template("cuda.Dockerfile.j2").render(variables).encode(),
             ".dockerignore": DOCKERIGNORE.encode()}
    if matrix.sources.ca_bundle:
        files["certs/extra-ca.pem"] = matrix.sources.ca_bundle.read_bytes()
    return Context(users[0], dict(sorted(files.items())), cuda_set_folder(cuda_set))


def render_all(plan: Plan, matrix: Matrix, kb: compat.KnowledgeBase | None = None) -> list[Context]:
    env = environment(matrix.file.parent)
    sets = list(dict.fromkeys(t.cuda_set for t in plan.targets if t.cuda_set))
    return [render_target(plan, matrix, t, kb, env) for t in plan.targets] + \
        [render_cuda_set(plan, matrix, s, kb, env) for s in sets]


# -- disk ------------------------------------------------------------------------


def write(contexts: list[Context], out: Path) -> list[Path]:
    """Write every context under ``out/<target id>/``; files a previous render
    wrote and this one does not are removed."""
    written = []
    for ctx in contexts:
        folder = out / ctx.folder
        for stale in set(_manifest(folder)) - set(ctx.files):
            (folder / stale).unlink(missing_ok=True)
        for rel, data in ctx.files.items():
            _write_file(folder / rel, data, rel in EXECUTABLE)
        write_text(folder / MANIFEST, "".join(f"{rel}\n" for rel in ctx.files))
        written.append(folder)
    return written


def _write_file(path: Path, data: bytes, executable: bool) -> None:
    if not path.exists() or path.read_bytes() != data:
        write_bytes(path, data)
    mode = 0o755 if executable else 0o644
    if stat.S_IMODE(path.stat().st_mode) != mode:
        path.chmod(mode)


def _manifest(folder: Path) -> list[str]:
    file = folder / MANIFEST
    return file.read_text().split() if file.is_file() else []


def check(contexts: list[Context], out: Path) -> list[str]:
    """What differs between ``out`` and ``contexts`` (empty: no drift)."""
    drift: list[str] = []
    for ctx in contexts:
        folder = out / ctx.folder
        for rel, data in ctx.files.items():
            path = folder / rel
            if not path.is_file():
                drift.append(f"{path}: missing")
            elif path.read_bytes() != data:
                drift.append(f"{path}: differs from what {ctx.folder} renders to")
        drift += [f"{folder / rel}: no longer rendered" for rel in set(_manifest(folder)) - set(ctx.files)]
    expected = {ctx.folder for ctx in contexts}
    if out.is_dir():
        drift += [f"{d}: stale target (not in the plan)" for d in sorted(out.iterdir())
                  if (d / MANIFEST).is_file() and d.name not in expected]
    return drift
