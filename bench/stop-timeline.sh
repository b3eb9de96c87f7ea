#!/bin/bash
# Where a migration's stop goes: timing marks from both daemons, in order,
# in ms from the first mark (BENCHMARKS.md, "Down time: what the stop no
# longer does"). A fresh 2-node local cluster (unlimited link), a dirtier of
# MIB MiB, then N migrations back and forth with STRATEGY.
# Usage: [PMIG=BINARY] bench/stop-timeline.sh [MIB [STRATEGY [N]]]   (default: 1024 post-copy 2)
# Environment: LINK (cluster link, default unlimited), WORKLOAD_ARGS (more
# dirtier flags, e.g. "--hot-mib 16 --dirty-rate 10000"), MIGRATE_ARGS (more
# pmig migrate flags, e.g. "--max-down-ms 10"), TL_LOG (the daemons' PMIG_LOG;
# TL_LOG=info measures the down time without the timing marks' own cost),
# AFTER (seconds to wait after each migration before its marks are printed,
# default 0.3; a post-copy's `pmig migrate` returns once its push is done),
# KEEP (a directory to copy the workload's output and both daemons' logs
# into, e.g. with WORKLOAD_ARGS="--pause-log-ms 2" to line its pauses up
# with the marks: its t0_ns is CLOCK_MONOTONIC too; each migration's
# `--json` report goes there as migration-N.json).
# Each migration's marks start with its first one's CLOCK_MONOTONIC (T0), to
# line them up with other tools' records (perf sched -k CLOCK_MONOTONIC).
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
W=bench/workloads/bin/dirtier
[ -x "$B" ] && [ -x "$W" ] || { echo "build first: make build && make -C bench/workloads" >&2; exit 2; }
mib=${1:-1024}; strategy=${2:-post-copy}; n=${3:-2}
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-timeline.XXXXXX")
prefix=tl$$
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        [ -n "${out:-}" ] && cp "$out" "$KEEP/workload.out" 2>/dev/null
        cp "$tmp/state/n1/daemon.log" "$KEEP/n1.log" 2>/dev/null
        cp "$tmp/state/n2/daemon.log" "$KEEP/n2.log" 2>/dev/null
    fi
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export PMIG_LOG=${TL_LOG:-info,pmig_timing=debug}
"$B" cluster up --prefix "$prefix" --nodes 2 --link "${LINK:-unlimited}" --state-dir "$tmp/state" \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
. bench/dirtier-on-n1.sh
start_dirtier "${WORKLOAD_ARGS:-}"
from=n1; to=n2
for i in $(seq "$n"); do
    : >"$tmp/state/n1/daemon.log"; : >"$tmp/state/n2/daemon.log"
    x "$from" -- "$B" migrate --pid "$pid" --to "$(addr $to):7070" --strategy "$strategy" --json ${MIGRATE_ARGS:-} \
        >"$tmp/m.json" 2>"$tmp/m.err" </dev/null || { cat "$tmp/m.err"; exit 1; }
    sleep "${AFTER:-0.3}"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); k=d.get("skeleton"); print("migration %s (%s -> %s): down_ms %.1f%s" % (sys.argv[2], sys.argv[3], sys.argv[4], d["down_ms"], " skeleton %s" % k if k else ""))' "$tmp/m.json" "$i" "$from" "$to"
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json")
    [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp/m.json" "$KEEP/migration-$i.json"
    grep -ah "pmig_timing" "$tmp/state/n1/daemon.log" "$tmp/state/n2/daemon.log" \
        | grep -av "pmig restore: pmig\|INFO" | sed 's/.*pmig_timing: //' | sort -n \
        | awk 'NR==1{t0=$1; printf "T0 %s\n", $1} {t=$1; $1=""; printf "%8.2f %s\n", (t-t0)/1e6, $0}'
    tmpv=$from; from=$to; to=$tmpv
done
