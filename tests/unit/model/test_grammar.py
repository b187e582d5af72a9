"""The grammar of values that reach files: what passes, and the exact refusal."""

from __future__ import annotations

import pytest

from imagesmith.model import grammar

PASS = [
    (grammar.user_name, "ml"), (grammar.user_name, "_svc-1"),
    (grammar.debian_package, "curl"), (grammar.debian_package, "libc6-dev"), (grammar.debian_package, "g++"),
    (grammar.debian_package, "curl=7.88.1-10+deb12u8"), (grammar.debian_package, "tzdata=1:2024a~rc1"),
    (grammar.pip_requirement, "numpy==2.1.3"), (grammar.pip_requirement, 'six==1.17.0; python_version < "3.14"'),
    (grammar.pip_requirement, "torch[opt]>=2"), (grammar.pip_requirement, "torchvision"),
    (grammar.url, "https://pypi.org/simple"), (grammar.url, "http://10.0.0.5:8080/simple/"), (grammar.url, "file:///srv/wheels"),
    (grammar.url, "https://[::1]:8443/simple"), (grammar.proxy_url, "socks5h://proxy.corp:1080"),
    (grammar.host, "pypi.example.com"), (grammar.host, "10.0.0.5:8080"), (grammar.host, "::1"),
    (grammar.listen_address, "0.0.0.0"), (grammar.listen_address, "::"), (grammar.listen_address, "localhost"),
    (grammar.no_proxy, "localhost,127.0.0.1,.corp.example.com,10.0.0.0/8"),
    (grammar.image_reference, "ubuntu:24.04"), (grammar.image_reference, "127.0.0.1:5000/base/debian:bookworm"),
    (grammar.image_reference, "nvidia/cuda@sha256:" + "a" * 64),
    (grammar.registry_host, "harbor.example.com"), (grammar.registry_host, "127.0.0.1:5000"),
    (grammar.repository, "ml/pytorch-cuda"), (grammar.env_name, "HF_HOME"), (grammar.env_name, "_x1"),
    (grammar.label_key, "org.opencontainers.image.vendor"), (grammar.label_key, "com.example.team-name"),
    (grammar.python_version, "4.4.10"), (grammar.python_version, "4.5.0rc1"), (grammar.text, 'any "text" $HOME \\ é'),
]


@pytest.mark.parametrize("check, value", PASS)
def test_accepted(check: grammar.Check, value: str) -> None:
    assert check(value) is None


REFUSED = [
    (grammar.user_name, "root", "the images' default user must not be root; write a name such as ml"),
    (grammar.user_name, "ml; id", "'ml; id' is not a Linux user name; write lowercase letters, digits, _ and -, starting with a letter or _, at most 32 characters (e.g. ml)"),
    (grammar.debian_package, "curl; sh", "'curl; sh' is not a Debian package name; write lowercase letters, digits, + - . (at least two characters), optionally =VERSION, e.g. curl or curl=7.88.1-10+deb12u8"),
    (grammar.debian_package, "curl=$(id)", "'$(id)' is not a Debian version; write it as apt shows it, e.g. curl=7.88.1-10+deb12u8"),
    (grammar.pip_requirement, "--index-url=https://evil", "'--index-url=https://evil' is a pip option, not a package; package sources go under sources:, and other options are not supported"),
    (grammar.pip_requirement, "evil @ https://evil/x.whl", "'evil @ https://evil/x.whl' installs from a URL; put wheel folders or indexes under sources: and write evil==VERSION here"),
    (grammar.pip_requirement, "numpy; rm -rf /", "'numpy; rm -rf /' is not a pip requirement (Expected a marker variable or quoted string); write name==version, e.g. numpy==2.1.3"),
    (grammar.url, "https://pypi.org/simple $(id)", "'https://pypi.org/simple $(id)' holds ' ', '$', '(', ')', which a URL does not need; percent-encode it (%20 for a space)"),
    (grammar.url, "ftp://mirror/simple", "'ftp://mirror/simple': the scheme must be one of https://, http://, file://"),
    (grammar.url, "https://u:p@pypi.example.com/simple", "'https://u:p@pypi.example.com/simple' carries credentials, which would reach the build's history and logs; remove them and use sources.credentials (host, username_env, password_env)"),
    (grammar.url, "https://x:99999/", "'https://x:99999/': the port must be a number from 1 to 65535"),
    (grammar.url, "file://host/etc", "'file://host/etc': write file:///absolute/path"),
    (grammar.url, "http://[::1/simple", "'http://[::1/simple' is not a URL (its [IPv6] host is cut); write e.g. https://[fd00::1]:8443/simple"),
    (grammar.host, "a b", "'a b' is not a host name or IP address; write e.g. pypi.example.com or 10.0.0.5:8080"),
    (grammar.listen_address, "0.0.0.0:8888", "'0.0.0.0:8888' is not an IP address or host name to listen on; write e.g. 0.0.0.0 or 127.0.0.1"),
    (grammar.no_proxy, "a b", "'a b' is not a no_proxy list; write hosts, domains or CIDRs separated by commas, e.g. localhost,.corp.example.com"),
    (grammar.image_reference, "Ubuntu:24.04", "'Ubuntu:24.04' is not an image reference (repository name must be lowercase); write e.g. ubuntu:24.04 or registry.example.com/base/ubuntu@sha256:..."),
    (grammar.image_reference, "ubuntu:24.04 AS x", "'ubuntu:24.04 AS x' is not an image reference (invalid reference format); write e.g. ubuntu:24.04 or registry.example.com/base/ubuntu@sha256:..."),
    (grammar.registry_host, "harbor example", "'harbor example' is not a registry host; write host or host:port, e.g. harbor.example.com or 127.0.0.1:5000"),
    (grammar.env_name, "1X", "'1X' is not an environment variable name; write letters, digits and _, not starting with a digit (e.g. HF_HOME)"),
    (grammar.label_key, "io.imagesmith.torch", "'io.imagesmith.torch' is set by imagesmith itself; choose another key (e.g. com.example.team)"),
    (grammar.label_key, "org.opencontainers.image.title", "'org.opencontainers.image.title' is set by imagesmith itself; choose another key (e.g. com.example.team)"),
    (grammar.label_key, "Vendor", "'Vendor' is not a label key; write lowercase reverse-DNS words joined by . - or _ (e.g. org.opencontainers.image.vendor or com.example.team)"),
    (grammar.python_version, "4.4; id", "'4.4; id' is not a version; write e.g. 4.4.10"),
    (grammar.text, "x" * 4097, "is 4,097 characters; at most 4,096"),
]


@pytest.mark.parametrize("check, value, expected", REFUSED)
def test_refused_with_the_fix(check: grammar.Check, value: str, expected: str) -> None:
    assert check(value) == expected


@pytest.mark.parametrize("spec, pinned", [("a==1.0", True), ("a===1.0", True), ("a==1.*", False), ("a>=1", False),
                                          ("a==1,<2", False), ("a", False), ("not a spec", False)])
def test_pinned(spec: str, pinned: bool) -> None:
    assert grammar.is_pinned(spec) is pinned


def test_every_label_imagesmith_writes_is_reserved() -> None:
    from tests.conftest import ROOT

    text = (ROOT / "templates" / "partials" / "labels.j2").read_text()
    keys = [line.split("=", 1)[0].split()[-1] for line in text.splitlines() if '="' in line and "{% for" not in line]
    assert keys and all(grammar.label_key(k) for k in keys if k != "{{")
