"""The credential store (imagesmith/edges/credentials.py): each credential is bound to its host. Tables of
(input, exact answer or message): host normalisation, which source wins for which host, malformed
--credentials files (exit 1 with the file and the line, never a traceback), artifact hosts."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from imagesmith import cli
from imagesmith.edges.credentials import ENV_HOST, CredentialStore, Declared, load_store, normalize_host
from imagesmith.edges.registry import Credentials
from imagesmith.errors import UserError
from tests.conftest import LOCAL_ROOTS, ROOT
from tests.doubles import EngineBase
from tests.unit.project.test_ci_examples import imagesmith_calls, problems
from tests.unit.trustkeys import policy_file

ENV = {"IMAGESMITH_REGISTRY_USER": "env-user", "IMAGESMITH_REGISTRY_PASSWORD": "env-pw"}
RELEASE = Declared(release="h.test")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def docker_config(tmp_path: Path, auths: dict[str, Any], **extra: Any) -> Path:
    path = tmp_path / "docker" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": auths, **extra}))
    return path


def creds_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "creds"
    path.write_text(text)
    return path


# -- host normalisation ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("harbor.example.com", "harbor.example.com"),
    ("Harbor.Example.COM", "harbor.example.com"),
    ("harbor.example.com:443", "harbor.example.com:443"),  # docker keeps the port: h:443 is another key than h
    ("127.0.0.1:5000", "127.0.0.1:5000"),
    ("localhost:5000/ml/staging", "localhost:5000"),
    ("https://harbor.example.com/v2/", "harbor.example.com"),
    ("docker.io", "docker.io"),
    ("index.docker.io", "docker.io"),
    ("https://index.docker.io/v1/", "docker.io"),
    ("registry-1.docker.io", "docker.io"),
    ("registry.hub.docker.com", "docker.io"),
    ("[::1]:5000", "[::1]:5000"),
])
def test_hosts_are_normalised_as_docker_compares_them(text: str, want: str) -> None:
    assert normalize_host(text) == want


@pytest.mark.parametrize("text, message", [
    ("", "'' names no host"),
    ("robot$ml+ci:SECRET", "'robot$ml+ci:SECRET' is not a registry host; write host or host:port, e.g. harbor.example.com or 127.0.0.1:5000"),
    ("user:pass", "'user:pass' is not a registry host; write host or host:port, e.g. harbor.example.com or 127.0.0.1:5000"),
])
def test_what_is_not_a_host_is_said(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        normalize_host(text)
    assert str(err.value) == message


# -- which credential applies to which host ----------------------------------------------------------

@pytest.mark.parametrize("declared, env, file_text, auths, host, want", [
    # the declared host: --credentials, then the environment pair, then the docker config
    (RELEASE, ENV, "robot$ml+ci:file:pw", {"h.test": {"auth": b64("cfg:pw")}}, "h.test", ("robot$ml+ci", "file:pw", "file {file} (line 1, for h.test)")),
    (RELEASE, ENV, None, {"h.test": {"auth": b64("cfg:pw")}}, "h.test", ("env-user", "env-pw", "environment (IMAGESMITH_REGISTRY_USER, for h.test)")),
    (RELEASE, {}, None, {"https://h.test": {"auth": b64("cfg:p:w")}}, "h.test", ("cfg", "p:w", "docker config {config}")),
    (RELEASE, {}, None, {"H.TEST": {"auth": b64("cfg:pw")}}, "h.test", ("cfg", "pw", "docker config {config}")),
    # a legacy line and the environment pair never reach another host, not even another port of the same one
    (RELEASE, ENV, "robot:pw", {}, "other.test", None),
    (RELEASE, ENV, "robot:pw", {}, "h.test:5000", None),
    (RELEASE, {}, "robot:pw", {"other.test": {"auth": b64("cfg:pw")}}, "other.test", ("cfg", "pw", "docker config {config}")),
    # lines with a host: each for its own host, whatever is declared
    (RELEASE, {}, "other.test a:b\nh.test c:d\n", {}, "other.test", ("a", "b", "file {file} (line 1, for other.test)")),
    (RELEASE, {}, "# logins\n\nOther.Test:5000 a:b\n", {}, "other.test:5000", ("a", "b", "file {file} (line 3, for other.test:5000)")),
    (RELEASE, {}, "other.test a:b\n", {}, "h.test", None),
    (Declared(), {}, "other.test a:b\n", {}, "other.test", ("a", "b", "file {file} (line 1, for other.test)")),
    # the staging host is the declared one where no release registry is (verify --build-report --stage)
    (Declared(staging="s.test"), ENV, "robot:pw", {}, "s.test", ("robot", "pw", "file {file} (line 1, for s.test)")),
    (Declared(staging="s.test"), ENV, None, {}, "s.test", ("env-user", "env-pw", "environment (IMAGESMITH_REGISTRY_USER, for s.test)")),
    (Declared(release="h.test", staging="s.test"), ENV, None, {}, "s.test", None),
    # nothing declared: the environment pair applies nowhere
    (Declared(), ENV, None, {}, "h.test", None),
    # IMAGESMITH_REGISTRY_HOST moves the environment pair to another host
    (RELEASE, ENV | {ENV_HOST: "S.test"}, None, {}, "s.test", ("env-user", "env-pw", "environment (IMAGESMITH_REGISTRY_USER, for s.test)")),
    (RELEASE, ENV | {ENV_HOST: "s.test"}, None, {}, "h.test", None),
    # docker config style file: per host, Docker Hub aliases understood
    (RELEASE, {}, json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": b64("hub:pw")}}}), {}, "registry-1.docker.io",
     ("hub", "pw", "file {file} (auths / docker.io)")),
    (RELEASE, {}, json.dumps({"auths": {"o.test": {"username": "u", "password": "p"}}}), {}, "o.test", ("u", "p", "file {file} (auths / o.test)")),
    (RELEASE, {}, json.dumps({"auths": {"o.test": {"auth": b64("u:p")}}}), {}, "h.test", None),
    (RELEASE, {}, None, {}, "h.test", None),
])
def test_each_credential_applies_to_its_own_host(tmp_path: Path, declared: Declared, env: dict[str, str], file_text: str | None,
                                                 auths: dict[str, Any], host: str, want: tuple[str, str, str] | None) -> None:
    config = docker_config(tmp_path, auths)
    file = creds_file(tmp_path, file_text) if file_text is not None else None
    got = load_store(declared, env, file, config).for_host(host)
    assert got == (Credentials(want[0], want[1], want[2].format(file=file, config=config)) if want else None)


def test_docker_config_credential_helpers_are_asked_for_their_host_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real docker-credential-* program on PATH, run through the docker SDK's credential store protocol."""
    asked = tmp_path / "asked"
    helper = tmp_path / "bin" / "docker-credential-imagesmith-test"
    helper.parent.mkdir()
    helper.write_text(f'#!/bin/sh\nread host\necho "$1 $host" >> {asked}\n'
                      '[ "$host" = h.test ] && echo \'{"Username": "u", "Secret": "s"}\' && exit 0\n'
                      'echo "credentials not found in native keychain"; exit 1\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:{os.environ['PATH']}")
    config = docker_config(tmp_path, {"h.test": {"auth": b64("cfg:pw")}}, credHelpers={"h.test": "imagesmith-test"})
    store = load_store(Declared(), {}, None, config)
    assert store.for_host("h.test") == Credentials("u", "s", "docker credential helper imagesmith-test")
    assert store.for_host("other.test") is None and asked.read_text() == "get h.test\n"
    kept = docker_config(tmp_path, {"other.test": {"auth": b64("cfg:pw")}}, credsStore="imagesmith-test")
    assert load_store(Declared(), {}, None, kept).for_host("other.test") == Credentials("cfg", "pw", f"docker config {kept}")


def test_the_store_is_frozen_and_its_secrets_are_redacted(tmp_path: Path) -> None:
    store = load_store(RELEASE, ENV, creds_file(tmp_path, "o.test robot:s3cret-pw\n"), tmp_path / "none.json")
    with pytest.raises(TypeError):
        store.entries["x.test"] = Credentials("u", "p")  # type: ignore[index]
    assert "s3cret-pw" not in repr(store)
    assert store.for_host("o.test").redact("said s3cret-pw and env-pw") == "said **** and env-pw"  # type: ignore[union-attr]
    assert {"s3cret-pw", "env-pw"} <= set(store.secrets())


def test_an_unreadable_docker_config_fails_only_when_a_login_is_looked_up_there(tmp_path: Path) -> None:
    broken = tmp_path / "config.json"
    broken.write_text("{not json")
    store = load_store(RELEASE, ENV, None, broken)
    assert store.for_host("h.test") == Credentials("env-user", "env-pw", "environment (IMAGESMITH_REGISTRY_USER, for h.test)")
    with pytest.raises(UserError) as err:
        store.for_host("o.test")
    assert str(err.value).startswith(f"docker config {broken} cannot be read (")


# -- malformed --credentials files: exit 1, the file and the line ------------------------------------

HINT = "write HOST user:password, e.g. harbor.example.com robot$ml+ci:SECRET"
AUTHS_HINT = 'write {"auths": {"HOST": {"auth": "base64(user:password)"}}}'


@pytest.mark.parametrize("text, declared, message", [
    ("", RELEASE, f"credentials file {{file}}: no login in it; {HINT}"),
    ("# only a comment\n\n", RELEASE, f"credentials file {{file}}: no login in it; {HINT}"),
    ("no-colon-here", RELEASE, "credentials file {file}, line 1: expected HOST user:password (e.g. harbor.example.com "
                               "robot$ml+ci:SECRET); the login has no password"),
    ("h.test :pw", RELEASE, "credentials file {file}, line 1: expected HOST user:password (e.g. harbor.example.com "
                            "robot$ml+ci:SECRET); the login has no user name"),
    ("\nh.test user:\n", RELEASE, "credentials file {file}, line 2: expected HOST user:password (e.g. harbor.example.com "
                                  "robot$ml+ci:SECRET); the login has no password"),
    ("u:p\nv:q\n", RELEASE, "credentials file {file}, line 2: a second line without a host (line 1 has one); write HOST "
                            "user:password on each line, e.g. harbor.example.com robot$ml+ci:SECRET"),
    ("h.test u:p\nH.TEST v:q\n", RELEASE, "credentials file {file}, line 2: a second login for h.test; keep one line per host"),
    ("u:p\nh.test v:q\n", RELEASE, "credentials file {file}, line 2: a second login for h.test; keep one line per host"),
    ("robot:pw\n", Declared(), "credentials file {file}, line 1: user:password names no host, so it applies only to the "
                               "declared release registry, and none is declared; write HOST user:password (e.g. "
                               "harbor.example.com robot$ml+ci:SECRET), or declare the host (--registry HOST/REPO (or "
                               "--matrix, whose image.registry declares it), or --stage REGISTRY/REPO)"),
    ('{"auths": {"h.test": ', RELEASE, "credentials file {file}, line 1: not valid JSON (Expecting value); " + AUTHS_HINT),
    ('{\n "auths": {\n  "h.test": {"auth": "x"},\n}}', RELEASE,
     "credentials file {file}, line 4: not valid JSON (Expecting property name enclosed in double quotes); " + AUTHS_HINT),
    ('{"auths": {}}', RELEASE, 'credentials file {file}, line 1: no "auths" object with a login in it; ' + AUTHS_HINT),
    ('{"auths": ["h.test"]}', RELEASE, 'credentials file {file}, line 1: no "auths" object with a login in it; ' + AUTHS_HINT),
    ('{\n"auths": {\n"bad host!": {"auth": "dTpw"}}}', RELEASE,
     "credentials file {file}, line 3, auths / 'bad host!': 'bad host!' is not a registry host; write host or host:port, "
     "e.g. harbor.example.com or 127.0.0.1:5000"),
    ('{"auths": {"h.test": "u:p"}}', RELEASE,
     'credentials file {file}, line 1, auths / \'h.test\': expected an object such as {"auth": "base64(user:password)"}'),
    ('{"auths": {"h.test": {"auth": "%%%"}}}', RELEASE,
     "credentials file {file}, line 1, auths / 'h.test' / auth: not base64 of user:password; write base64 of user:password"),
    ('{"auths": {"h.test": {"auth": "' + b64("nocolon") + '"}}}', RELEASE,
     "credentials file {file}, line 1, auths / 'h.test' / auth: expected HOST user:password (e.g. harbor.example.com "
     "robot$ml+ci:SECRET); the login has no password"),
    ('{"auths": {"h.test": {"auth": "' + b64("u:p") + '"}, "https://H.test/v1/": {"auth": "' + b64("v:q") + '"}}}', RELEASE,
     "credentials file {file}, line 1, auths / 'https://H.test/v1/': a second login for h.test; keep one entry per host"),
    ('{"auths": {"h.test": {"identitytoken": "t"}}}', RELEASE,
     "credentials file {file}, line 1, auths / 'h.test': no \"auth\" (base64 of user:password) nor \"username\" and "
     "\"password\"; a credential helper belongs in the docker config, not in --credentials"),
])
def test_a_malformed_credentials_file_is_a_user_error_naming_file_and_line(tmp_path: Path, text: str, declared: Declared,
                                                                            message: str) -> None:
    file = creds_file(tmp_path, text)
    with pytest.raises(UserError) as err:
        load_store(declared, {}, file, tmp_path / "none.json")
    assert str(err.value) == message.replace("{file}", str(file))


def test_a_credentials_file_that_is_not_text_is_a_user_error(tmp_path: Path) -> None:
    file = tmp_path / "creds"
    file.write_bytes(b"h.test u:\xff\xfe")
    with pytest.raises(UserError) as err:
        load_store(RELEASE, {}, file, tmp_path / "none.json")
    assert str(err.value) == (f"credentials file {file}: is not UTF-8 text (at line 1 column 10; Latin-1?); it must hold lines HOST user:password "
                              "(e.g. harbor.example.com robot$ml+ci:SECRET) or a docker config.json")


@pytest.mark.parametrize("env, message", [
    ({"IMAGESMITH_REGISTRY_USER": "u"}, "IMAGESMITH_REGISTRY_USER is set but IMAGESMITH_REGISTRY_PASSWORD is not: set both, or neither"),
    (ENV | {ENV_HOST: "not a host"}, "IMAGESMITH_REGISTRY_HOST: 'not a host' is not a registry host; write host or host:port, "
                                     "e.g. harbor.example.com or 127.0.0.1:5000"),
])
def test_a_bad_environment_is_a_user_error(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(UserError) as err:
        load_store(RELEASE, env, None, tmp_path / "none.json")
    assert str(err.value) == message


@pytest.mark.parametrize("args", [
    ["evidence", "127.0.0.1:9/ml/x:1", "--credentials", "{file}"],
    ["verify", "127.0.0.1:9/ml/x:1", "--no-pull", "--credentials", "{file}"],
    ["verify", "--build-report", "{file}", "--stage", "h.test/ml/staging", "--credentials", "{file}"],
    ["publish", "--out", "{tmp}/out", "--trust-policy", "{tmp}/keys/trust-policy.yaml", "--no-evidence", "--registry", "h.test/ml/x", "--credentials", "{file}"],
])
@pytest.mark.parametrize("text", ["u:p\nv:q\n", '{"auths": ', "h.test :pw"])
def test_every_command_exits_1_on_a_malformed_credentials_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               args: list[str], text: str) -> None:
    file = creds_file(tmp_path, text)
    policy_file(tmp_path / "keys")  # publish needs its trust policy to get as far as the credentials
    with pytest.raises(SystemExit) as done:
        cli.main([a.format(tmp=tmp_path, file=file) for a in args])
    err = capsys.readouterr().err
    assert done.value.code == 1 and f"credentials file {file}, line " in err and "bug" not in err


# -- hosts read from artifacts ------------------------------------------------------------------------

@pytest.mark.parametrize("host, declared, want", [
    ("h.test", "h.test", ("u", "p")),
    ("H.Test", "h.test", ("u", "p")),
    ("h.test", None, None),  # nothing declared: anonymous, whatever the store holds for that host
    ("o.test", None, None),
])
def test_an_artifact_host_gets_the_declared_login_or_none(tmp_path: Path, host: str, declared: str | None,
                                                          want: tuple[str, str] | None) -> None:
    store = load_store(Declared(declared), {}, creds_file(tmp_path, "h.test u:p\no.test v:q\n"), tmp_path / "none.json")
    got = store.for_artifact(host, declared, "OUT/t/build.json", "release registry", "--registry HOST/REPO")
    assert ((got.username, got.password) if got else None) == want


@pytest.mark.parametrize("host, declared, message", [
    ("o.test", "h.test", "OUT/t/build.json names the release registry host o.test, but h.test was declared (--registry "
                         "HOST/REPO); nothing was sent: publish/verify the artifacts of that registry, or declare o.test if "
                         "it is yours"),
    ("h.test:5000", "h.test", "OUT/t/build.json names the release registry host h.test:5000, but h.test was declared "
                              "(--registry HOST/REPO); nothing was sent: publish/verify the artifacts of that registry, or "
                              "declare h.test:5000 if it is yours"),
    ("evil\x1b[2J.test", "h.test", "OUT/t/build.json names the release registry host 'evil\\x1b[2J.test', but h.test was "
                                   "declared (--registry HOST/REPO); nothing was sent: publish/verify the artifacts of that "
                                   "registry, or declare 'evil\\x1b[2J.test' if it is yours"),
])
def test_an_artifact_naming_another_host_than_declared_is_refused(host: str, declared: str, message: str) -> None:
    store = CredentialStore(Declared(declared))
    with pytest.raises(UserError) as err:
        store.for_artifact(host, declared, "OUT/t/build.json", "release registry", "--registry HOST/REPO")
    assert str(err.value) == message


# -- fleet verify --release: the report's images get --credentials only on the declared host -----------------

D1 = "sha256:" + "a" * 64


@pytest.mark.parametrize("refs, registry, anonymous", [
    ([], None, {"evil.test/ml/x@" + D1}),  # read from release.json, nothing declared: no credentials for its jobs
    ([f"evil.test/ml/x@{D1}"], None, set()),  # the operator named that very image on the command line
    ([], "evil.test", set()),
    ([], "EVIL.test", set()),
])
def test_fleet_jobs_of_release_report_images_get_credentials_only_when_declared(
        tmp_path: Path, refs: list[str], registry: str | None, anonymous: set[str]) -> None:
    from imagesmith.pipeline.fleet import undeclared_refs

    report = tmp_path / "release.json"
    report.write_text(json.dumps({"schema": "imagesmith.release/1", "registry": "evil.test", "repository": "ml/x", "targets": [{"target": "t", "status": "pushed", "digest": D1}]}))
    assert {str(r) for r in undeclared_refs(refs, report, registry)} == anonymous


def test_fleet_refuses_a_release_report_on_another_host_than_declared(tmp_path: Path) -> None:
    from imagesmith.pipeline.fleet import undeclared_refs

    report = tmp_path / "release.json"
    report.write_text(json.dumps({"schema": "imagesmith.release/1", "registry": "evil.test", "repository": "ml/x", "targets": [{"target": "t", "status": "pushed", "digest": D1}]}))
    with pytest.raises(UserError) as err:
        undeclared_refs([], report, "harbor.example.com")
    assert str(err.value) == (f"{report} names the release registry host evil.test, but harbor.example.com was declared "
                              "(--registry HOST); nothing was sent: publish/verify the artifacts of that registry, or "
                              "declare evil.test if it is yours")


# -- the user documentation ---------------------------------------------------------------------------------

DOC = ROOT / "docs" / "credentials.md"


def test_the_docs_state_the_threat_model_that_test_credentials_http_proves() -> None:
    assert "A host read from an artifact never receives a secret." in " ".join(DOC.read_text().replace(">", " ").split())


def test_every_command_line_in_the_docs_parses() -> None:
    calls = [args for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S) for args in imagesmith_calls(block)]
    assert len(calls) == 3 and [p for args in calls for p in problems(args)] == []


