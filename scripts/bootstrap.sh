#!/usr/bin/env bash
# Create ./.venv (if needed) and install batchd into it (editable).
#   scripts/bootstrap.sh        batchd with its test tools (scripts/test, CI)
#   scripts/bootstrap.sh run    batchd and what running it needs, nothing more (scripts/dev)
# Re-installs only when pyproject.toml changed since the last install of that kind (an
# install with the test tools serves `run` too). Says what it does as it goes, on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-test}
case "$kind" in
    run) spec='.' ;;
    test) spec='.[test]' ;;
    *) echo "usage: scripts/bootstrap.sh [run|test]" >&2; exit 2 ;;
esac
say() { echo "bootstrap: $*" >&2; }
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "batchd needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    say "creating ./.venv with $("$PY" --version 2>&1)"
    "$PY" -m venv .venv
fi
fresh() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ]; }
stamp=.venv/.batchd-installed   # batchd with its test tools
run_stamp=.venv/.batchd-installed-run
if fresh "$stamp" || { [ "$kind" = run ] && fresh "$run_stamp"; }; then
    exit 0
fi
say "upgrading pip in ./.venv"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "$kind" = run ]; then
    say "installing batchd and its dependencies into ./.venv (the first time: about a minute)"
else
    say "installing batchd, its dependencies and the test tools into ./.venv (the first time: about a minute)"
fi
# pip's own lines, one per package it fetches or installs, so that a long first install
# shows progress; the exit status is pip's
log=.venv/pip-install.log
set +e
.venv/bin/python -m pip install --progress-bar off -e "$spec" 2>&1 | tee "$log" \
    | awk '/^(Collecting|Installing collected|Successfully installed)/ { print "  " $0; fflush() }' >&2
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
    tail -n 30 "$log" >&2
    say "pip failed (exit $rc; its whole output: $log)"
    exit "$rc"
fi
if [ "$kind" = run ]; then touch "$run_stamp"; else touch "$stamp" "$run_stamp"; fi
say "done"
