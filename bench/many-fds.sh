#!/bin/bash
# The down time of a process holding many open files (BENCHMARKS.md, "A
# process with many open files"): a fresh 2-node local cluster (unlimited
# link), bench/workloads/manyfds.py holding N files open, moved HOPS times
# back and forth with STRATEGY (default post-copy); prints each move's
# down_ms (or pmig's error). Its files are left in /tmp/pmig-manyfds.PID,
# removed at the end.
# Usage: [PMIG=BINARY] [S=STRATEGY] bench/many-fds.sh N HOPS
set -u
cd "$(dirname "$0")/.."
B=$(realpath "${PMIG:-target/release/pmig}")
N=${1:?N}; H=${2:?HOPS}
prefix=mf$$; state=$(mktemp -d /tmp/pmig-mf.XXXXXX)
X="$B cluster exec --prefix $prefix --state-dir $state"
cleanup() {
    pkill -f "manyfds.py $N\$" 2>/dev/null
    sleep 0.3
    "$B" cluster down --prefix "$prefix" --state-dir "$state" >/dev/null 2>&1
    rm -rf "$state" /tmp/pmig-manyfds.*
}
trap cleanup EXIT
"$B" cluster up --nodes 2 --prefix "$prefix" --state-dir "$state" >/dev/null 2>&1 || { echo "cluster up failed" >&2; exit 1; }
($X n1 -- python3 "$PWD/bench/workloads/manyfds.py" "$N" >/dev/null 2>&1 </dev/null &)
# Bounded: until it holds its files.
for _ in $(seq 100); do
    pid=$(pgrep -f "manyfds.py $N\$" | tail -1)
    [ -n "$pid" ] && [ "$(ls /proc/"$pid"/fd 2>/dev/null | wc -l)" -ge "$N" ] && break
    sleep 0.1
done
from=n1; to=n2
for _ in $(seq "$H"); do
    pid=$(pgrep -f "manyfds.py $N\$" | tail -1)
    $X $from -- "$B" migrate --pid "$pid" --to $to --strategy "${S:-post-copy}" --json 2>&1 |
        grep -o '"down_ms":[0-9.]*\|pmig:.*'
    sleep 0.5
    t=$from; from=$to; to=$t
done
