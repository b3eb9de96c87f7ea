#!/bin/bash
# Moves one scenario program (tests/scenarios, built by `cargo build
# --release -p pmig-tests --tests`) back and forth between two nodes of a
# fresh local cluster N times, asking it to check its state after each hop,
# and stops at the first failure (BENCHMARKS.md, "File locks move with the
# process"). Prints one line per hop.
# Usage: [PMIG=BINARY] [SCN=locks] [S=stop-copy] [N=20] bench/scenario-hops.sh
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
scn=${SCN:-locks}
BIN=$(ls -t target/release/build/pmig-tests-*/out/scenarios/"$scn" 2>/dev/null | head -1)
[ -x "$B" ] && [ -n "$BIN" ] || { echo "build first: cargo build --release -p pmig-tests --tests" >&2; exit 2; }
BIN=$PWD/$BIN
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-shops.XXXXXX")
prefix=sh$$
pid=
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
"$B" cluster up --prefix "$prefix" --nodes 2 --state-dir "$tmp/state" >"$tmp/up.log" 2>&1 </dev/null \
    || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
: >"$tmp/cmds"
mkdir -p "$tmp/work"
# The scenario follows its command file (a regular file) like `tail -f`.
pid=$(x n1 -- bash -c "cd $tmp/work; $BIN <$tmp/cmds >$tmp/out 2>&1 251>&- & echo \$!" </dev/null 2>/dev/null)
for _ in $(seq 500); do grep -q READY "$tmp/out" 2>/dev/null && break; sleep 0.01; done
from=n1 to=n2 status=0
for i in $(seq "${N:-20}"); do
    if ! x "$from" -- "$B" migrate --pid "$pid" --to "$(addr "$to"):7070" --strategy "${S:-stop-copy}" \
        --json >"$tmp/m.json" 2>"$tmp/m.err" </dev/null; then
        echo "hop $i $from->$to failed: $(cat "$tmp/m.err")"; status=1; break
    fi
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json")
    echo check >>"$tmp/cmds"
    for _ in $(seq 500); do [ "$(grep -c '^PASS\|^FAIL' "$tmp/out")" -ge "$i" ] && break; sleep 0.01; done
    last=$(grep '^PASS\|^FAIL' "$tmp/out" | sed -n "${i}p")
    echo "hop $i $from->$to: ${last:-no answer}"
    case "$last" in PASS*) ;; *) status=1; break ;; esac
    t=$from from=$to to=$t
done
exit $status
