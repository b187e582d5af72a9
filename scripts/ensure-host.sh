#!/usr/bin/env bash
# Make this host ready for imagesmith's builds and tests, idempotently:
# Debian packages (docker engine, debootstrap, a registry, skopeo, htpasswd,
# Slurm's slurmctld/slurmd/client and munge, Prometheus's promtool, node_exporter
# and pushgateway, qemu-user-static for arm64 under emulation) and a running Docker engine.
# Safe to run again and again.
set -euo pipefail

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v skopeo >/dev/null || need+=(skopeo)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v htpasswd >/dev/null || need+=(apache2-utils)
command -v openssl >/dev/null || need+=(openssl)
# a one-node Slurm cluster for the fleet tests (scripts/local-slurm.sh starts it in a private folder)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
# Prometheus's tools for the metrics tests: promtool (rules), node_exporter (textfile collector), pushgateway
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
# arm64 images on an amd64 host (bases, builds, the emulated payload): qemu through binfmt_misc
if [ "$(uname -m)" != aarch64 ]; then
    command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
    command -v update-binfmts >/dev/null || need+=(binfmt-support)
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "ensure-host: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(uname -m)" != aarch64 ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
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
    nohup dockerd >/var/log/imagesmith-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "ensure-host: dockerd did not start; see /var/log/imagesmith-dockerd.log" >&2; tail -20 /var/log/imagesmith-dockerd.log >&2; exit 1; }
fi
echo "ensure-host: docker $(docker version --format '{{.Server.Version}}') ready" >&2
