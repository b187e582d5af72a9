"""Where a build takes things from: the matrix's ``sources:`` section (package indexes, the torch index, a CA bundle,
credentials, the proxy, advisories) and ``base_images:`` (pinned references), each checked where it is read."""

from __future__ import annotations

import urllib.parse
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

from imagesmith.model import grammar
from imagesmith.model import platform as platforms
from imagesmith.model.located import KeyPath, printable
from imagesmith.model.matrix.context import (
    CA_LIMIT,
    NETWORK_MODES,
    MatrixCtx,
)
from imagesmith.model.matrix.records import (
    Cell,
    Credential,
    Sources,
)
from imagesmith.model.paths import PathProblem, confined
from imagesmith.model.ref import ImageRef
from imagesmith.model.validation import Ctx, Key, Rule, Table


def _advisories(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[str, ...]:
    """OSV snapshots: an http(s) URL, or a zip or folder inside the roots (read when matched, not here)."""
    out = []
    for i, text in enumerate(ctx.strings(raw, path)):
        where = path + (i,)
        if text.startswith(("http://", "https://")):
            out.append(ctx.checked(text, where, grammar.url))
            continue
        try:
            found = confined(ctx.roots, text, kind="any")
        except PathProblem as exc:
            ctx.error(where, str(exc))
            continue
        out.append(str(found))
    return tuple(out)


def _index(ctx: MatrixCtx, raw: Any, path: KeyPath) -> str | None:
    """An index or find-links URL; a local folder (/path or file:///path) stays inside the roots."""
    text = ctx.string(raw, path)
    if text is None:
        return None
    sample = text.replace("{variant}", "cpu") if path[-1] == "torch_index_url" else text
    if sample.startswith("/") and not grammar.URL_CHARS.fullmatch(sample):
        ctx.error(path, f"{printable(text)}: a folder path here may hold only letters, digits and - . _ ~ / "
                  "(it goes into a space-separated list); rename the folder")
    elif sample.startswith("/"):
        ctx.local_folder(sample, path)
    elif not ctx.checked(sample, path, grammar.url) or grammar.url(sample):
        pass
    elif sample.startswith("file://"):
        ctx.local_folder(urllib.parse.unquote(urllib.parse.urlsplit(sample).path), path)
    return text


def _indexes(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[str, ...]:
    values = ctx.strings(raw, path)
    return tuple(_index(ctx, v, path + (i,)) or v for i, v in enumerate(values))


def _ca_bundle(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[Path, bytes] | None:
    found = ctx.local_file(raw, path, CA_LIMIT)
    if found and "-----BEGIN CERTIFICATE-----" not in found[2]:
        ctx.error(path, f"{raw} holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA bundle of your proxy")
        return None
    return (found[0], found[1]) if found else None


def check_torch_index(ctx: MatrixCtx, sources: Sources) -> None:
    cuda_variants = sorted(v for v in ctx.variants if v != "cpu")
    url = sources.torch_index_url
    if url and "{variant}" not in url and len(cuda_variants) > 1:
        ctx.warn(("sources", "torch_index_url"), f"has no {{variant}} but the matrix needs {', '.join(cuda_variants)} wheels, "
                 "which live on different indexes; write e.g. https://mirror.example.com/whl/{variant}")


PYPI_HOSTS = ("pypi.org", "pypi.python.org")


def check_pypi_platform_wheels(ctx: MatrixCtx, cells: Sequence[Cell], sources: Sources) -> None:
    """A CUDA cell whose platform's torch wheel on PyPI is the CPU build (the knowledge base's ``pypi: cpu``) must not
    take torch from PyPI: it would build, and run, without CUDA (pytorch/pytorch#160162)."""
    url = sources.torch_index_url
    if not url or urllib.parse.urlsplit(url).hostname not in PYPI_HOSTS:
        return
    for cell in cells:
        release = ctx.kb.resolve_torch(cell.torch)
        variant = release.variant_for(cell.cuda) if release else None
        wheels = ctx.kb.wheels_for(release, variant.name, cell.platform) if release and variant and variant.cuda else None
        if release is not None and variant is not None and wheels is not None and wheels.pypi == "cpu":
            ctx.error(("sources", "torch_index_url"),
                      f"PyPI's {cell.platform} wheel of torch {release.version} is the CPU build (torch.version.cuda is None; "
                      f"pytorch/pytorch#160162), so cell {cell.label()} would get no CUDA; take its {variant.name} wheels from "
                      f"{variant.index} (or a mirror of it: write {{variant}} in torch_index_url), or build torch 2.11 or newer, "
                      "whose PyPI aarch64 wheels are CUDA builds")
            return


def _credentials(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[Credential, ...]:
    out = []
    for i, item in enumerate(ctx.entries(raw, path, "credentials")):
        s = ctx.section(item, path + (i,), ("host", "username_env", "password_env", "file"))
        host = s("host", Ctx.string)
        if not host:
            ctx.error(path + (i,), "a credential needs host: the index host it is sent to")
            continue
        if "file" not in s and "password_env" not in s:
            ctx.error(path + (i,), "a credential needs password_env (an environment variable) or file (holding user:password)")
        out.append(Credential(ctx.checked(host, path + (i, "host"), grammar.host), s("username_env", Ctx.optional, grammar.env_name),
                              s("password_env", Ctx.optional, grammar.env_name), s("file", _secret_file)))
    return tuple(out)


def _secret_file(ctx: MatrixCtx, raw: Any, path: KeyPath) -> Path | None:
    """A credentials file (read at build time, so it may not exist yet), inside the roots:
    otherwise a matrix could send any one-line host file to the host it names."""
    text = ctx.string(raw, path)
    if text is None:
        return None
    try:
        resolved = ctx.roots.resolve(text)
    except PathProblem as exc:
        ctx.error(path, str(exc))
        return None
    if not ctx.roots.inside(resolved):
        ctx.error(path, f"{text} resolves to {resolved}, outside {ctx.roots.base}; keep it in the matrix's folder, "
                  f"or allow its folder on the command line: --allow-root {resolved.parent}")
    return resolved


PROXY = Table("proxy", (
    Key("http", partial(Ctx.optional, check=grammar.proxy_url)),
    Key("https", partial(Ctx.optional, check=grammar.proxy_url)),
    Key("no_proxy", partial(Ctx.optional, check=grammar.no_proxy)),
))


def _proxy_values(ctx: MatrixCtx, v: dict[str, Any], p: KeyPath) -> None:
    v["proxy"] = PROXY.values(ctx, v["proxy"], p + ("proxy",))


SOURCES = Table("sources", (  # -> Sources
    Key("proxy", PROXY.given),  # its unknown keys first, as they always came; its values below
    Key("ca_bundle", _ca_bundle),
    Key("torch_index_url", _index),
    Key("index_url", _index),
    Key("extra_index_urls", _indexes),
    Key("find_links", _indexes),
    Key("trusted_hosts", partial(Ctx.checked_strings, check=grammar.host)),
    Rule(_proxy_values),
    Key("network", partial(Ctx.choice, choices=NETWORK_MODES), Sources.network),
    Key("credentials", _credentials),
    Key("advisories", _advisories),
))


def read_sources(ctx: MatrixCtx, raw: Any) -> Sources:
    v = SOURCES.read(ctx, raw, ("sources",))
    ca, proxy = v["ca_bundle"], v["proxy"]
    return Sources(
        torch_index_url=v["torch_index_url"], index_url=v["index_url"], extra_index_urls=v["extra_index_urls"],
        find_links=v["find_links"], trusted_hosts=v["trusted_hosts"],
        ca_bundle=ca[0] if ca else None, ca_bundle_data=ca[1] if ca else b"",
        http_proxy=proxy["http"], https_proxy=proxy["https"], no_proxy=proxy["no_proxy"],
        network=v["network"], credentials=v["credentials"], advisories=v["advisories"],
    )


def base_images_of(ctx: MatrixCtx, raw: Any) -> dict[str, str]:
    """``base_images.<os>``: one reference for every platform, or a mapping platform -> reference (a local base
    is one architecture: ``{linux/amd64: imagesmith/debian:bookworm, linux/arm64: imagesmith/debian:bookworm-arm64}``).
    Keys of the result: ``<os>`` and ``<os>@<platform>`` (:func:`base_image_for`)."""
    p: KeyPath = ("base_images",)
    d = ctx.mapping(raw, p, ctx.kb.os.keys())
    out = {}
    for os_key, value in d.items():
        if isinstance(value, Mapping):
            per = ctx.mapping(value, p + (os_key,), platforms.NAMES)
            for name, ref in per.items():
                out[f"{os_key}@{name}"] = _base_ref(ctx, ref, p + (os_key, name))
        else:
            out[os_key] = _base_ref(ctx, value, p + (os_key,))
    return out


def _base_ref(ctx: MatrixCtx, ref: Any, path: KeyPath) -> str:
    image = ctx.checked(ctx.string(ref, path) or "", path, grammar.image_reference)
    if not grammar.image_reference(image):
        _check_base_ref(ctx, image, path)
    return image


def _check_base_ref(ctx: MatrixCtx, ref: str, path: KeyPath) -> None:
    parsed = ImageRef.maybe(ref)
    if parsed is None or parsed.pinned or ref.startswith("sha256:"):
        return
    if not parsed.tag or parsed.tag == "latest":
        ctx.warn(path, f"{ref!r} is a mutable tag; pin it by digest ({parsed.name}@sha256:...) or a dated tag so every build starts from the same bytes")
