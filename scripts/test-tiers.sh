#!/usr/bin/env bash
# The two tiers of `make test` side by side: the integration tier starts first (its first minutes wait on
# Debian's mirror, PyPI and cold image builds), the unit tier runs meanwhile in the foreground, then the
# integration tier's output follows live until it ends. Both tiers always run to the end; the exit code is
# the first failing tier's (unit first), and each tier's result is said on its own line.
#
#   scripts/test-tiers.sh LOG -- UNIT_COMMAND... -- INTEGRATION_COMMAND...
#
# LOG keeps the integration tier's whole output (CI can keep it as an artifact).
set -uo pipefail

log=${1:?usage: test-tiers.sh LOG -- UNIT... -- INTEGRATION...}
shift
[ "${1:-}" = "--" ] || { echo "test-tiers.sh: expected -- after LOG" >&2; exit 2; }
shift
unit=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do unit+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "test-tiers.sh: expected -- before the integration command" >&2; exit 2; }
shift
[ ${#unit[@]} -gt 0 ] && [ $# -gt 0 ] || { echo "test-tiers.sh: give both commands" >&2; exit 2; }

mkdir -p "$(dirname "$log")"
: > "$log"
"$@" > "$log" 2>&1 &
integration=$!
# Ctrl-C or a kill of make stops the integration tier too (its own fixtures clean up on SIGTERM).
trap 'kill -TERM "$integration" 2>/dev/null; wait "$integration"; exit 130' INT TERM

echo "test-tiers: integration tier started in the background (output: $log, shown after the unit tier)"
"${unit[@]}"
unit_code=$?
echo "test-tiers: lint and unit tier exit $unit_code; the integration tier's output so far, then live:"
tail -n +1 -f --pid="$integration" "$log"
wait "$integration"
integration_code=$?
echo "test-tiers: lint and unit tier exit $unit_code, integration tier exit $integration_code"
if [ "$unit_code" -ne 0 ]; then exit "$unit_code"; fi
exit "$integration_code"
