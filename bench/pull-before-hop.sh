#!/bin/bash
# A demand-paging process that migrates again must first fetch every page
# it still owes its source ("the pull"): how long the second hop takes and
# how long the running process's faults wait meanwhile (BENCHMARKS.md,
# "Demand-paging: the pull before the next hop, a window at a time").
# A fresh 3-node cluster; a dirtier of MIB MiB moves n1 -> n2 with
# demand-paging, runs 2 s, then n2 -> n3 (n2 pulls everything from n1).
# Prints the second hop's time, n2's fault statistics, and the dirtier's
# three longest pauses.
# Usage: bench/pull-before-hop.sh PMIG_BINARY MIB LINK
set -u
B=$1; mib=$2; link=$3
cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-pull.XXXXXX"); prefix=pl$$
pid=
cleanup() { [ -n "$pid" ] && kill $pid 2>/dev/null; $B cluster down --prefix $prefix --state-dir $tmp/state >/dev/null 2>&1; rm -rf $tmp; }
trap cleanup EXIT
$B cluster up --prefix $prefix --nodes 3 --link $link --state-dir $tmp/state > $tmp/up.log 2>&1 </dev/null || { cat $tmp/up.log; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' $tmp/up.log; }
x() { $B cluster exec --prefix $prefix --state-dir $tmp/state "$@"; }
out=$tmp/w.out
pid=$(x n1 -- bash -c "bench/workloads/bin/dirtier --mib $mib --seconds 0 --report-ms 0 --pause-log-ms 20 >$out 2>&1 </dev/null 251>&- & echo \$!" </dev/null 2>/dev/null)
for _ in $(seq 600); do grep -q READY $out 2>/dev/null && break; sleep 0.1; done
sleep 1
x n1 -- $B migrate --pid $pid --to $(addr n2):7070 --strategy demand-paging --json > $tmp/m1.json </dev/null || exit 1
pid=$(python3 -c "import json;print(json.load(open('$tmp/m1.json'))['new_pid'])")
sleep 2
t0=$(date +%s.%N)
x n2 -- $B migrate --pid $pid --to $(addr n3):7070 --strategy demand-paging --json > $tmp/m2.json </dev/null || exit 1
t1=$(date +%s.%N)
pid=$(python3 -c "import json;print(json.load(open('$tmp/m2.json'))['new_pid'])")
echo "second hop (with the pull) took $(python3 -c "print(round($t1-$t0,2))") s; down_ms $(python3 -c "import json;print(json.load(open('$tmp/m2.json'))['down_ms'])")"
grep -ah "ended\|complete:" $tmp/state/n2/daemon.log | sed 's/.*LazyStats/LazyStats/' | tr ',' '\n' | grep -E "fault_wait_max|remote_faults|installed_pages"
grep PAUSE $out | awk '{print $3}' | sort -t= -k2 -n | tail -3
