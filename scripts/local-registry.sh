#!/usr/bin/env bash
# A local OCI registry for the main job: Debian's docker-registry (CNCF
# distribution) on 127.0.0.1:5000 with htpasswd auth. Idempotent.
#   scripts/local-registry.sh start   start it (if not running); say where its credentials file is
#   scripts/local-registry.sh stop
set -euo pipefail
dir="${IMAGESMITH_REGISTRY_DIR:-$PWD/.cache/registry}"
port="${IMAGESMITH_REGISTRY_PORT:-5000}"
mkdir -p "$dir/data"
[ -f "$dir/password" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr -dc "A-Za-z0-9" > "$dir/password")
(umask 077; printf "%s:%s\n" imagesmith "$(cat "$dir/password")" > "$dir/credentials")
user=imagesmith
case "${1:-start}" in
start)
    if ! curl -fsS -o /dev/null -w '' "http://127.0.0.1:$port/v2/" -u "$user:$(cat "$dir/password")" 2>/dev/null; then
        htpasswd -Bbn "$user" "$(cat "$dir/password")" > "$dir/htpasswd"
        cat > "$dir/config.yml" <<CONF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $dir/data}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$port}
auth: {htpasswd: {realm: imagesmith-local, path: $dir/htpasswd}}
CONF
        nohup docker-registry serve "$dir/config.yml" > "$dir/registry.log" 2>&1 &
        echo $! > "$dir/pid"
        for _ in $(seq 1 50); do
            curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" -u "$user:$(cat "$dir/password")" 2>/dev/null && break
            sleep 0.2
        done
        if ! curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" -u "$user:$(cat "$dir/password")" 2>/dev/null; then
            if curl -sS -o /dev/null "http://127.0.0.1:$port/v2/" 2>/dev/null; then
                echo "local-registry: 127.0.0.1:$port answers, but not to $dir/credentials: another registry holds the port (another checkout's?): stop it (bash scripts/local-registry.sh stop, in the checkout that started it) and run this again" >&2
            else
                echo "local-registry: the registry did not start on 127.0.0.1:$port; its log: $dir/registry.log" >&2
                tail -n 5 "$dir/registry.log" >&2 || true
            fi
            exit 1
        fi
    fi
    echo "registry on 127.0.0.1:$port; credentials (user:password) in $dir/credentials: imagesmith ... --credentials $dir/credentials"
    ;;
stop)
    [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null || true
    rm -f "$dir/pid"
    ;;
esac
