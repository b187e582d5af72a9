"""Writes tests/corpus/matrix/: hostile and careless matrices, one file each.

    python tests/corpus/make_corpus.py      # rewrites the corpus (the files are committed)

A file named ``refuse-*.yaml`` must end in exit 1 with a located message and
nothing rendered; ``render-*.yaml`` must render, and every Dockerfile it makes
must have the instructions of a twin matrix whose hostile values (those holding
PWNED) are replaced by a plain word (tests/unit/model/test_corpus.py checks both).
Side files (requirements, templates, CA bundles, symlinks out of the folder)
live in tests/corpus/matrix/files/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent / "matrix"
FILES = HERE / "files"

BASE = """\
version: 1
image:
  repository: ml/corpus
  user: ml
  labels: {org.opencontainers.image.vendor: "Example"}
matrix:
  torch: ["2.9"]
  cuda: ["12.8"]
  python: ["3.11"]
  os: [ubuntu22.04]
layers:
  base: {apt: [curl], env: {HF_HOME: /cache/hf}}
  cv: {packages: [torchvision, "opencv-python-headless==4.14.0.94"]}
  project:
    parent: cv
    requirements: files/req-ok.txt
    services:
      jupyter: {enabled: true, bind: 0.0.0.0, port: 8888}
      sshd: {enabled: true, port: 2222}
sources:
  index_url: https://pypi.org/simple
