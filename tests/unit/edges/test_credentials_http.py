"""A host read from an artifact never receives a secret, proved over real HTTP.

Recording registries (loopback HTTP servers speaking just enough of the registry API v2 to challenge and
refuse) log the ``Authorization`` header of every request. A build artifact (OUT/<target>/build.json) names
them as its release registry and staging repository; publish, promotion, verify --build-report and evidence
then run for real (the CLI in-process, the registry client over HTTP) with every kind of credential on hand:
--credentials lines for those very hosts, a legacy user:password line, the environment pair, the docker
config. What each recorder received is the proof."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

from imagesmith import cli, pipeline
from imagesmith.edges.credentials import CredentialStore, Declared, load_store
from imagesmith.edges.engine import ImageInfo
from imagesmith.edges.registry import Credentials, Registry
from imagesmith.errors import UserError
from imagesmith.model.buildreport import Release, Staged, TargetResult
from imagesmith.stages import artifacts
from tests.loopback import serve
from tests.unit.pipeline.test_pipeline_stages import OPTIONS, EngineDouble, Recorder
from tests.unit.stages.building.test_build_scheduler import BASE, load, true_facts
from tests.unit.trustkeys import policy_file, verifier

M, PLAN = load()
TARGET = next(t for t in PLAN.targets if t.id == BASE)
IMAGE = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64
OTHER = "127.0.0.1:9"  # a declared host nothing listens on: nothing may be sent anywhere when it is declared


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Recording:
    """What one recording registry received: (method, path, Authorization or None), in order."""

    host: str = ""
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    public_reads: bool = False  # GET/HEAD need no login (a public project); writes always do

    @property
    def authorizations(self) -> set[str | None]:
        return {auth for _, _, auth in self.seen}


def recording_handler(rec: Recording) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        """Without credentials: 401 with a Basic challenge (as an htpasswd registry); with some: /v2/ is 200 and
        anything else is an unknown manifest/blob (404), which is enough to fail or answer each call."""

        def answer(self) -> None:
            auth = self.headers.get("Authorization")
            rec.seen.append((self.command, self.path, auth))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            status, body = (200, {}) if auth and self.path == "/v2/" else (404, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]})
            if auth is None and not (rec.public_reads and self.command in ("GET", "HEAD")):
                status, body = 401, {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="recorder"')
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = answer

        def log_message(self, format: str, *args: Any) -> None:
            return None
    return Handler


@contextlib.contextmanager
def recorder(public_reads: bool = False) -> Iterator[Recording]:
    rec = Recording(public_reads=public_reads)
    with serve(recording_handler(rec)) as port:
        rec.host = f"127.0.0.1:{port}"
        yield rec


@pytest.fixture
def registries() -> Iterator[tuple[Recording, Recording]]:
    """Two recording registries: the one a build.json names as release registry, the one it names as staging."""
    with recorder() as release, recorder() as stage:
        yield release, stage


@dataclass
class PullDouble(EngineDouble):
    """The verify engine double, whose pull does what dockerd does with the auth it is handed: it asks the
    reference's registry for the manifest, over HTTP, with exactly those credentials."""

    auths: list[Mapping[str, str] | None] = field(default_factory=list)

    def pull(self, ref: str, auth: Mapping[str, str] | None = None) -> ImageInfo:
        self.auths.append(auth)
        host, _, rest = ref.partition("/")
        repo, _, digest = rest.partition("@")
        creds = Credentials(auth["username"], auth["password"]) if auth else None
        with contextlib.suppress(UserError):
            Registry(host, creds).manifest(repo, digest)
        return ImageInfo(IMAGE, (), {"io.imagesmith.cuda": "cpu"}, 1, "t")


