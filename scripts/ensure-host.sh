#!/usr/bin/env bash
# Make this host ready for imagesmith's builds and tests, idempotently:
# Debian packages (docker engine, debootstrap, a registry, skopeo, htpasswd, pigz,
# Slurm's slurmctld/slurmd/client and munge, Prometheus's promtool, node_exporter
# and pushgateway, qemu-user-static for arm64 under emulation, podman, chromium) and a running Docker engine;
# podman's Docker-compatible API on $PODMAN_SOCKET (the Podman tier of the tests), with
# default_ulimits this host's runc can set. Safe to run again and again.
# With --release: only what `make release` needs (the engine, debootstrap, the registry and its tools); the
# test tiers' Slurm, Podman, Chromium, Prometheus and qemu are left out.
set -euo pipefail
case "${1:-}" in
    --release) release=1 ;;
    "") release= ;;
    *) echo "usage: $0 [--release]" >&2; exit 1 ;;
esac

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v skopeo >/dev/null || need+=(skopeo)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v htpasswd >/dev/null || need+=(apache2-utils)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
# the engine inflates a pulled layer with unpigz when it finds it (Go's gzip otherwise, at half the speed): the
# CUDA images a staged build pulls (docs/building.md)
command -v unpigz >/dev/null || need+=(pigz)
if [ -z "$release" ]; then
    # a one-node Slurm cluster for the fleet tests (scripts/local-slurm.sh starts it in a private folder)
    command -v slurmctld >/dev/null || need+=(slurmctld)
    command -v slurmd >/dev/null || need+=(slurmd)
    command -v sbatch >/dev/null || need+=(slurm-client)
    command -v munged >/dev/null || need+=(munge)
    # Podman, the second engine imagesmith speaks to through the Docker API (tests/integration/test_podman.py)
    command -v podman >/dev/null || need+=(podman)
    # headless Chromium and a font for tests/integration/test_browser.py: the HTML report and the docs opened as people
    # see them (overflow, chart titles, the verdict above the fold), screenshots into build/screenshots/
    command -v chromium >/dev/null || need+=(chromium)
    [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
    # Prometheus's tools for the metrics tests: promtool (rules), node_exporter (textfile collector), pushgateway
    command -v promtool >/dev/null || need+=(prometheus)
    command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
    command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
    # arm64 images on an amd64 host (bases, builds, the emulated payload): qemu through binfmt_misc
    if [ "$(uname -m)" != aarch64 ]; then
        command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
        command -v update-binfmts >/dev/null || need+=(binfmt-support)
    fi
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "ensure-host: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ -z "$release" ] && [ "$(uname -m)" != aarch64 ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    # no systemd here to do it at boot: mount binfmt_misc and register qemu (with F: it works inside containers)
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || echo "ensure-host: qemu-aarch64 could not be registered (binfmt_misc); arm64 runs need it" >&2
fi

if ! docker info >/dev/null 2>&1; then
    if [ -n "${DOCKER_HOST:-}" ]; then
        echo "ensure-host: DOCKER_HOST=$DOCKER_HOST does not answer" >&2
        exit 1
    fi
    echo "ensure-host: starting dockerd (log: /var/log/imagesmith-dockerd.log)" >&2
    (cd / && nohup dockerd >/var/log/imagesmith-dockerd.log 2>&1 &)  # from /: a deleted checkout is no daemon's folder
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "ensure-host: dockerd did not start; see /var/log/imagesmith-dockerd.log" >&2; tail -20 /var/log/imagesmith-dockerd.log >&2; exit 1; }
fi
echo "ensure-host: docker $(docker version --format '{{.Server.Version}}') ready" >&2
[ -z "$release" ] || exit 0

# ---- Podman: its Docker API on a socket, with ulimits runc can set here ---------------------------
# Podman asks runc for nofile and nproc 1048576 unless containers.conf says less; where that exceeds the hard
# limits runc runs with (and root lacks CAP_SYS_RESOURCE), every container fails with "error setting rlimit
# type 7: operation not permitted". The limits written: this shell's hard nofile, and its hard nproc but at most
# kernel.pid_max (what conmon is left with here). The service reads the file when it starts.
PODMAN_SOCKET=${PODMAN_SOCKET:-unix:///run/podman/podman.sock}
ULIMITS=/etc/containers/containers.conf.d/imagesmith-ulimits.conf
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu); pid_max=$(cat /proc/sys/kernel/pid_max)
[ "$nofile" = unlimited ] && nofile=1048576
{ [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; } && nproc=$pid_max
want=$(printf '# written by imagesmith scripts/ensure-host.sh: limits runc can set on this host\n[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
  "$nofile" "$nofile" "$nproc" "$nproc")
restart=
if [ "$(cat "$ULIMITS" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$(dirname "$ULIMITS")"
    printf '%s\n' "$want" > "$ULIMITS"
    restart=1
fi
podman_answers() { curl -sf --max-time 5 --unix-socket "${PODMAN_SOCKET#unix://}" http://podman/_ping >/dev/null 2>&1; }
# A service whose working folder was deleted (started in a checkout since removed) still answers _ping, but the
# conmon it starts in that folder exits at once: every container fails with "write child: broken pipe". Such a
# service is stopped here and started again from /.
for pid in $(pgrep -f "^podman system service" || true); do
    case "$(readlink "/proc/$pid/cwd" 2>/dev/null)" in
    *" (deleted)")
        echo "ensure-host: restarting the Podman service (pid $pid): the folder it was started in is gone" >&2
        kill "$pid"; for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done ;;
    esac
done
if [ -n "$restart" ] && podman_answers; then
    pid=$(cat /run/imagesmith-podman.pid 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "ensure-host: restarting the Podman service ($ULIMITS changed)" >&2
        kill "$pid"; for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    else
        echo "ensure-host: $ULIMITS changed; restart the Podman service at $PODMAN_SOCKET to apply it" >&2
    fi
fi
if ! podman_answers; then
    echo "ensure-host: starting podman system service on $PODMAN_SOCKET (log: /var/log/imagesmith-podman.log)" >&2
    mkdir -p "$(dirname "${PODMAN_SOCKET#unix://}")"
    (cd / && { nohup podman system service --time=0 "$PODMAN_SOCKET" >/var/log/imagesmith-podman.log 2>&1 &
               echo $! > /run/imagesmith-podman.pid; })
    for _ in $(seq 1 30); do podman_answers && break; sleep 1; done
    podman_answers || { echo "ensure-host: the Podman service did not answer; see /var/log/imagesmith-podman.log" >&2; tail -20 /var/log/imagesmith-podman.log >&2; exit 1; }
fi
echo "ensure-host: podman $(podman version --format '{{.Server.Version}}' 2>/dev/null || podman --version) ready at $PODMAN_SOCKET" >&2