# -- publish: what the operator declares must agree with itself and with the artifacts ----------------------


def test_publish_refuses_two_release_registries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    allow = [arg for root in LOCAL_ROOTS for arg in ("--allow-root", str(root))]
    with pytest.raises(SystemExit) as done:
        cli.main(["publish", "-m", str(ROOT / "examples" / "local.yaml"), *allow, "--registry", "h.test/ml/x",
                  "--out", str(tmp_path), "--no-evidence", "--trust-policy", str(policy_file(tmp_path / "keys"))])
    assert done.value.code == 1
    assert capsys.readouterr().err == ("error: --registry h.test/ml/x and local.yaml (image.registry 127.0.0.1:5000) "
                                       "declare two release registries; give one\n")


def test_publish_refuses_artifacts_releasing_another_repository_than_declared(tmp_path: Path) -> None:
    from imagesmith import pipeline
    from tests.unit.pipeline.test_pipeline_run import saved
    from tests.unit.pipeline.test_pipeline_stages import Recorder

    saved(tmp_path)
    store = CredentialStore(Declared(release="127.0.0.1:5000"))
    options = pipeline.ReleaseOptions(store, with_evidence=False, release_repository="127.0.0.1:5000/ml/other")
    with pytest.raises(UserError) as err:
        pipeline.publish_artifacts(tmp_path, Recorder(), options, engine=EngineBase())
    assert str(err.value) == (f"the build artifacts in {tmp_path} release 127.0.0.1:5000/imagesmith/local, but --registry "
                              "declares 127.0.0.1:5000/ml/other; nothing was sent: publish them with --registry "
                              "127.0.0.1:5000/imagesmith/local if that is yours")


