#!/bin/bash
# Down times of a python3 program that keeps rewriting 32 MiB
# (bench/workloads/pagewriter.py), moved N times between n1 and n2 of a
# fresh 2-node cluster (unlimited link) with STRATEGY; prints each move's
# down_ms and skeleton use, then whether every page was the program's own
# at the end (BENCHMARKS.md, "assisted-post-copy with a skeleton").
# Usage: [PMIG=BINARY] bench/writer-moves.sh [STRATEGY [N]]   (default: assisted-post-copy 6)
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
[ -x "$B" ] || { echo "build first: make build" >&2; exit 2; }
strategy=${1:-assisted-post-copy}; n=${2:-6}
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-writer.XXXXXX")
prefix=wm$$
cleanup() {
    [ -s "$tmp/pid" ] && kill "$(cat "$tmp/pid")" 2>/dev/null
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export PMIG_LOG=${PMIG_LOG:-info}
"$B" cluster up --prefix "$prefix" --nodes 2 --state-dir "$tmp/state" >"$tmp/up.log" 2>&1 </dev/null \
    || { cat "$tmp/up.log"; exit 1; }
x() { "$B" cluster exec --state-dir "$tmp/state" "$@"; }
: >"$tmp/cmds"
x n1 -- sh -c "python3 $PWD/bench/workloads/pagewriter.py <$tmp/cmds >$tmp/out 2>&1 & echo \$!" >"$tmp/pid" </dev/null
for _ in $(seq 100); do grep -q READY "$tmp/out" 2>/dev/null && break; sleep 0.1; done
grep -q READY "$tmp/out" || { echo "the program did not start" >&2; exit 1; }
from=n1; to=n2
for i in $(seq "$n"); do
    x "$from" -- "$B" migrate --pid "$(cat "$tmp/pid")" --to "$to" --strategy "$strategy" --json \
        >"$tmp/m.json" 2>"$tmp/m.err" </dev/null || { cat "$tmp/m.err"; exit 1; }
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("move %s (%s -> %s): down_ms %.2f skeleton %s" % (sys.argv[2], sys.argv[3], sys.argv[4], d["down_ms"], d.get("skeleton")))' "$tmp/m.json" "$i" "$from" "$to"
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json" >"$tmp/pid"
    t=$from; from=$to; to=$t
done
echo done >>"$tmp/cmds"
for _ in $(seq 100); do grep -q "SAME\|DIFFERENT" "$tmp/out" && break; sleep 0.1; done
tail -1 "$tmp/out"
grep -q SAME "$tmp/out"
