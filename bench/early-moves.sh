#!/bin/bash
# Moves programs while they are still starting up or loading libraries:
# each of N runs takes a random case of CASES and moves its program with
# bench/hops.sh after a random 20–400 ms (hops.sh's WARM) instead of a
# second (BENCHMARKS.md, "A lock of the dynamic loader held across the
# move"). Prints each run's hops and verdict, then the counts.
# Usage: [PMIG=BINARY] [N=20] [SEED=S] [LIMIT_S=120] bench/early-moves.sh CASES
# CASES: as for bench/sweep.sh, `STRATEGY|LINK|SHELL COMMAND` per line; the
# strategy `any` picks one of the ten at random for each run. The commands
# may use $SWEEP_WORKLOADS (bench/workloads) and $SWEEP_DATA (made on the
# first run by bench/sweep-data.sh). A program still running LIMIT_S seconds
# after its last hop counts as hung (default 120).
set -u
cd "$(dirname "$0")/.."
[ $# -eq 1 ] && [ -r "$1" ] || { echo "usage: $0 CASES" >&2; exit 2; }
. bench/sweep-data.sh
RANDOM=${SEED:-$$}
echo "seed ${SEED:-$$}"
strategies=(stop-copy pre-copy queued-pre-copy demand-paging flushing freeze-free post-copy
    assisted-post-copy ampom auto)
mapfile -t cases < <(grep -Ev '^[[:space:]]*(#|$)' "$1")
[ ${#cases[@]} -gt 0 ] || { echo "no cases in $1" >&2; exit 2; }
same=0 differs=0 hung=0 other=0
for k in $(seq "${N:-20}"); do
    IFS='|' read -r strategy link cmd <<<"${cases[$((RANDOM % ${#cases[@]}))]}"
    [ "$strategy" = any ] && strategy=${strategies[$((RANDOM % ${#strategies[@]}))]}
    warm=$(printf '0.%03d' $((20 + RANDOM % 381)))
    echo "=== [$k] $strategy [$link] after ${warm} s: $cmd"
    out=$(LINK=$link WARM=$warm LIMIT_S=${LIMIT_S:-120} timeout 900 bench/hops.sh "$strategy" bash -c "$cmd" 2>&1)
    echo "$out" | tail -6
    case "$out" in
        *"output equals"*) same=$((same + 1)) ;;
        *"OUTPUT DIFFERS"*) differs=$((differs + 1)) ;;
        *"still running"*) hung=$((hung + 1)) ;;
        *) other=$((other + 1)) ;;
    esac
done
echo "runs ${N:-20}: output equal $same, differs $differs, hung $hung, not moved or ended early $other"
[ $differs -eq 0 ] && [ $hung -eq 0 ]
