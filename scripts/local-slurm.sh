#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, from Debian's packages (slurmctld,
# slurmd, munge), for `imagesmith fleet verify` and its tests. Everything it
# makes lives in one folder (config, state, logs, a private munge key and
# socket) and it listens on its own ports, so it never touches a site's
# /etc/slurm or /run/munge. Idempotent.
#
#   scripts/local-slurm.sh start    start it (if not running); print the SLURM_CONF line to use
#   scripts/local-slurm.sh stop     stop every daemon it started (by pid) and cancel its jobs
#   scripts/local-slurm.sh env      print `export SLURM_CONF=...`
#
# The cluster: node "$node" (this host, all its CPUs, features cpu,fleet) in
# partitions fleet-a and fleet-b; node "ghost" (feature ghost, in fleet-a)
# is defined but never comes up, so a job constrained to it stays pending:
# the "node that never starts the job" case.
# Settings: IMAGESMITH_SLURM_DIR (default .cache/slurm), IMAGESMITH_SLURM_PORT
# (slurmctld; slurmd uses +1, the ghost +2; default 16817).
set -euo pipefail
dir="$(mkdir -p "${IMAGESMITH_SLURM_DIR:-$PWD/.cache/slurm}" && cd "${IMAGESMITH_SLURM_DIR:-$PWD/.cache/slurm}" && pwd)"
port="${IMAGESMITH_SLURM_PORT:-16817}"
node="imagesmith-node"
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

need() {
    for tool in slurmctld slurmd sbatch munged; do
        command -v "$tool" >/dev/null || { echo "local-slurm: $tool is missing: bash scripts/ensure-host.sh installs slurmctld, slurmd, slurm-client and munge" >&2; exit 1; }
    done
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_config() {
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
    chmod 700 "$dir/munge"
    [ -f "$dir/munge/munge.key" ] || (umask 077; head -c 1024 /dev/urandom > "$dir/munge/munge.key")
    local cpus mem
    cpus="$(nproc)"
    mem="$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)"
    cat > "$conf" <<CONF
# written by scripts/local-slurm.sh: a one-node test cluster
ClusterName=imagesmith
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=300
KillWait=10
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
NodeName=$node NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=$cpus RealMemory=$mem Feature=cpu,fleet State=UNKNOWN
NodeName=ghost NodeHostname=ghost NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=1 RealMemory=100 Feature=ghost State=DOWN
PartitionName=fleet-a Nodes=$node,ghost Default=YES MaxTime=INFINITE State=UP
PartitionName=fleet-b Nodes=$node MaxTime=INFINITE State=UP
CONF
}

start() {
    need
    write_config
    if ! alive "$dir/munge/munged.pid"; then
        munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
            --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
    fi
    alive "$dir/slurmctld.pid" || slurmctld -f "$conf"
    alive "$dir/slurmd.pid" || slurmd -f "$conf" -N "$node"
    for _ in $(seq 1 600); do  # up to 300 s: slurmd registers slowly on a loaded host
        state="$(sinfo -h -n "$node" -o %T 2>/dev/null | head -1)"
        case "$state" in idle|mixed|allocated) break ;; esac
        sleep 0.5
    done
    case "${state:-}" in
    idle|mixed|allocated) ;;
    *) echo "local-slurm: node $node is '${state:-unknown}' after 300 s; logs in $dir/log" >&2; tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2; exit 1 ;;
    esac
    echo "slurm cluster '$node' ready (partitions fleet-a, fleet-b); use it with: export SLURM_CONF=$conf" >&2
}

stop() {
    if alive "$dir/slurmctld.pid"; then
        squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
    fi
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        if alive "$pidfile"; then
            pid="$(cat "$pidfile")"
            kill "$pid"
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$pidfile"
    done
}

case "${1:-start}" in
start) start; echo "export SLURM_CONF=$conf" ;;
stop) stop ;;
env) echo "export SLURM_CONF=$conf" ;;
*) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