def staged_artifact(out: Path, release_host: str, stage_host: str) -> Path:
    """OUT/<target>/build.json as another CI job wrote it: released to ``release_host``, staged on ``stage_host``."""
    spec = Release(M.file.name, PLAN.date, release_host, "ml/x", M.tags)
    result = TargetResult(TARGET.id, "built", TARGET.image, IMAGE, facts=true_facts(TARGET) | {"torch": "2.13.0+cpu"},
                                staged=Staged(f"{stage_host}/ml/staging", "ctx-" + "c" * 64, DIGEST, pushed=True))
    path = out / TARGET.id / artifacts.BUILD_FILE
    artifacts.write_build(path, artifacts.record_of(result, TARGET, spec))
    return path


def verified_artifact(out: Path, release_host: str, stage_host: str) -> Path:
    """The artifact and its passed verify.json (verified from the staged digest, pulled without credentials)."""
    path = staged_artifact(out, release_host, stage_host)
    key, _ = verifier(out.parent / "keys")  # the policy publish is given (policy_file) names this verifier
    done = pipeline.verify_builds(pipeline.read_builds([path]), out, OPTIONS, Recorder(), CredentialStore(), engine=PullDouble(out),
                                  signer=key)
    assert done.failed == [] and (path.parent / "verify.json").is_file() and (path.parent / "verify.dsse.json").is_file()
    return path


