#!/bin/sh
# The payload under the image's login shell (imagesmith verify --login-shell): bash -l where the image has
# bash, else sh -l. Both read /etc/profile (and through it /etc/profile.d/*.sh) and the user's profile, so
# an environment that only login shells put on PATH is the one the payload's python3 comes from.
#   sh login.sh python3 run.py ARGS...
if command -v bash >/dev/null 2>&1; then
    exec bash -l -c 'exec "$@"' imagesmith-login "$@"
fi
exec sh -l -c 'exec "$@"' imagesmith-login "$@"
