#!/bin/bash
# What a restore under new thread ids costs (BENCHMARKS.md, "A restore under
# new ids"): a dirtier of MIB MiB is dumped with --leave-running into a
# tmpfs image, then restored N times next to its still running original
# (whose ids the copies cannot have), each copy killed after. Prints, from
# each restore's timing marks, the image's verification and decoding, and
# the step that rewrites the ids (finish threads), in ms.
# Usage: [PMIG=BINARY] bench/restore-new-ids.sh [MIB [N]]   (default 1024 3)
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
W=bench/workloads/bin/dirtier
[ -x "$B" ] && [ -x "$W" ] || { echo "build first: make build && make -C bench/workloads" >&2; exit 2; }
mib=${1:-1024}; n=${2:-3}
img=$(mktemp -d /dev/shm/pmig-newids.XXXXXX)
orig=
cleanup() { [ -n "$orig" ] && kill -9 "$orig" 2>/dev/null; rm -rf "$img"; }
trap cleanup EXIT
(exec "$W" --mib "$mib" --dirty-rate 1000 --seconds 0 --report-ms 0 >/dev/null 2>&1 </dev/null 251>&-) &
orig=$!
sleep $((mib / 256 + 2))
"$B" dump --pid "$orig" --dir "$img" --leave-running >/dev/null || exit 1
for _ in $(seq "$n"); do
    PMIG_LOG=debug "$B" restore --dir "$img" --detach --pidfile "$img.pid" </dev/null 2>&1 \
        | grep "pmig_timing\|new ids written" | awk '{print $3, $4, $5, $6, $7}' >"$img.marks"
    awk 'NR==1{t0=$1} /verified/{v=$1} /finish memory/{fm=$1} /finish threads/{ft=$1} /new ids/{n="new ids"}
         END{printf "verify+decode %.0f ms, finish threads %.1f ms %s\n", (v-t0)/1e6, (ft-fm)/1e6, n}' "$img.marks"
    kill -9 "$(cat "$img.pid")" 2>/dev/null
    rm -f "$img.pid" "$img.marks"
    sleep 0.5
done
