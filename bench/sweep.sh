#!/bin/bash
# Moves each program of a cases file around a fresh 3-node cluster with
# bench/hops.sh and prints each run's hops and verdict (BENCHMARKS.md,
# "A third sweep of real programs").
# Usage: [PMIG=BINARY] [WARM=1] bench/sweep.sh CASES
# CASES: one case per line, `STRATEGY|LINK|SHELL COMMAND` (blank lines and
# lines starting with # are skipped). The commands may use $SWEEP_DATA, a
# directory with text.txt (15 MB), text24.txt (370 MB) and after.tcl (a Tcl
# loop with `after` timers), made on the first run (default
# /var/tmp/pmig-sweep-data), and $SWEEP_WORKLOADS, the directory of
# bench/workloads.
set -u
cd "$(dirname "$0")/.."
[ $# -eq 1 ] && [ -r "$1" ] || { echo "usage: $0 CASES" >&2; exit 2; }
. bench/sweep-data.sh
export WARM=${WARM:-1}
status=0
while IFS='|' read -r strategy link cmd; do
    case "$strategy" in ''|'#'*) continue ;; esac
    echo "=== $strategy [$link] $cmd"
    LINK=$link timeout 900 bench/hops.sh "$strategy" bash -c "$cmd" 2>&1 | tail -${TAIL:-6}
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done <"$1"
exit $status