"""

# Payloads, written as YAML double-quoted strings (so escapes such as \n work).
CONTROL = {  # control characters: refused wherever they appear
    "newline": r"x\nRUN touch /PWNED",
    "cr": r"x\rRUN touch /PWNED",
    "line-separator": r"x\u2028RUN touch /PWNED",
    "nel": r"x\x85RUN touch /PWNED",
    "tab": r"x\tPWNED",
    "nul": r"x\0PWNED",
    "escape": r"x\e[2JPWNED",
    "bidi": r"x\u202ePWNED",
    "surrogate": r"x\udcffPWNED",
}
SYNTAX = {  # shell and Dockerfile syntax: data in free text, refused in every other field
    "quote": r'x\" PWNED=\"1',
    "single-quote": r"x' PWNED='1",
    "semicolon": r"x; touch /PWNED",
    "subst": r"$(touch /PWNED)",
    "backtick": r"`touch /PWNED`",
    "dollar": r"${PWNED}",
    "space": r"x PWNED",
    "hash": r"x #PWNED",
    "pipe": r"x | sh -c PWNED",
    "backslash": r"PWNED\\",
    "ampersand": r"x && touch /PWNED",
    "redirect": r"x >/PWNED",
    "heredoc": r"x <<PWNED",
    "jinja": r"{{ PWNED }}",
}

# (field, how to place a value V in BASE) for fields whose grammar refuses syntax.
STRICT = {
    "image-user": ("  user: ml\n", '  user: "V"\n'),
    "image-repository": ("  repository: ml/corpus\n", '  repository: "V"\n'),
    "image-registry": ("  user: ml\n", '  user: ml\n  registry: "V"\n'),
    "label-key": ('{org.opencontainers.image.vendor: "Example"}', '{"V": "Example"}'),
    "env-key": ("env: {HF_HOME: /cache/hf}", 'env: {"V": x}'),
    "apt": ("apt: [curl]", 'apt: ["V"]'),
    "package": ('"opencv-python-headless==4.14.0.94"', '"V"'),
    "index-url": ("  index_url: https://pypi.org/simple\n", '  index_url: "https://pypi.org/simple/V"\n'),
    "torch-index-url": ("  index_url: https://pypi.org/simple\n", '  torch_index_url: "https://download.pytorch.org/whl/{variant}V"\n'),
    "extra-index-url": ("  index_url: https://pypi.org/simple\n", '  extra_index_urls: ["https://x.example.com/V"]\n'),
    "find-links": ("  index_url: https://pypi.org/simple\n", '  find_links: ["https://x.example.com/V"]\n'),
    "trusted-host": ("  index_url: https://pypi.org/simple\n", '  trusted_hosts: ["V"]\n'),
    "proxy": ("  index_url: https://pypi.org/simple\n", '  proxy: {http: "http://proxy.example.com/V"}\n'),
    "no-proxy": ("  index_url: https://pypi.org/simple\n", '  proxy: {no_proxy: "V"}\n'),
    "base-image": ("layers:\n", 'base_images: {ubuntu22.04: "ubuntu:V"}\nlayers:\n'),
    "jupyter-bind": ("bind: 0.0.0.0", 'bind: "V"'),
    "jupyter-version": ("bind: 0.0.0.0", 'bind: 0.0.0.0, version: "V"'),
    "credential-host": ("  index_url: https://pypi.org/simple\n", '  credentials: [{host: "V", password_env: PW}]\n'),
    "credential-env": ("  index_url: https://pypi.org/simple\n", '  credentials: [{host: pypi.example.com, password_env: "V"}]\n'),
    "layer-name": ("  cv: {packages", '  "V": {parent: base}\n  cv: {packages'),
    "tag-template": ("layers:\n", 'tags: {immutable: "{torch}-{layer}-V"}\nlayers:\n'),
    "torch-axis": ('torch: ["2.9"]', 'torch: ["V"]'),
    "os-axis": ("os: [ubuntu22.04]", 'os: ["V"]'),
    "sshd-port": ("port: 2222", 'port: "V"'),
}
STRICT_PAYLOADS = ("newline", "quote", "semicolon", "subst", "space", "backslash")

# Free text: control characters refused, syntax rendered as data.
FREE = {
    "label-value": ('{org.opencontainers.image.vendor: "Example"}', '{org.opencontainers.image.vendor: "V"}'),
    "env-value": ("env: {HF_HOME: /cache/hf}", 'env: {HF_HOME: "V"}'),
}


def put(field: tuple[str, str], value: str) -> str:
    old, new = field
    assert old in BASE, old
    return BASE.replace(old, new.replace("V", value), 1)


# Everything else: paths, YAML, encodings, careless mistakes. name -> (expect, text or bytes)
OTHERS: dict[str, tuple[str, str | bytes]] = {
    # -- paths ---------------------------------------------------------------------------
    "requirements-etc-shadow": ("refuse", BASE.replace("files/req-ok.txt", "/etc/shadow")),
    "requirements-dotdot": ("refuse", BASE.replace("files/req-ok.txt", "../../../../../../etc/passwd")),
    "requirements-symlink-out": ("refuse", BASE.replace("files/req-ok.txt", "files/passwd-link")),
    "requirements-symlink-shadow": ("refuse", BASE.replace("files/req-ok.txt", "files/shadow-link")),
    "requirements-folder": ("refuse", BASE.replace("files/req-ok.txt", "files")),
    "requirements-dev-zero": ("refuse", BASE.replace("files/req-ok.txt", "/dev/zero")),
    "requirements-proc": ("refuse", BASE.replace("files/req-ok.txt", "/proc/self/environ")),
    "requirements-home": ("refuse", BASE.replace("files/req-ok.txt", "~/.bash_history")),
    "requirements-link-loop": ("refuse", BASE.replace("files/req-ok.txt", "files/loop-a")),
    "requirements-name-too-long": ("refuse", BASE.replace("files/req-ok.txt", "x" * 300)),
    "template-name-too-long": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: " + "t" * 300 + "\n")),
    "credentials-file-link-loop": ("refuse", BASE + "  credentials: [{host: pypi.example.com, file: files/loop-a}]\n"),
    "find-links-link-loop": ("refuse", BASE + "  find_links: [files/loop-b]\n"),
    "requirements-missing": ("refuse", BASE.replace("files/req-ok.txt", "files/nope.txt")),
    "requirements-index-url": ("refuse", BASE.replace("files/req-ok.txt", "files/req-index-url.txt")),
    "requirements-extra-index": ("refuse", BASE.replace("files/req-ok.txt", "files/req-extra-index.txt")),
    "requirements-nested": ("refuse", BASE.replace("files/req-ok.txt", "files/req-nested.txt")),
    "requirements-editable": ("refuse", BASE.replace("files/req-ok.txt", "files/req-editable.txt")),
    "requirements-latin1": ("refuse", BASE.replace("files/req-ok.txt", "files/req-latin1.txt")),
    "requirements-binary": ("refuse", BASE.replace("files/req-ok.txt", "files/req-binary.txt")),
    "requirements-utf16": ("refuse", BASE.replace("files/req-ok.txt", "files/req-utf16.txt")),
    "requirements-control": ("refuse", BASE.replace("files/req-ok.txt", "files/req-control.txt")),
    "requirements-not-requirements": ("refuse", BASE.replace("files/req-ok.txt", "files/req-passwd-like.txt")),
    "requirements-hashes": ("render", BASE.replace("files/req-ok.txt", "files/req-hashes.txt")),
    "requirements-unpinned-warns": ("render", BASE.replace("files/req-ok.txt", "files/req-unpinned.txt")),
    "ca-bundle-etc": ("refuse", BASE + "  ca_bundle: /etc/ssl/certs/ca-certificates.crt\n"),
    "ca-bundle-symlink-out": ("refuse", BASE + "  ca_bundle: files/passwd-link\n"),
    "ca-bundle-not-pem": ("refuse", BASE + "  ca_bundle: files/req-ok.txt\n"),
    "ca-bundle-ok": ("render", BASE + "  ca_bundle: files/ca.pem\n"),
    "template-etc-passwd": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: /etc/passwd\n")),
    "template-dotdot": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: ../../x.j2\n")),
    "template-symlink-out": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/passwd-link\n")),
    "template-python-escape": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/tpl-escape.Dockerfile.j2\n")),
    "template-includes-outside": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/tpl-include-out.Dockerfile.j2\n")),
    "template-includes-absolute": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/tpl-include-abs.Dockerfile.j2\n")),
    "template-value-starts-instruction": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/tpl-value-instruction.Dockerfile.j2\n")
                                          .replace('"Example"', '"RUN"')),
    "template-raises": ("refuse", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/tpl-raises.Dockerfile.j2\n")),
    "template-own-ok": ("render", BASE.replace("    parent: cv\n", "    parent: cv\n    template: files/tpl-ok.Dockerfile.j2\n")),
    "template-shipped-by-name": ("render", BASE.replace("    parent: cv\n", "    parent: cv\n    template: layer.Dockerfile.j2\n")),
    "find-links-root": ("refuse", BASE + "  find_links: [/]\n"),
    "find-links-etc": ("refuse", BASE + "  find_links: [/etc]\n"),
    "find-links-file-url": ("refuse", BASE + "  find_links: [\"file:///etc\"]\n"),
    "find-links-symlinked-folder": ("refuse", BASE + "  find_links: [files/etc-link]\n"),
    "index-url-file-root": ("refuse", BASE.replace("https://pypi.org/simple", "file:///")),
    "credentials-file-outside": ("refuse", BASE + "  credentials: [{host: pypi.example.com, file: /root/.docker/config.json}]\n"),
    "credentials-in-url": ("refuse", BASE.replace("https://pypi.org/simple", "https://user:secret@pypi.example.com/simple")),
    "index-url-javascript": ("refuse", BASE.replace("https://pypi.org/simple", "javascript:alert(1)")),
    "index-url-cut-ipv6": ("refuse", BASE.replace("https://pypi.org/simple", "http://[::1/simple")),
    "index-url-ftp": ("refuse", BASE.replace("https://pypi.org/simple", "ftp://pypi.example.com/simple")),
    # -- YAML ----------------------------------------------------------------------------
    "alias-bomb": ("refuse", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
                   + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9))),
    "alias-bomb-in-matrix": ("refuse", BASE.replace("layers:\n", "x1: &x1 [a, a, a, a, a, a, a, a, a, a]\n"
                             + "".join(f"x{i + 1}: &x{i + 1} [" + ", ".join([f"*x{i}"] * 10) + "]\n" for i in range(1, 7)) + "layers:\n", 1)),
    "merge-bomb": ("refuse", "m0: &m0 {a: 1, b: 2}\n" + "".join(
        f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 8)}], k{i}: 1}}\n" for i in range(1, 9))),
    "alias-self": ("refuse", "a: &a [*a]\n" + BASE),
    "alias-self-mapping": ("refuse", BASE.replace("layers:\n", "loop: &loop {next: *loop}\nlayers:\n", 1)),
    "merge-self": ("refuse", BASE.replace("layers:\n", "loop: &loop {<<: *loop}\nlayers:\n", 1)),
    "merge-scalar": ("refuse", BASE.replace("  base: {apt", "  base: {<<: 1, apt")),
    "alias-undefined": ("refuse", BASE.replace("[curl]", "*nope")),
    "nesting-100": ("refuse", "x: " + "[" * 100 + "]" * 100 + "\n" + BASE),
    "nesting-10000": ("refuse", "x: " + "[" * 10000 + "]" * 10000 + "\n"),
    "nesting-mappings": ("refuse", "".join("  " * i + f"k{i}:\n" for i in range(80)) + "  " * 80 + "v: 1\n"),
    "tag-python-object": ("refuse", BASE.replace("[curl]", "!!python/object/apply:os.system [\"touch /PWNED\"]")),
    "tag-python-name": ("refuse", BASE.replace("  user: ml", "  user: !!python/name:os.system")),
    "tag-custom": ("refuse", BASE.replace("  user: ml", "  user: !pwned ml")),
    "tag-binary": ("refuse", BASE.replace("  user: ml", "  user: !!binary bWw=")),
    "tag-set": ("refuse", BASE.replace("apt: [curl]", "apt: !!set {curl}")),
    "tag-omap": ("refuse", BASE.replace("env: {HF_HOME: /cache/hf}", "env: !!omap [{HF_HOME: /cache/hf}]")),
    "tag-str-explicit": ("render", BASE.replace("  user: ml", "  user: !!str ml")),
    "duplicate-top-key": ("refuse", BASE + "matrix:\n  torch: [\"2.8\"]\n"),
    "duplicate-nested-key": ("refuse", BASE.replace("  user: ml\n", "  user: ml\n  user: root\n")),
    "duplicate-in-flow": ("refuse", BASE.replace("env: {HF_HOME: /cache/hf}", "env: {A: 1, A: 2}")),
    "complex-key": ("refuse", BASE + "? [a, b]\n: 1\n"),
    "merge-keys-ok": ("render", BASE.replace("  base: {apt", "  base: &common {apt").replace("  cv: {packages", "  cv: {<<: *common, packages")),
    "multi-document": ("refuse", BASE + "---\n" + BASE),
    "empty-file": ("refuse", ""),
    "only-comments": ("refuse", "# nothing here\n"),
    "scalar-document": ("refuse", "just a string\n"),
    "list-document": ("refuse", "- a\n- b\n"),
    "null-document": ("refuse", "~\n"),
    "tabs-indentation": ("refuse", BASE.replace("  torch:", "\ttorch:")),
    "unclosed-flow": ("refuse", BASE.replace('["2.9"]', '["2.9"')),
    "utf8-bom-ok": ("render", b"\xef\xbb\xbf" + BASE.encode()),
    "crlf-ok": ("render", BASE.replace("\n", "\r\n").encode()),
    "utf16-le-bom": ("refuse", BASE.encode("utf-16")),
    "utf16-be": ("refuse", BASE.encode("utf-16-be")),
    "utf32": ("refuse", BASE.encode("utf-32")),
    "latin1": ("refuse", BASE.replace("Example", "Caf\u00e9").encode("latin-1")),
    "binary-png": ("refuse", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
    "nul-in-middle": ("refuse", BASE.encode() + b"\x00\x00garbage"),
    "raw-escape-char": ("refuse", BASE.replace("Example", "Ex\x1b[2Jample").encode()),
    "raw-bidi": ("refuse", BASE.replace("Example", "Ex\u202eample").encode()),
    "unicode-label-ok": ("render", BASE.replace("Example", "Caf\u00e9 \u6771\u4eac \U0001f680")),
    # -- careless --------------------------------------------------------------------------
    "typo-key": ("refuse", BASE.replace("  python:", "  pythn:")),
    "typo-top-key": ("refuse", BASE.replace("layers:\n", "layer:\n", 1)),
    "matrix-is-string": ("refuse", "version: 1\nmatrix: \"2.9\"\n"),
    "axis-is-mapping": ("refuse", BASE.replace('torch: ["2.9"]', "torch: {a: 1}")),
    "python-float": ("refuse", BASE.replace('python: ["3.11"]', "python: [3.1]")),
    "python-unquoted-ok": ("render", BASE.replace('python: ["3.11"]', "python: [3.11]")),
    "boolean-user": ("refuse", BASE.replace("  user: ml", "  user: yes")),
    "user-root": ("refuse", BASE.replace("  user: ml", "  user: root")),
    "user-uppercase": ("refuse", BASE.replace("  user: ml", "  user: ML")),
    "uid-zero": ("refuse", BASE.replace("  user: ml\n", "  user: ml\n  uid: 0\n")),
    "uid-huge": ("refuse", BASE.replace("  user: ml\n", "  user: ml\n  uid: 99999999999999999999999\n")),
    "port-out-of-range": ("refuse", BASE.replace("port: 8888", "port: 70000")),
    "port-not-number": ("refuse", BASE.replace("port: 8888", "port: eighty")),
    "unknown-torch": ("refuse", BASE.replace('"2.9"', '"1.13"')),
    "unknown-os": ("refuse", BASE.replace("ubuntu22.04", "ubuntu2204")),
    "cuda-mismatch": ("refuse", BASE.replace('"12.8"', '"11.1"')),
    "no-cells": ("refuse", BASE.replace('torch: ["2.9"]', "torch: []")),
    "exclude-everything": ("refuse", BASE.replace("  os: [ubuntu22.04]\n", "  os: [ubuntu22.04]\n  exclude: [{torch: \"2.9\"}]\n")),
    "include-partial": ("refuse", BASE.replace("  os: [ubuntu22.04]\n", "  os: [ubuntu22.04]\n  include: [{torch: \"2.8\"}]\n")),
    "layer-cycle": ("refuse", BASE.replace("  cv: {packages", "  a: {parent: b}\n  b: {parent: a}\n  cv: {packages")),
    "layer-unknown-parent": ("refuse", BASE.replace("    parent: cv\n", "    parent: cvv\n")),
    "layer-name-uppercase": ("refuse", BASE.replace("  cv: {packages", "  CV: {parent: base}\n  cv: {packages")),
    "no-base-layer": ("refuse", BASE.replace("  base: {apt: [curl], env: {HF_HOME: /cache/hf}}\n", "")),
    "unpinned-package-warns": ("render", BASE.replace('"opencv-python-headless==4.14.0.94"', "opencv-python-headless")),
    "package-url": ("refuse", BASE.replace('"opencv-python-headless==4.14.0.94"', '"evil @ https://evil.example.com/evil.whl"')),
    "package-option": ("refuse", BASE.replace('"opencv-python-headless==4.14.0.94"', '"--index-url=https://evil.example.com"')),
    "package-marker-ok": ("render", BASE.replace('"opencv-python-headless==4.14.0.94"', "'six==1.17.0; python_version < \"3.14\"'")),
    "apt-version-ok": ("render", BASE.replace("apt: [curl]", 'apt: ["curl=7.81.0-1ubuntu1.20"]')),
    "apt-option": ("refuse", BASE.replace("apt: [curl]", 'apt: ["-o=APT::Get::AllowUnauthenticated=1"]')),
    "env-key-digit": ("refuse", BASE.replace("env: {HF_HOME: /cache/hf}", "env: {1X: y}")),
    "label-reserved": ("refuse", BASE.replace("org.opencontainers.image.vendor", "io.imagesmith.torch")),
    "label-uppercase-key": ("refuse", BASE.replace("org.opencontainers.image.vendor", "Vendor")),
    "label-too-long": ("refuse", BASE.replace("Example", "x" * 5000)),
    "tag-unknown-field": ("refuse", BASE.replace("layers:\n", 'tags: {immutable: "{torch}-{nope}"}\nlayers:\n', 1)),
    "tag-collision": ("refuse", BASE.replace("layers:\n", 'tags: {immutable: "{torch}"}\nlayers:\n', 1)),
    "tag-too-long-after-expansion": ("refuse", BASE.replace("layers:\n", 'tags: {immutable: "' + "{cell}-" * 12 + '{layer}"}\nlayers:\n', 1)),
    "floating-ambiguous": ("refuse", BASE.replace("layers:\n", 'tags: {floating: ["v{torch_minor}"]}\nlayers:\n', 1)),
    "floating-date-ok": ("render", BASE.replace("layers:\n", 'tags: {floating: ["v{torch_minor}-{layer}-{date}"]}\nlayers:\n', 1)),
    "version-2": ("refuse", BASE.replace("version: 1", "version: 2")),
    "network-bridge": ("refuse", BASE + "  network: bridge\n"),
    "jupyter-bind-with-port": ("refuse", BASE.replace("bind: 0.0.0.0", "bind: \"0.0.0.0:8888\"")),
    "jupyter-bind-ipv6-ok": ("render", BASE.replace("bind: 0.0.0.0", 'bind: "::"')),
    "base-image-latest-warns": ("render", BASE.replace("layers:\n", "base_images: {ubuntu22.04: \"ubuntu:latest\"}\nlayers:\n", 1)),
    "base-image-digest-ok": ("render", BASE.replace("layers:\n", "base_images: {ubuntu22.04: \"ubuntu@sha256:" + "a" * 64 + "\"}\nlayers:\n", 1)),
    "torch-index-without-variant": ("render", BASE.replace("  index_url:", "  torch_index_url: https://download.pytorch.org/whl/cu128\n  index_url:")),
}


def side_files() -> None:
    if FILES.exists():
        shutil.rmtree(FILES)
    (FILES / "wheels").mkdir(parents=True)
    (FILES / "wheels" / ".keep").write_text("")
    texts = {
        "req-ok.txt": "rich==15.0.0\ntabulate==0.9.0  # a comment\n",
        "req-unpinned.txt": "rich==15.0.0\nnumpy>=1.26\n",
        "req-hashes.txt": "rich==15.0.0 \\\n    --hash=sha256:" + "0" * 64 + "\n",
        "req-index-url.txt": "--index-url https://evil.example.com/simple\nrich==15.0.0\n",
        "req-extra-index.txt": "rich==15.0.0\n--extra-index-url=https://evil.example.com/simple\n",
        "req-nested.txt": "-r /etc/passwd\n",
        "req-editable.txt": "-e git+https://evil.example.com/x.git#egg=x\n",
        "req-passwd-like.txt": "root:x:0:0:root:/root:/bin/bash\n",
        "tpl-ok.Dockerfile.j2": '{% extends "project.Dockerfile.j2" %}\n{% block builder_files %}\n'
                                "{% if has_requirements %}\nCOPY requirements.txt /tmp/imagesmith/requirements.txt\n{% endif %}\n"
                                "RUN echo {{ layer.name | quote }}\n{% endblock %}\n",
        "tpl-escape.Dockerfile.j2": "FROM scratch\nRUN echo {{ cycler.__init__.__globals__.os.popen('touch /tmp/PWNED').read() }}\n",
        "tpl-include-out.Dockerfile.j2": '{% include "files/passwd-link" %}\n',
        "tpl-include-abs.Dockerfile.j2": '{% include "/etc/passwd" %}\n',
        "tpl-value-instruction.Dockerfile.j2": "FROM scratch\n{% for key, value in image.labels %}{{ value }} touch /PWNED\n{% endfor %}",
        "tpl-raises.Dockerfile.j2": "FROM scratch\n{{ 1 // 0 }}\n",
    }
    for name, text in texts.items():
        (FILES / name).write_text(text)
    (FILES / "req-latin1.txt").write_bytes("caf\u00e9==1.0\n".encode("latin-1"))
    (FILES / "req-binary.txt").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(64)))
    (FILES / "req-utf16.txt").write_bytes("rich==15.0.0\n".encode("utf-16"))
    (FILES / "req-control.txt").write_bytes(b"rich==15.0.0\x1b[2J\n")
    (FILES / "ca.pem").write_text(Path("/etc/ssl/certs/ISRG_Root_X1.pem").read_text())
    for name, target in (("passwd-link", "/etc/passwd"), ("shadow-link", "/etc/shadow"), ("etc-link", "/etc"),
                         ("loop-a", "loop-b"), ("loop-b", "loop-a")):
        os.symlink(target, FILES / name)


def main() -> None:
    for old in HERE.glob("*.yaml"):
        old.unlink()
    side_files()
    cases: dict[str, tuple[str, str | bytes]] = {}
    for field in STRICT:
        for name in STRICT_PAYLOADS:
            cases[f"{field}-{name}"] = ("refuse", put(STRICT[field], SYNTAX[name] if name in SYNTAX else CONTROL[name]))
    for field in FREE:
        for name, payload in CONTROL.items():
            cases[f"{field}-{name}"] = ("refuse", put(FREE[field], payload))
        for name, payload in SYNTAX.items():
            cases[f"{field}-{name}"] = ("render", put(FREE[field], payload))
    cases.update(OTHERS)
    for name, (expect, content) in cases.items():
        path = HERE / f"{expect}-{name}.yaml"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    print(f"{len(cases)} matrices in {HERE}")


if __name__ == "__main__":
    main()