# -- Podman's auth files -------------------------------------------------------------------------------------


def auth_json(path: Path, auths: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": auths}))
    return path


@pytest.mark.parametrize("env, files", [
    ({"REGISTRY_AUTH_FILE": "/x/auth.json", "XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/u"}, ["/x/auth.json"]),
    ({"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/u"}, ["/run/user/1000/containers/auth.json", "/home/u/.config/containers/auth.json"]),
    ({"HOME": "/root"}, [f"/run/containers/{os.getuid()}/auth.json", "/root/.config/containers/auth.json"]),  # a rootful podman login
    ({}, []),
])
def test_where_podman_keeps_its_logins(env: dict[str, str], files: list[str]) -> None:
    from imagesmith.edges.credentials import podman_auth_files

    assert [str(p) for p in podman_auth_files(env)] == files


def test_podmans_logins_count_for_their_host_after_the_docker_config_and_registry_auth_file_before_it(tmp_path: Path) -> None:
    xdg, home = tmp_path / "xdg", tmp_path / "home"
    auth_json(xdg / "containers" / "auth.json", {"p.test": {"auth": b64("xdg:pw")}, "d.test": {"auth": b64("xdg-d:pw")}})
    auth_json(home / ".config" / "containers" / "auth.json", {"quay.test/org/repo": {"auth": b64("home:pw")}, "p.test": {"auth": b64("home:pw")}})
    config = docker_config(tmp_path, {"d.test": {"auth": b64("docker:pw")}})
    store = load_store(RELEASE, {"XDG_RUNTIME_DIR": str(xdg), "HOME": str(home)}, None, config)
    assert store.for_host("p.test") == Credentials("xdg", "pw", f"Podman auth file {xdg}/containers/auth.json")
    assert store.for_host("d.test") == Credentials("docker", "pw", f"docker config {config}")  # docker config first
    assert store.for_host("quay.test") == Credentials("home", "pw", f"Podman auth file {home}/.config/containers/auth.json")
    assert store.for_host("other.test") is None  # a login is asked only for the host named
    explicit = auth_json(tmp_path / "ci" / "auth.json", {"d.test": {"auth": b64("ci:pw")}})
    store = load_store(RELEASE, {"REGISTRY_AUTH_FILE": str(explicit), "XDG_RUNTIME_DIR": str(xdg)}, None, config)
    assert store.for_host("d.test") == Credentials("ci", "pw", f"Podman auth file {explicit}")  # named by the operator: first
    assert store.for_host("p.test") is None  # REGISTRY_AUTH_FILE alone, as Podman reads it


def test_a_podman_login_for_another_host_is_never_sent_to_an_artifacts_host(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    auth_json(xdg / "containers" / "auth.json", {"evil.test": {"auth": b64("u:pw")}, "h.test": {"auth": b64("h:pw")}})
    store = load_store(RELEASE, {"XDG_RUNTIME_DIR": str(xdg)}, None, tmp_path / "none.json")
    with pytest.raises(UserError, match=r"names the staged repository host evil.test, but h.test was declared"):
        store.for_artifact("evil.test", "h.test", "build.json", "staged repository", "--stage")
    assert store.for_artifact("evil.test", None, "build.json", "staged repository", "--stage") is None


@pytest.mark.parametrize("content, why", [
    ("{not json", "cannot be read (not JSON ("),
    ("[1, 2]", "is not a JSON object; fix or remove it, or run podman login (or set REGISTRY_AUTH_FILE to another file) again"),
])
def test_a_broken_podman_auth_file_fails_only_when_a_login_is_looked_up_there(tmp_path: Path, content: str, why: str) -> None:
    broken = tmp_path / "auth.json"
    broken.write_text(content)
    store = load_store(RELEASE, ENV | {"REGISTRY_AUTH_FILE": str(broken)}, None, tmp_path / "none.json")
    assert store.for_host("h.test") == Credentials("env-user", "env-pw", "environment (IMAGESMITH_REGISTRY_USER, for h.test)")
    with pytest.raises(UserError) as err:
        store.for_host("o.test")
    assert str(err.value).startswith(f"Podman auth file {broken} ") and why in str(err.value)


def test_a_podman_auth_file_goes_through_the_strict_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "auth.json"
    os.mkfifo(fifo)
    store = load_store(RELEASE, {"REGISTRY_AUTH_FILE": str(fifo)}, None, tmp_path / "none.json")
    with pytest.raises(UserError, match=rf"^Podman auth file {re.escape(str(fifo))} cannot be read \(is not a regular file"):
        store.for_host("o.test")


def test_a_login_podman_cannot_resolve_says_podman_login(tmp_path: Path) -> None:
    path = auth_json(tmp_path / "auth.json", {"o.test": {"auth": b64("no-colon")}})
    store = load_store(RELEASE, {"REGISTRY_AUTH_FILE": str(path)}, None, tmp_path / "none.json")
    with pytest.raises(UserError, match=rf"^Podman auth file {re.escape(str(path))}: the login for o.test cannot be read .*; run podman "
                                        r"login o.test again"):
        store.for_host("o.test")


@pytest.mark.parametrize("docker_host, login", [("unix:///run/podman/podman.sock", "podman login h.test"), ("", "docker login h.test")])
def test_the_no_login_hint_names_the_login_of_the_engine_docker_host_names(monkeypatch: pytest.MonkeyPatch, docker_host: str, login: str) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    assert CredentialStore().anonymous_hint("h.test", "h.test", "--registry").endswith(f", or {login}")
