#!/bin/bash
# Wall time of two `auto` hops (BENCHMARKS.md, "`auto`: a link probe sized to the link").
# Usage: bench/auto-time.sh BINARY LINK MIB
set -u
B=$1; link=$2; mib=$3
W=$(cd "$(dirname "$0")" && pwd)/workloads/bin/dirtier
tmp=$(mktemp -d /tmp/pmig-auto.XXXXXX); prefix=au$$
cleanup() { "$B" cluster down --prefix $prefix --state-dir $tmp/state >/dev/null 2>&1; rm -rf $tmp; }
trap cleanup EXIT
"$B" cluster up --prefix $prefix --nodes 2 --link $link --state-dir $tmp/state >$tmp/up.log 2>&1 </dev/null || { cat $tmp/up.log; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' $tmp/up.log; }
x() { "$B" cluster exec --prefix $prefix --state-dir $tmp/state "$@"; }
pid=$(x n1 -- bash -c "$W --mib $mib --dirty-rate 100 --seconds 0 --report-ms 0 >$tmp/w.out 2>&1 </dev/null 251>&- & echo \$!" </dev/null 2>/dev/null)
for _ in $(seq 600); do grep -q READY $tmp/w.out 2>/dev/null && break; sleep 0.1; done
from=n1; to=n2
for i in 1 2; do
  t0=$(date +%s.%N)
  x $from -- "$B" migrate --pid $pid --to "$(addr $to):7070" --strategy auto --json >$tmp/m.json 2>$tmp/m.err </dev/null || { cat $tmp/m.err; exit 1; }
  t1=$(date +%s.%N)
  python3 -c "import json,sys; d=json.load(open('$tmp/m.json')); print('hop $i: wall %.2f s, strategy %s, total_ms %.0f, down_ms %.1f' % ($t1-$t0, d['strategy'], d['total_ms'], d['down_ms']))"
  pid=$(python3 -c "import json; print(json.load(open('$tmp/m.json'))['new_pid'])")
  t=$from; from=$to; to=$t
done
