"""What the engine says back, read: a build's step lines and the images it made, a container's output (followed,
its tail kept), a push's progress and digest, and an image as imagesmith names it."""

from __future__ import annotations

import re
import threading
from typing import Any, Mapping

import docker
import docker.auth
import docker.errors

from imagesmith.edges.engine.errors import FOREIGN, docker_errors, push_error
from imagesmith.edges.protocols import BuildOutcome, ImageConfig, ImageInfo, LineSink
from imagesmith.model.engines import EngineKind
from imagesmith.model.ref import DOCKER_HUB

# A build step as each engine's builder writes it: Docker's classic builder "Step 3/15 : RUN ...", Podman's (buildah)
# "[1/2] STEP 3/15: RUN ..." in a multi-stage build (stage 1 of 2, its step 3 of 15) and "STEP 3/15: RUN ..." in one
# stage. The image a step made (or found in cache): Docker " ---> d504a664cb0f", Podman "--> d504a664cb0".
STEP = re.compile(r"^(?:\[(\d+)/(\d+)\] )?(?:Step (\d+)/(\d+) :|STEP (\d+)/(\d+):)( FROM )?", re.I)


STEP_IMAGE = re.compile(r"^(?: --->|-->) ([0-9a-f]{11,64})$")


LINE_LIMIT = 64 << 10  # a progress line longer than this is cut


def tail_logs(container: Any, limit: int, stdout: bool, stderr: bool | None = None) -> tuple[str, int]:
    """The last ``limit`` bytes of a container's stdout (or stderr) and how many it wrote;
    read as a stream so that a container printing gigabytes costs no memory."""
    keep, total = bytearray(), 0
    try:
        chunks = container.logs(stdout=stdout, stderr=(not stdout) if stderr is None else stderr, stream=True, follow=False)
        for chunk in chunks:
            total += len(chunk)
            keep += chunk
            if len(keep) > 2 * limit:
                del keep[:-limit]
    except (*FOREIGN, OSError):
        pass  # what was read so far is what there is
    return bytes(keep[-limit:]).decode(errors="replace"), total


def build_step(line: str) -> tuple[int, int, int, int, bool] | None:
    """A build log line that starts a step, as (stage, stages, step, steps, is FROM), in either engine's words
    (:data:`STEP`); Docker's classic builder numbers steps across stages: stage 1 of 1. None for any other line."""
    found = STEP.match(line)
    if found is None:
        return None
    stage, stages = int(found.group(1) or 1), int(found.group(2) or 1)
    step, steps = int(found.group(3) or found.group(5)), int(found.group(4) or found.group(6))
    return stage, stages, step, steps, bool(found.group(7))


def build_progress(line: str) -> str | None:
    """What the progress table shows for a step line: ``step 3/15``; ``stage 1/2 step 3/15`` where the engine
    (Podman) numbers steps per stage. None for any other line."""
    found = build_step(line)
    if found is None:
        return None
    stage, stages, step, steps, _ = found
    return f"stage {stage}/{stages} step {step}/{steps}" if stages > 1 else f"step {step}/{steps}"


def build_line(line: str, outcome: BuildOutcome) -> None:
    """What one build log line tells: the steps (all stages'), cache hits, the image each step made, and at each
    FROM the end of the stage before it (its last image, if this build made it, is the stage's result; a FROM's
    own image is the base, never this build's)."""
    step = build_step(line)
    if step is not None:
        stage, _, _, steps, is_from = step
        outcome._stage_steps[stage] = steps
        outcome.steps = sum(outcome._stage_steps.values())
        if is_from and outcome._last is not None and not outcome._last[1]:
            outcome.stages.append(outcome._last[0])
        outcome._cached = is_from
    if "Using cache" in line:
        outcome.cached_steps += 1
        outcome._cached = True
    made = STEP_IMAGE.match(line)
    if made:
        outcome._last = (made.group(1), outcome._cached)
        if not outcome._cached:
            outcome.made.append(made.group(1))


