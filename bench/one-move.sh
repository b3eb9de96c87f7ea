#!/bin/bash
# Moves a program once, n1 -> n2, on a fresh 2-node local cluster, and
# prints its standard output and error once it ends (BENCHMARKS.md, "The Go
# runtime's thread ids").
# Usage: [PMIG=BINARY] [S=STRATEGY] [WARM=SECONDS] [PIDNS=1] [DONE=WORD] bench/one-move.sh 'CMD'
# The program starts on n1, runs WARM seconds (default 2), then moves with
# S (default post-copy). It has ended when WORD (default "elapsed") is in
# its output; at most LIMIT_S seconds (default 120) are waited for that.
# PIDNS=1: every node has its own pid namespace (the program keeps its ids).
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
[ -x "$B" ] && [ $# -eq 1 ] || { echo "usage: $0 'CMD' (build first: make build)" >&2; exit 2; }
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-one.XXXXXX")
prefix=om$$
pid=
cleanup() {
    [ -z "${PIDNS:-}" ] && [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
"$B" cluster up --prefix "$prefix" --nodes 2 ${PIDNS:+--pid-ns} --state-dir "$tmp/state" \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
pid=$(x n1 -- bash -c "$1 >$tmp/out 2>$tmp/err </dev/null 251>&- & echo \$!" </dev/null 2>/dev/null)
sleep "${WARM:-2}"
x n1 -- "$B" migrate --pid "$pid" --to "$(addr n2):7070" --strategy "${S:-post-copy}" --json \
    >"$tmp/m.json" </dev/null || exit 1
pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json")
for _ in $(seq $((${LIMIT_S:-120} * 10))); do
    grep -q "${DONE:-elapsed}" "$tmp/out" "$tmp/err" 2>/dev/null && break
    sleep 0.1
done
cat "$tmp/out" "$tmp/err"
