#!/bin/bash
# The live-migration issue's pre-copy target (BENCHMARKS.md): a 1 GiB dirtier
# that keeps rewriting a 16 MiB hot set, moved n1 -> n2 with pre-copy over a
# 1 Gbit link of a fresh 2-node local cluster; three runs per dirty rate.
# Usage: bench/precopy-target.sh [RATES...]   (default: 1000 10000)
# MIGRATE_ARGS (environment) goes to pmig migrate, e.g. "--max-down-ms 10";
# PMIG (environment) is the binary [default: target/release/pmig].
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
W=bench/workloads/bin/dirtier
[ -x "$B" ] && [ -x "$W" ] || { echo "build first: make build && make -C bench/workloads" >&2; exit 2; }
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1000 10000)
tmp=$(mktemp -d /tmp/pmig-precopy.XXXXXX)
prefix=pt$$
cleanup() {
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
"$B" cluster up --prefix "$prefix" --nodes 2 --link 1gbit --state-dir "$tmp/state" \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
n2=$(awk '$1=="n2"{print $2}' "$tmp/up.log")
for rate in "${rates[@]}"; do
    for rep in 1 2 3; do
        out="$tmp/w-$rate-$rep.out"
        pid=$("$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" n1 -- bash -c \
            "$W --mib 1024 --hot-mib 16 --dirty-rate $rate --seconds 0 --report-ms 0 >$out 2>&1 </dev/null 251>&- & echo \$!" \
            </dev/null 2>/dev/null)
        for _ in $(seq 300); do grep -q READY "$out" 2>/dev/null && break; sleep 0.1; done
        sleep 1
        "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" n1 -- \
            "$B" migrate --pid "$pid" --to "$n2:7070" --strategy pre-copy --json ${MIGRATE_ARGS:-} \
            </dev/null >"$tmp/m.json" 2>&1
        python3 - "$tmp/m.json" "$rate" "$rep" "$out" <<'EOF'
import json, sys, re
path, rate, rep, out = sys.argv[1:]
try:
    r = json.load(open(path))
except ValueError:
    print(f"rate {rate} run {rep}: failed: {open(path).read().strip()}")
    sys.exit(0)
rss = int(re.search(r"rss_kib=(\d+)", open(out).read()).group(1)) * 1024
print(f"rate {rate} run {rep}: down_ms {r['down_ms']:.1f} preparation_ms {r['preparation_ms']:.1f} "
      f"rounds {r['rounds']} at the stop {r['bytes_per_phase']['down'] / 1e6:.2f} MB sent/RSS {r['bytes_total'] / rss:.3f}")
EOF
        np=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('new_pid',''))" "$tmp/m.json" 2>/dev/null)
        [ -n "$np" ] && kill "$np" 2>/dev/null
        kill "$pid" 2>/dev/null
        sleep 1
    done
done