def follow(container: Any, sink: LineSink) -> None:
    """Stream the container's stderr lines to ``sink`` on a daemon thread."""
    def pump() -> None:
        buf = b""
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=False, stderr=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if len(buf) > LINE_LIMIT:  # a line without end: show its start, drop the rest
                    lines, buf = [*lines, buf[:LINE_LIMIT]], b""
                for line in lines:
                    sink(line[:LINE_LIMIT].decode(errors="replace"))
        except Exception:  # noqa: BLE001 - the container went away: nothing more to show
            return

    threading.Thread(target=pump, name="container-logs", daemon=True).start()


def remove_container(container: Any) -> None:
    with docker_errors(f"removing container {str(container.id)[:12]}"):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise


def kill_container(container: Any) -> None:
    """Stop a container that outlived its time (it may have ended meanwhile: then nothing to do)."""
    with docker_errors(f"stopping container {str(container.id)[:12]}"):
        try:
            container.kill()
        except docker.errors.APIError as exc:
            if exc.status_code not in (404, 409):  # gone, or no longer running
                raise


PUSHED = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")  # "t1: digest: sha256:... size: 528": Docker's and Podman's last line


def push_stream(stream: Any, ref: str, on_line: LineSink, engine: EngineKind | None = None) -> str:
    """The digest a push stream ends with (Docker's ``aux``; Podman sends only its status line); its lines to
    ``on_line``; its error as a :class:`RegistryHTTPError`."""
    digest = ""
    try:
        for event in stream:
            if "error" in event:
                raise push_error(ref, str(event["error"]), event.get("errorDetail") or {}, engine)
            pushed = PUSHED.search(str(event.get("status") or ""))
            digest = event.get("aux", {}).get("Digest", digest or (pushed.group(1) if pushed else ""))
            if event.get("status") and not event.get("progressDetail"):
                on_line(f"{event.get('id', '')} {event['status']}".strip())
    finally:
        stream.close()  # interrupted (Ctrl-C): the engine stops a push whose client went away
    return str(digest)


def familiar(ref: str, podman: bool = False) -> str:
    """A reference as the engine lists it, in the short form Docker lists and imagesmith names (Docker's "familiar"
    form): Docker Hub's ``docker.io/`` and ``docker.io/library/`` dropped; on Podman also ``localhost/``, its name
    for a local image named without a registry (a ``podman load`` of ``imagesmith/debian:bookworm``)."""
    for prefix in (f"{DOCKER_HUB}/library/", f"{DOCKER_HUB}/") + (("localhost/",) if podman else ()):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def image_info(attrs: Mapping[str, Any], podman: bool = False) -> ImageInfo:
    config = attrs.get("Config") or {}
    return ImageInfo(
        id=str(attrs["Id"]),
        tags=tuple(familiar(str(t), podman) for t in attrs.get("RepoTags") or ()),
        labels=dict(config.get("Labels") or {}),
        size=int(attrs.get("Size", 0)),
        created=str(attrs.get("Created", "")),
        repo_digests=tuple(familiar(str(d), podman) for d in attrs.get("RepoDigests") or ()),
        parent=str(attrs.get("Parent") or ""),
        layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
        os=str(attrs.get("Os") or "linux"), architecture=str(attrs.get("Architecture") or ""),
        variant=str(attrs.get("Variant") or ""),
        config=ImageConfig(
            user=str(config.get("User") or ""), entrypoint=_strings(config.get("Entrypoint")),
            cmd=_strings(config.get("Cmd")), env=_strings(config.get("Env")),
            exposed_ports=tuple(sorted(str(p) for p in (config.get("ExposedPorts") or {})))),
    )


def _strings(value: Any) -> tuple[str, ...]:
    """An inspect list (None, a list, or a lone string) as a tuple of strings."""
    if value is None:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)