@pytest.fixture
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment: no registry pair, a docker config of the test's own (none yet)."""
    for name in ("IMAGESMITH_REGISTRY_USER", "IMAGESMITH_REGISTRY_PASSWORD", "IMAGESMITH_REGISTRY_HOST", "IMAGESMITH_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "docker"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    return folder / "config.json"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        cli.main(list(args))
    code = done.value.code
    return code if isinstance(code, int) else 1, capsys.readouterr().err


def every_login(tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch, *hosts: str) -> Path:
    """Credentials for ``hosts`` in every place they can be: --credentials lines, the docker config, the
    environment pair (IMAGESMITH_REGISTRY_HOST naming the first). Returns the --credentials file."""
    file = tmp_path / "logins"
    file.write_text("".join(f"{h} file-{i}:file-pw-{i}\n" for i, h in enumerate(hosts)))
    config.write_text(json.dumps({"auths": {h: {"auth": base64.b64encode(f"cfg-{i}:cfg-pw-{i}".encode()).decode()}
                                            for i, h in enumerate(hosts)}}))
    monkeypatch.setenv("IMAGESMITH_REGISTRY_USER", "env-user")
    monkeypatch.setenv("IMAGESMITH_REGISTRY_PASSWORD", "env-pw")
    monkeypatch.setenv("IMAGESMITH_REGISTRY_HOST", hosts[0])
    return file


# -- publish (and its promotion from staging) --------------------------------------------------------


def test_publish_sends_no_credential_to_hosts_read_from_build_json(tmp_path: Path, operator: Path, registries: tuple[Recording, Recording],
                                                                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing declared: the release registry and the staging host come from build.json only. Every login for
    those very hosts is on hand, and none is sent; the 401 says which flag declares the host."""
    _, stage = registries
    with recorder(public_reads=True) as release:  # its tags read anonymously: the release goes on to promote
        out = tmp_path / "out"
        verified_artifact(out, release.host, stage.host)
        stage.seen.clear()
        logins = every_login(tmp_path, operator, monkeypatch, release.host, stage.host)
        code, err = run_cli(capsys, "publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "--no-evidence", "--credentials", str(logins))
    assert code == 1 and "bug" not in err
    assert stage.seen and stage.authorizations == {None}  # promotion read the staged image anonymously
    assert release.seen and release.authorizations == {None}
    assert "declare it with --stage REGISTRY/REPO" in (out / "release.json").read_text()


def test_a_401_from_an_undeclared_release_registry_says_which_flag_declares_it(
        tmp_path: Path, operator: Path, registries: tuple[Recording, Recording], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    release, stage = registries
    out = tmp_path / "out"
    verified_artifact(out, release.host, stage.host)
    logins = every_login(tmp_path, operator, monkeypatch, release.host)
    code, err = run_cli(capsys, "publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "--no-evidence", "-q", "--credentials", str(logins))
    assert code == 1 and release.seen and release.authorizations == {None}
    assert (f"(no credential was sent to {release.host}: that host was read from an artifact "
            "and none was declared; declare it with --registry HOST/REPO (or --matrix, whose image.registry declares it) "
            "to log in) [credentials used: none]") in err
    assert "IMAGESMITH_REGISTRY_USER" not in err and "docker login" not in err  # neither would be sent to that host


@pytest.mark.parametrize("flags, what, declared", [
    (["--registry", f"{OTHER}/ml/x"], "release registry", OTHER),
    (["--registry", "{release}/ml/x", "--stage", f"{OTHER}/ml/staging"], "staged repository", OTHER),
])
def test_publish_refuses_an_artifact_naming_another_host_than_declared_and_sends_nothing(
        tmp_path: Path, operator: Path, registries: tuple[Recording, Recording], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], flags: list[str], what: str, declared: str) -> None:
    release, stage = registries
    out = tmp_path / "out"
    path = verified_artifact(out, release.host, stage.host)
    stage.seen.clear()
    logins = every_login(tmp_path, operator, monkeypatch, release.host, stage.host, OTHER)
    code, err = run_cli(capsys, "publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "--no-evidence", "-q", "--credentials", str(logins),
                        *[f.format(release=release.host) for f in flags])
    named = release.host if what == "release registry" else stage.host
    assert code == 1 and f"error: {path} names the {what} host {named}, but {declared} was declared" in err
    assert "nothing was sent" in err and release.seen == [] and stage.seen == []


@pytest.mark.parametrize("kind", ["lines", "legacy", "environment", "docker-config"])
def test_the_declared_release_host_gets_its_login_and_the_undeclared_staging_host_none(
        tmp_path: Path, operator: Path, registries: tuple[Recording, Recording], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """--registry declares the release host: its login reaches it. The staging host is read from build.json
    (no --stage): the legacy line, the environment pair and its own docker config entry never reach it."""
    release, stage = registries
    out = tmp_path / "out"
    verified_artifact(out, release.host, stage.host)
    stage.seen.clear()
    logins = tmp_path / "logins"
    args = ["publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "--no-evidence", "-q", "--registry", f"{release.host}/ml/x"]
    if kind == "lines":
        logins.write_text(f"{release.host} rel:rel-pw\n{stage.host} stg:stg-pw\n")
    elif kind == "legacy":
        logins.write_text("rel:rel-pw\n")
    elif kind == "environment":
        monkeypatch.setenv("IMAGESMITH_REGISTRY_USER", "rel")
        monkeypatch.setenv("IMAGESMITH_REGISTRY_PASSWORD", "rel-pw")
    else:
        operator.write_text(json.dumps({"auths": {release.host: {"auth": base64.b64encode(b"rel:rel-pw").decode()},
                                                  stage.host: {"auth": base64.b64encode(b"stg:stg-pw").decode()}}}))
    code, err = run_cli(capsys, *args, *(["--credentials", str(logins)] if logins.exists() else []))
    assert code == 1 and "bug" not in err  # the recorders never serve the image: the release fails, as it should
    assert basic("rel", "rel-pw") in release.authorizations and release.authorizations <= {None, basic("rel", "rel-pw")}
    assert stage.seen and stage.authorizations == {None}


def test_the_declared_staging_host_gets_its_own_login_only(tmp_path: Path, operator: Path, registries: tuple[Recording, Recording],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    release, stage = registries
    out = tmp_path / "out"
    verified_artifact(out, release.host, stage.host)
    stage.seen.clear()
    logins = tmp_path / "logins"
    logins.write_text(f"{release.host} rel:rel-pw\n{stage.host} stg:stg-pw\n")
    code, _ = run_cli(capsys, "publish", "--out", str(out), "--trust-policy", str(policy_file(tmp_path / "keys")), "--no-evidence", "-q", "--registry", f"{release.host}/ml/x",
                      "--stage", f"{stage.host}/ml/staging", "--credentials", str(logins))
    assert code == 1
    assert basic("stg", "stg-pw") in stage.authorizations and stage.authorizations <= {None, basic("stg", "stg-pw")}
    assert release.authorizations <= {None, basic("rel", "rel-pw")}


# -- verify --build-report ------------------------------------------------------------------------------


def test_verify_build_report_pulls_an_undeclared_staging_host_anonymously(tmp_path: Path, registries: tuple[Recording, Recording]) -> None:
    release, stage = registries
    path = staged_artifact(tmp_path, release.host, stage.host)
    logins = tmp_path / "logins"
    logins.write_text(f"{stage.host} stg:stg-pw\n")
    store = load_store(Declared(), {"IMAGESMITH_REGISTRY_USER": "u", "IMAGESMITH_REGISTRY_PASSWORD": "p",
                                    "IMAGESMITH_REGISTRY_HOST": stage.host}, logins, {"auths": {stage.host: {"auth": "dTpw"}}})
    engine, display = PullDouble(tmp_path), Recorder()
    pipeline.verify_builds(pipeline.read_builds([path]), tmp_path, OPTIONS, display, store, engine=engine)
    assert engine.auths == [None] and stage.seen and stage.authorizations == {None} and release.seen == []
    assert ("", "note", f"staged images on {stage.host} are pulled without credentials: no credential was sent to "
                        f"{stage.host}: that host was read from an artifact and none was declared; declare it with "
                        "--stage REGISTRY/REPO to log in") in display.lines


def test_verify_build_report_with_stage_pulls_with_that_hosts_login(tmp_path: Path, registries: tuple[Recording, Recording]) -> None:
    release, stage = registries
    path = staged_artifact(tmp_path, release.host, stage.host)
    logins = tmp_path / "logins"
    logins.write_text("stg:stg-pw\n")  # legacy: binds to the declared host, here --stage's
    store = load_store(Declared(staging=stage.host), {}, logins, {})
    engine = PullDouble(tmp_path)
    pipeline.verify_builds(pipeline.read_builds([path]), tmp_path, OPTIONS, Recorder(), store, engine=engine)
    assert engine.auths == [{"username": "stg", "password": "stg-pw"}]
    assert basic("stg", "stg-pw") in stage.authorizations and release.seen == []


def test_verify_build_report_refuses_another_staging_host_before_any_pull(tmp_path: Path, operator: Path,
                                                                         registries: tuple[Recording, Recording],
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    release, stage = registries
    path = staged_artifact(tmp_path, release.host, stage.host)
    logins = tmp_path / "logins"
    logins.write_text(f"stg:stg-pw\n{stage.host} s:p\n")
    code, err = run_cli(capsys, "verify", "--build-report", str(path), "--gpus", "none", "--stage", f"{OTHER}/ml/staging",
                        "--credentials", str(logins))
    assert code == 1 and err.startswith(f"error: {path} names the staged repository host {stage.host}, but {OTHER} was declared")
    assert stage.seen == [] and release.seen == []


# -- evidence: the reference on the command line declares its host ------------------------------------------


@pytest.mark.parametrize("entries, want", [
    ({"{release}": "rel:rel-pw"}, {None, basic("rel", "rel-pw")}),
    ({"{stage}": "stg:stg-pw"}, {None}),  # another host's docker config entry never reaches it
])
def test_evidence_sends_a_docker_config_entry_only_to_its_own_host(tmp_path: Path, operator: Path,
                                                                   registries: tuple[Recording, Recording],
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   entries: dict[str, str], want: set[str | None]) -> None:
    release, stage = registries
    hosts = {"release": release.host, "stage": stage.host}
    operator.write_text(json.dumps({"auths": {k.format(**hosts): {"auth": base64.b64encode(v.encode()).decode()}
                                              for k, v in entries.items()}}))
    code, err = run_cli(capsys, "evidence", f"{release.host}/ml/x@{DIGEST}")
    assert code == 1 and "bug" not in err and release.seen and release.authorizations == want and stage.seen == []
    if want == {None}:
        assert f"no login for {release.host} was found" in err or "credentials used: none" in err
