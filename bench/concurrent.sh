#!/bin/bash
# Several migrations at once (BENCHMARKS.md, "Ten migrations at once"): on a
# fresh 3-node local cluster, one dirtier per strategy (half on n1, half on
# n2), then three rounds in which every one of them moves at the same time:
# n1 <-> n2, then all to n3, then all to n1. Each move's result is printed,
# then each dirtier's verdict once it ends (all must end with the same
# checksum and verify=ok).
# Usage: [PMIG=BINARY] [LINK=unlimited] [MIB=64] [STRATS="s1 s2 …"] bench/concurrent.sh
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
W=bench/workloads/bin/dirtier
[ -x "$B" ] && [ -x "$W" ] || { echo "build first: make build && make -C bench/workloads" >&2; exit 2; }
W=$PWD/$W
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-concurrent.XXXXXX")
prefix=cc$$
cleanup() {
    for p in $(cat "$tmp/pids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
"$B" cluster up --prefix "$prefix" --nodes 3 --link "${LINK:-unlimited}" --state-dir "$tmp/state" \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
read -r -a strats <<<"${STRATS:-post-copy stop-copy pre-copy ampom demand-paging flushing freeze-free assisted-post-copy queued-pre-copy auto}"
n=${#strats[@]}
: >"$tmp/procs"
for i in $(seq 0 $((n - 1))); do
    node=n$((i % 2 + 1))
    p=$(x "$node" -- bash -c "$W --mib ${MIB:-64} --dirty-rate 2000 --iterations 60000 --seconds 0 --report-ms 0 >$tmp/w$i.out 2>&1 </dev/null 251>&- & echo \$!" \
        </dev/null 2>/dev/null)
    echo "$p" >>"$tmp/pids"
    echo "$i $node $p" >>"$tmp/procs"
done
sleep 2
status=0
# round DEST: every process moves at once, to DEST (other: n1 <-> n2).
round() {
    while read -r i node p; do
        to=$1
        [ "$to" = other ] && { [ "$node" = n1 ] && to=n2 || to=n1; }
        (x "$node" -- "$B" migrate --pid "$p" --to "$(addr "$to"):7070" --strategy "${strats[$i]}" --json \
            >"$tmp/m$i.json" 2>"$tmp/m$i.err" </dev/null; echo "$? $to" >"$tmp/rc$i") &
    done <"$tmp/procs"
    wait
    : >"$tmp/procs.new"
    while read -r i node p; do
        read -r rc to <"$tmp/rc$i"
        if [ "$rc" = 0 ]; then
            read -r np dm < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['new_pid'], round(d['down_ms'], 1))" "$tmp/m$i.json")
            echo "  ${strats[$i]}: $node -> $to, down_ms $dm"
            echo "$np" >>"$tmp/pids"
            echo "$i $to $np" >>"$tmp/procs.new"
        else
            echo "  ${strats[$i]}: $node -> $to FAILED: $(cat "$tmp/m$i.err")"
            echo "$i $node $p" >>"$tmp/procs.new"
            status=1
        fi
    done <"$tmp/procs"
    mv "$tmp/procs.new" "$tmp/procs"
}
echo "round 1 (n1 <-> n2)"; round other
echo "round 2 (all to n3)"; round n3
echo "round 3 (all to n1)"; round n1
# Bounded: at most 5 minutes for every dirtier to end.
for _ in $(seq 600); do
    left=0
    for i in $(seq 0 $((n - 1))); do grep -q "verify=" "$tmp/w$i.out" 2>/dev/null || left=1; done
    [ $left = 0 ] && break
    sleep 0.5
done
for i in $(seq 0 $((n - 1))); do
    v=$(grep -o 'checksum=[0-9a-f]* verify=[a-z]*' "$tmp/w$i.out" || echo "NO RESULT: $(tail -2 "$tmp/w$i.out")")
    echo "${strats[$i]}: $v"
    case "$v" in *verify=ok) ;; *) status=1 ;; esac
done
exit $status
