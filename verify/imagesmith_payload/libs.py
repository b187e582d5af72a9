"""Find and load CUDA libraries with ctypes, without importing torch.

A CUDA build of torch needs cudart, cuBLAS, cuDNN and NCCL at run time; they
come from the nvidia-* wheels (site-packages/nvidia/*/lib), torch/lib, or the
system (LD_LIBRARY_PATH, /usr/local/cuda, the ldconfig cache).
"""

from __future__ import annotations

import base64
import concurrent.futures
import ctypes
import glob
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .judge import cuda_version_string, cudnn_version_string, nccl_version_string
from .parsers import parse_torch_version_py

SYSTEM_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
               "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
               "/usr/lib/aarch64-linux-gnu", "/usr/local/cuda/targets/sbsa-linux/lib")


@dataclass(frozen=True)
class TorchBuild:
    path: Optional[str]  # the torch package folder
    version: Optional[str]
    cuda: Optional[str]  # None: a CPU-only build


def torch_build() -> TorchBuild:
    """torch's version and CUDA version from torch/version.py, torch not imported."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return TorchBuild(None, None, None)
    folder = list(spec.submodule_search_locations)[0]
    try:
        with open(os.path.join(folder, "version.py"), encoding="utf-8") as fh:
            info = parse_torch_version_py(fh.read())
    except OSError:
        return TorchBuild(folder, None, None)
    return TorchBuild(folder, info["version"], info["cuda"])


def search_dirs(torch_dir: Optional[str]) -> List[str]:
    """Where a CUDA library may live, most specific first."""
    dirs: List[str] = []
    if torch_dir:
        dirs.append(os.path.join(torch_dir, "lib"))
    for site in _site_dirs():
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", "*", "lib")))
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += list(SYSTEM_DIRS)
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _site_dirs() -> List[str]:
    paths = {sysconfig.get_paths().get("purelib", ""), sysconfig.get_paths().get("platlib", "")}
    paths.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return sorted(p for p in paths if p and os.path.isdir(p))


def find_library(patterns: Sequence[str], dirs: Sequence[str]) -> Optional[str]:
    """First file matching any pattern in the first folder holding one; then ldconfig."""
    for pattern in patterns:  # an exact soname anywhere beats a looser pattern
        for folder in dirs:
            hits = sorted(glob.glob(os.path.join(folder, pattern)), key=_numeric_key)
            if hits:
                return hits[-1]
    return _ldconfig_lookup(patterns)


def _numeric_key(path: str) -> List[int]:
    return [int(n) for n in re.findall(r"\d+", os.path.basename(path))]


def _ldconfig_lookup(patterns: Sequence[str]) -> Optional[str]:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    import fnmatch
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        name = name.split(" ", 1)[0]
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return path.strip()
    return None


# ---------------------------------------------------------------- libraries
@dataclass(frozen=True)
class LibrarySpec:
    key: str
    patterns: Callable[[Optional[str]], List[str]]  # from the CUDA major version
    version: Callable[[ctypes.CDLL], str]
    preload: Sequence[str] = ()  # other keys to load first (RTLD_GLOBAL)


def _int_out(fn_name: str, fmt: Callable[[int], str]) -> Callable[[ctypes.CDLL], str]:
    def read(lib: ctypes.CDLL) -> str:
        out = ctypes.c_int()
        rc = getattr(lib, fn_name)(ctypes.byref(out))
        if rc != 0:
            raise OSError(f"{fn_name} returned error {rc}")
        return fmt(out.value)
    return read


def _cudnn_version(lib: ctypes.CDLL) -> str:
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    return cudnn_version_string(int(lib.cudnnGetVersion()))


def _cublas_version(lib: ctypes.CDLL) -> str:
    lib.cublasGetProperty.restype = ctypes.c_int
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        out = ctypes.c_int()
        if lib.cublasGetProperty(prop, ctypes.byref(out)) != 0:
            raise OSError("cublasGetProperty failed")
        parts.append(str(out.value))
    return ".".join(parts)


def _versioned(stem: str) -> Callable[[Optional[str]], List[str]]:
    return lambda major: ([f"{stem}.so.{major}"] if major else []) + [
        f"{stem}.so.[0-9]*", f"{stem}-*.so*"]


LIBRARIES: Dict[str, LibrarySpec] = {
    "cudart": LibrarySpec("cudart", _versioned("libcudart"),
                          _int_out("cudaRuntimeGetVersion", cuda_version_string)),
    "cublas": LibrarySpec("cublas", _versioned("libcublas"), _cublas_version,
                          preload=("cudart", "cublasLt")),
    "cublasLt": LibrarySpec("cublasLt", _versioned("libcublasLt"), lambda lib: ""),
    "cudnn": LibrarySpec("cudnn", lambda major: ["libcudnn.so.[0-9]*", "libcudnn-*.so*"],
                         _cudnn_version, preload=("cudart", "cublasLt", "cublas")),
    "nccl": LibrarySpec("nccl", lambda major: ["libnccl.so.2", "libnccl.so.[0-9]*"],
                        _int_out("ncclGetVersion", nccl_version_string), preload=("cudart",)),
}


@dataclass(frozen=True)
class Loaded:
    key: str
    path: Optional[str]
    version: Optional[str]
    error: Optional[str]
    siblings: int = 0  # cuDNN 9 sub-libraries loaded too
    sibling_errors: Tuple[str, ...] = ()


def load(key: str, build: TorchBuild) -> Loaded:
    """Find and dlopen one library (its prerequisites first); read its version."""
    spec = LIBRARIES[key]
    major = (build.cuda or "").split(".")[0] or None
    dirs = search_dirs(build.path)
    for dep in spec.preload:
        load_path(find_library(LIBRARIES[dep].patterns(major), dirs))
    path = find_library(spec.patterns(major), dirs)
    if path is None:
        return Loaded(key, None, None, f"no {' or '.join(spec.patterns(major))} in "
                      f"{', '.join(dirs[:6])}{' ...' if len(dirs) > 6 else ''} or the ldconfig cache")
    try:
        lib = load_path(path, strict=True)
        assert lib is not None
        version = spec.version(lib) or None
    except (OSError, AttributeError) as exc:
        return Loaded(key, path, None, f"{type(exc).__name__}: {exc}")
    loaded, errors = _load_cudnn_siblings(path) if key == "cudnn" else (0, ())
    return Loaded(key, path, version, None, loaded, errors)


def load_path(path: Optional[str], strict: bool = False) -> Optional[ctypes.CDLL]:
    if path is None:
        return None
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        if strict:
            raise
        return None


def _load_cudnn_siblings(path: str) -> Tuple[int, Tuple[str, ...]]:
    """cuDNN 9 splits into libcudnn_*.so.9 loaded on demand: load each now."""
    folder, name = os.path.split(path)
    major = name.rsplit(".so.", 1)[-1].split(".")[0]
    loaded, errors = 0, []
    for sibling in sorted(glob.glob(os.path.join(folder, f"libcudnn_*.so.{major}"))):
        try:
            load_path(sibling, strict=True)
            loaded += 1
        except OSError as exc:
            errors.append(f"{os.path.basename(sibling)}: {exc}")
    return loaded, tuple(errors)


# ---------------------------------------------------------- CUDA runtime
RUNTIME_WHEELS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                  "nvidia-cuda-runtime-cu11")


def cuda_runtime_version(build: Optional[TorchBuild] = None) -> Optional[Tuple[str, str]]:
    """(version, where it was read) of the CUDA runtime this image carries: the
    nvidia-cuda-runtime wheel's version (= the cudart component version), else the
    full version in the real file name of libcudart (libcudart.so.12.8.90)."""
    from importlib import metadata
    for name in RUNTIME_WHEELS:
        try:
            return metadata.version(name), f"{name} wheel"
        except metadata.PackageNotFoundError:
            continue
    build = build or torch_build()
    major = (build.cuda or "").split(".")[0] or None
    path = find_library(LIBRARIES["cudart"].patterns(major), search_dirs(build.path)) if build.cuda else None
    real = os.path.basename(os.path.realpath(path)) if path else ""
    found = re.search(r"\.so\.(\d+\.\d+\.\d+)$", real)
    return (found.group(1), real) if found else None



# ---------------------------------------------------------------- integrity
# Every shared library of the nvidia-* wheels (CUDA runtime, cuBLAS, cuDNN, NCCL,
# ...) must be on disk, match the sha256 its wheel's RECORD lists, and load.
# A partly removed or corrupted cuDNN is caught without a GPU: torch still
# imports and cudnn.version() still answers when only libcudnn_cnn* is gone.
SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")
NEEDS_DRIVER = ("libcuda.so", "libnvidia-ml.so")  # not in an image: the runtime injects them


@dataclass(frozen=True)
class RecordedLibrary:
    dist: str  # "nvidia-cudnn-cu13 9.24.0.43"
    path: str  # absolute
    hash: Optional[str]  # "sha256=<urlsafe base64>" from RECORD


def cuda_distributions() -> List[Any]:
    """Installed distributions named nvidia-* (the CUDA wheels torch depends on)."""
    from importlib import metadata
    found = {}
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
        if name.startswith("nvidia-") and name not in found:
            found[name] = dist
    return [found[n] for n in sorted(found)]


def recorded_libraries(dist: Any) -> List[RecordedLibrary]:
    label = f"{dist.metadata['Name']} {dist.version}"
    return [RecordedLibrary(label, str(dist.locate_file(f)), f.hash and f"{f.hash.mode}={f.hash.value}")
            for f in dist.files or () if SHARED_LIBRARY.search(f.name)]


def hash_problem(lib: RecordedLibrary) -> Optional[str]:
    """Why `lib` is not the file its wheel installed (None when it is)."""
    if not os.path.isfile(lib.path):
        return "missing"
    if not lib.hash:
        return None
    mode, _, expected = lib.hash.partition("=")
    digest = hashlib.new(mode)
    with open(lib.path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    actual = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    return None if actual == expected else f"{mode} differs from the wheel's RECORD"


def hash_problems(libs: Sequence[RecordedLibrary]) -> Dict[str, str]:
    """path -> problem for every library that is missing or altered (threads: hashlib
    releases the GIL on large reads)."""
    workers = max(1, min(8, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = pool.map(hash_problem, libs)
    return {lib.path: p for lib, p in zip(libs, results) if p}


LOADER = """
import ctypes, json, sys
paths, errors = json.load(sys.stdin), {}
for _ in range(4):  # later passes: a library whose dependency loaded in an earlier one
    errors = {}
    for p in paths:
        try:
            ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            errors[p] = str(exc)
    if not errors or len(errors) == len(paths):
        break
    paths = [p for p in paths if p in errors]
print(json.dumps(errors))
"""


def load_problems(paths: Sequence[str], timeout: float = 240.0) -> Dict[str, str]:
    """path -> loader error, from a child process (a library that crashes while
    loading must not take the payload with it, nor stay mapped in it)."""
    if not paths:
        return {}
    proc = subprocess.run([sys.executable, "-c", LOADER], input=json.dumps(list(paths)),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or "").strip().splitlines()[-2:])
        return {p: f"the loader process died (exit {proc.returncode}): {tail}" for p in paths}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def needs_driver(error: str) -> bool:
    return any(name in error for name in NEEDS_DRIVER)


MISSING_DEPENDENCY = re.compile(r"([^\s:/]+\.so[.\d]*): cannot open shared object file")


def outside_dependency(error: str, wheel_names: Sequence[str]) -> Optional[str]:
    """The library a load failed on when no nvidia-* wheel ships it (an optional
    plugin's MPI, UCX, libfabric or RDMA library), else None."""
    found = MISSING_DEPENDENCY.search(error)
    dep = found.group(1) if found else None
    return dep if dep and dep not in wheel_names and not needs_driver(dep) else None
