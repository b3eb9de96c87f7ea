#!/usr/bin/env bash
# make demo: three local nodes, a workload started in n1 and moved around
# n1 → n2 → n3 → n1 with every implemented strategy, the figures side by side,
# the workload's own verification, and a teardown that runs even on failure.
#
# Environment: LINK (unlimited|1gbit|100mbit|10mbit, default unlimited),
# MIB (workload size, default 256), PMIG (the binary, default target/release/pmig).
set -euo pipefail
cd "$(dirname "$0")/.."
# Whatever the caller left open (a CI's or a job server's pipes) must not end up in
# the demo's workload: pmig would rightly refuse a stray pipe.
for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done

PMIG=${PMIG:-target/release/pmig}
LINK=${LINK:-unlimited}
MIB=${MIB:-256}
PREFIX=pmigdemo
STATE=$(mktemp -d /tmp/pmig-demo.XXXXXX)
WORKLOAD=bench/workloads/bin/dirtier
ALL_STRATEGIES="stop-copy pre-copy queued-pre-copy demand-paging flushing freeze-free post-copy assisted-post-copy ampom auto"
PIDS=()

cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    # The migrated copy runs under another pid: kill whatever runs our workload file.
    pkill -9 -f -- "$STATE/" 2>/dev/null || true
    "$PMIG" cluster down --prefix "$PREFIX" --state-dir "$STATE/cluster" >/dev/null 2>&1 || true
    rm -rf "$STATE"
    if [ $rc -ne 0 ]; then echo "demo: FAILED (exit $rc); the cluster was torn down" >&2; fi
    exit $rc
}
trap cleanup EXIT INT TERM

[ "$(id -u)" = 0 ] || { echo "demo: needs root (network namespaces, ptrace)" >&2; exit 1; }
[ -x "$PMIG" ] || { echo "demo: $PMIG is missing: run make build" >&2; exit 1; }
[ -x "$WORKLOAD" ] || make -s -C bench/workloads >/dev/null
# A private copy of the workload, so that cleanup can find every copy by path.
cp "$WORKLOAD" "$STATE/dirtier"

# Run a command with only fds 0-2 open (inherited pipes cannot be migrated).
only_stdio() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null || true
    done
    exec "$@"
}

echo "== pmig check: does this kernel have what the engine needs?"
"$PMIG" check >/dev/null && echo "   yes"

echo "== bringing up 3 nodes (link $LINK)"
"$PMIG" cluster down --prefix "$PREFIX" --state-dir "$STATE/cluster" >/dev/null 2>&1 || true
"$PMIG" cluster up --nodes 3 --link "$LINK" --prefix "$PREFIX" --state-dir "$STATE/cluster"
export PMIG_CLUSTER_PREFIX=$PREFIX PMIG_CLUSTER_DIR=$STATE/cluster

# Which strategies this build implements; the others are refused with one line.
IMPLEMENTED=()
for s in $ALL_STRATEGIES; do
    if ! msg=$("$PMIG" migrate --pid 1 --to n2 --strategy "$s" 2>&1 >/dev/null) && [[ $msg == *"not implemented"* ]]; then
        echo "   $s: ${msg#pmig: }"
    else
        IMPLEMENTED+=("$s")
    fi
done
# The workload rewrites its memory until the demo is done moving it (however
# long the hops take on this machine), then is told to stop; it reports how
# many pages it wrote and a checksum of its memory, which an unmigrated run of
# exactly as many writes must reproduce.
ARGS=(--mib "$MIB" --dirty-rate 4000 --report-ms 0)
echo "== workload: dirtier ${ARGS[*]} (fills $MIB MiB, rewrites 4000 pages/s until told to stop, verifies itself)"
( only_stdio ip netns exec "$PREFIX-n1" "$STATE/dirtier" "${ARGS[@]}" --seconds 0 </dev/null >"$STATE/migrated.out" 2>&1 ) &
WPID=$!
PIDS+=("$WPID")
disown "$WPID"  # it is killed by the migration: no job-control message
for _ in $(seq 1 300); do
    grep -q READY "$STATE/migrated.out" 2>/dev/null && break
    sleep 0.1
done
grep -q READY "$STATE/migrated.out" || { echo "demo: the workload did not start" >&2; exit 1; }

ROWS=()
pid=$WPID
node=n1
for s in "${IMPLEMENTED[@]}"; do
    echo "== $s: n1 → n2 → n3 → n1"
    for to in n2 n3 n1; do
        out=$(ip netns exec "$PREFIX-$node" "$PMIG" migrate --pid "$pid" --to "$to" --strategy "$s" --json)
        new=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["new_pid"])' "$out")
        ROWS+=("$s $node→$to $out")
        echo "   $node → $to: pid $pid → $new"
        pid=$new
        node=$to
        sleep 1
    done
done

echo "== figures"
python3 - "${ROWS[@]}" <<'EOF'
import json, sys
rows = [r.split(" ", 2) for r in sys.argv[1:]]
hdr = ("strategy", "hop", "down_ms", "prep_ms", "post_ms", "total_ms", "MiB sent", "pages", "rounds", "faults", "residual")
fmt = "{:<16} {:<7} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>6} {:>6}  {}"
print(fmt.format(*hdr))
for s, hop, j in rows:
    r = json.loads(j)
    print(fmt.format(s, hop, "%.1f" % r["down_ms"], "%.1f" % r["preparation_ms"], "%.1f" % r["post_ms"],
                     "%.1f" % r["total_ms"], "%.1f" % (r["bytes_total"] / 2**20), r["pages_sent"], r["rounds"],
                     r["remote_faults"], r["residual"]["what"]))
EOF

echo "== stopping the workload (on $node, pid $pid), then an unmigrated run of as many writes"
kill -TERM "$pid" 2>/dev/null || { echo "demo: the workload (pid $pid) ended before it was told to stop" >&2; exit 1; }
for _ in $(seq 1 1200); do
    grep -q '^DONE' "$STATE/migrated.out" 2>/dev/null && break
    sleep 0.1
done
m=$(grep '^DONE' "$STATE/migrated.out" || true)
iter=$(sed -n 's/^DONE iter=\([0-9]*\).*/\1/p' <<<"$m")
[ -n "$iter" ] || { echo "demo: the migrated workload did not report (${m:-no DONE line})" >&2; exit 1; }
( only_stdio timeout 600 "$STATE/dirtier" --mib "$MIB" --dirty-rate 0 --iterations "$iter" --report-ms 0 \
    </dev/null >"$STATE/reference.out" 2>&1 ) || true
r=$(grep '^DONE' "$STATE/reference.out" || true)
echo "   migrated:  $m"
echo "   reference: $r"
sum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' <<<"$1"; }
if [[ $m == *verify=ok* ]] && [ -n "$(sum "$m")" ] && [ "$(sum "$m")" = "$(sum "$r")" ]; then
    echo "== OK: the migrated workload verified its memory and matches the unmigrated run"
else
    echo "== FAILED: the migrated workload's result differs" >&2
    exit 1
fi
