#!/bin/bash
# Post-copy between daemons that know no other node (`cluster up
# --no-peer-list`, as daemons started by hand on separate machines may be,
# reached with `--to ADDR:PORT`): whether the answers to page faults
# travelled on a connection of their own, and how long the faults waited
# (BENCHMARKS.md, "Daemons without --peer").
# Usage: [PMIG=BINARY] [DAEMON=BINARY] [PEERS=1] [LINK=1gbit] bench/no-peer-list.sh [MIB [N]]
# A fresh 2-node cluster, a dirtier of MIB MiB (default 1024), then N
# post-copy moves back and forth (default 2). DAEMON (default PMIG) is the
# daemons' binary: the cluster's daemons are replaced by DAEMON's, started
# with the same flags, so that an older build shows how its daemons did.
# PEERS=1 keeps every daemon's --peer list (the comparison).
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
D=${DAEMON:-$B}
W=bench/workloads/bin/dirtier
[ -x "$B" ] && [ -x "$D" ] && [ -x "$W" ] || { echo "build first: make build && make -C bench/workloads" >&2; exit 2; }
mib=${1:-1024}; n=${2:-2}
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-nopeers.XXXXXX")
prefix=np$$
pid=
daemons=()
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    for d in "${daemons[@]}"; do kill -9 "$d" 2>/dev/null; done
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
peers=--no-peer-list
[ -n "${PEERS:-}" ] && peers=
"$B" cluster up --prefix "$prefix" --nodes 2 --link "${LINK:-1gbit}" --state-dir "$tmp/state" $peers \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
if [ "$D" != "$B" ]; then
    # Each node's daemon, replaced by DAEMON's with the flags cluster up gave
    # it (its command line, read before it is killed).
    "$B" cluster status --prefix "$prefix" --state-dir "$tmp/state" --json >"$tmp/status.json"
    for node in n1 n2; do
        old=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print([x for x in s["state"]["nodes"] if x["name"]==sys.argv[2]][0]["daemon_pid"])' "$tmp/status.json" "$node")
        mapfile -d '' argv <"/proc/$old/cmdline"
        kill -9 "$old"
        for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.05; done
        x "$node" -- bash -c '"$@" >>'"$tmp/state/$node/daemon.log"' 2>&1 </dev/null 251>&- & echo $!' \
            _ "$D" "${argv[@]:1}" >"$tmp/$node.pid" </dev/null 2>/dev/null
        daemons+=("$(cat "$tmp/$node.pid")")
    done
    for node in n1 n2; do
        for _ in $(seq 200); do
            x "$node" -- ss -Hltn "sport = :7070" </dev/null 2>/dev/null | grep -q . && break
            sleep 0.05
        done
    done
fi
. bench/dirtier-on-n1.sh
start_dirtier ""
from=n1; to=n2
for i in $(seq "$n"); do
    : >"$tmp/state/n1/daemon.log"; : >"$tmp/state/n2/daemon.log"
    x "$from" -- "$B" migrate --pid "$pid" --to "$(addr $to):7070" --strategy post-copy --json \
        >"$tmp/m.json" 2>"$tmp/m.err" </dev/null || { cat "$tmp/m.err"; exit 1; }
    sleep 0.3
    apart=$(grep -c "takes the answers of migration" "$tmp/state/$from/daemon.log")
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
w = d.get("fault_waits") or {}
print("move %s (%s -> %s): down_ms %.2f, remote faults %d, fault waits: longest %s ms, mean %s ms; answers apart: %s"
      % (sys.argv[2], sys.argv[3], sys.argv[4], d["down_ms"], d["remote_faults"],
         w.get("max_ms"), w.get("mean_ms"), "yes" if int(sys.argv[5]) else "no"))
' "$tmp/m.json" "$i" "$from" "$to" "$apart"
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json")
    tmpv=$from; from=$to; to=$tmpv
done
