#!/bin/bash
# What a migration's transfer costs in CPU: a fresh 2-node local cluster,
# a dirtier of MIB MiB, then N migrations back and forth with STRATEGY.
# For each: down and post ms (from the `--json` report), the rate of the
# bytes sent after the resume (post-copy's push; for a strategy without a
# post phase, the bytes of the stop over the down time), the CPU both
# daemons used during the `pmig migrate` call and the whole machine's busy
# time in the same span, each in CPU seconds per GiB sent.
# Usage: [PMIG=BINARY] bench/push-cpu.sh [MIB [STRATEGY [N]]]   (default: 1024 post-copy 2)
# Environment: LINK (cluster link, default unlimited), WORKLOAD_ARGS (more
# dirtier flags), MIGRATE_ARGS (more pmig migrate flags).
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
W=bench/workloads/bin/dirtier
[ -x "$B" ] && [ -x "$W" ] || { echo "build first: make build && make -C bench/workloads" >&2; exit 2; }
mib=${1:-1024}; strategy=${2:-post-copy}; n=${3:-2}
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-pushcpu.XXXXXX")
prefix=pc$$
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export PMIG_LOG=${PMIG_LOG:-info}
"$B" cluster up --prefix "$prefix" --nodes 2 --link "${LINK:-unlimited}" --state-dir "$tmp/state" \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
daemons=$(python3 -c 'import json,sys; print(" ".join(str(n["daemon_pid"]) for n in json.load(open(sys.argv[1]))["nodes"]))' \
    "$tmp/state/cluster.json")
# Ticks (USER_HZ) both daemons have used, and the machine's busy ticks.
daemon_ticks() { for d in $daemons; do awk '{print $14+$15}' "/proc/$d/stat"; done | awk '{s+=$1} END {print s}'; }
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
hz=$(getconf CLK_TCK)
. bench/dirtier-on-n1.sh
start_dirtier "${WORKLOAD_ARGS:-}"
from=n1; to=n2
for i in $(seq "$n"); do
    d0=$(daemon_ticks); b0=$(busy_ticks)
    x "$from" -- "$B" migrate --pid "$pid" --to "$(addr $to):7070" --strategy "$strategy" --json ${MIGRATE_ARGS:-} \
        >"$tmp/m.json" 2>"$tmp/m.err" </dev/null || { cat "$tmp/m.err"; exit 1; }
    d1=$(daemon_ticks); b1=$(busy_ticks)
    python3 - "$tmp/m.json" "$i" "$from" "$to" "$((d1 - d0))" "$((b1 - b0))" "$hz" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
i, src, dst = sys.argv[2:5]
dticks, bticks, hz = (int(v) for v in sys.argv[5:8])
ph = d["bytes_per_phase"]
sent = d["bytes_total"]
if ph["post"] > 0 and d["post_ms"] > 0:
    rate = ph["post"] / d["post_ms"] / 1e6
else:
    rate = ph["down"] / max(d["down_ms"], 1e-3) / 1e6
gib = sent / 2**30
print("migration %s (%s -> %s): down_ms %.2f post_ms %.0f sent %.0f MiB at %.2f GB/s; "
      "daemons %.2f, machine %.2f cpu-s/GiB"
      % (i, src, dst, d["down_ms"], d["post_ms"], sent / 2**20, rate,
         dticks / hz / gib, bticks / hz / gib))
EOF
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json")
    tmpv=$from; from=$to; to=$tmpv
done
