#!/bin/bash
# pmake benchmark (BENCHMARKS.md, "Parallel make on idle hosts"): Lua 5.4's C
# sources (from the lua-src crate in the cargo registry) built with our test
# Makefile inside n1 of a fresh 3-node local cluster, plain `make -jN` against
# `pmig make -jN`, interleaved, REPS times each, and a third build, plain make with
# every recipe in a new session (`setsid -w`), as pmig's remote jobs are: with the
# kernel's autogroup scheduling each session is one scheduling group, so on a machine
# shared with other work a build whose recipes run in many sessions gets more of the
# CPU than one whose recipes share the caller's session. Then the cost of one recipe:
# `/bin/sh -c true`, `pmig sh --local -c true` and `pmig sh -c true` (on an idle
# node), 100 each. Prints medians (seconds for builds, ms per recipe). As root,
# after `cargo build --release --workspace` (and `cargo fetch`).
#
#   bench/pmake.sh [REPS] [JOBS...]      e.g. bench/pmake.sh 5 3 4
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PMIG=$ROOT/target/release/pmig
REPS=${1:-5}
shift || true
JOBS=${*:-"3 4"}
PREFIX=pkb$$
STATE=$(mktemp -d /tmp/pmig-pmake-bench.XXXXXX)
SRC=$(cargo metadata --format-version 1 --offline --manifest-path crates/pmig-daemon/Cargo.toml |
  python3 -c 'import json,sys,os,glob
m=json.load(sys.stdin)
d=os.path.dirname([p for p in m["packages"] if p["name"]=="lua-src"][0]["manifest_path"])
print(sorted(glob.glob(d+"/lua-5.4.*"), key=lambda p: int(p.rsplit(".",1)[1]))[-1])')
MK=$ROOT/crates/pmig-daemon/tests/pmake/Makefile
cleanup() { "$PMIG" cluster down --prefix "$PREFIX" --state-dir "$STATE/cluster" >/dev/null 2>&1 || true; rm -rf "$STATE"; }
trap cleanup EXIT
"$PMIG" cluster up --nodes 3 --prefix "$PREFIX" --state-dir "$STATE/cluster" \
  --daemon-arg=--report-interval-ms=250 --daemon-arg=--load-tau-secs=2 \
  --daemon-arg=--idle-load=3 --daemon-arg=--idle-owner-secs=3 >/dev/null
X=("$PMIG" cluster exec --prefix "$PREFIX" --state-dir "$STATE/cluster" n1 --)
# Until n2 and n3 are idle (bounded).
for _ in $(seq 300); do
  n=$("${X[@]}" "$PMIG" hosts status --json 2>/dev/null | grep -c '"state": "idle"' || true)
  [ "$n" -ge 3 ] && break
  sleep 0.2
done
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "lua sources: $SRC; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A T
for r in $(seq "$REPS"); do
  for j in $JOBS; do
    for how in plain setsid pmig; do
      d=$STATE/$how; rm -rf "$d"; mkdir -p "$d"; cd "$d"
      t0=$(now)
      if [ $how = plain ]; then
        "${X[@]}" make -s "-j$j" -f "$MK" "SRC=$SRC"
      elif [ $how = setsid ]; then
        "${X[@]}" make -s "-j$j" -f "$MK" "SRC=$SRC" SHELL=/usr/bin/setsid ".SHELLFLAGS=-w /bin/sh -ec"
      else
        "${X[@]}" "$PMIG" make -j "$j" -- -s -f "$MK" "SRC=$SRC" 2>"$STATE/err"
        echo "  rep $r: $(tail -1 "$STATE/err")" >&2
      fi
      t1=$(now)
      [ "$(./lua -e 'print(6*7)')" = 42 ] || { echo "the $how build's lua is broken"; exit 1; }
      T[$how-$j]+="$(echo "$t1 - $t0" | bc) "
      cd "$ROOT"
      sleep 4 # let n2 and n3 become idle again (load tau 2 s)
    done
  done
done
echo "| jobs | plain make (s) | plain make, a session per recipe (s) | pmig make (s) | runs: plain | runs: sessions | runs: pmig |"
echo "|---:|---:|---:|---:|---|---|---|"
for j in $JOBS; do
  m() { echo "${T[$1-$j]}" | tr ' ' '\n' | grep . | median | awk '{printf "%.2f", $1}'; }
  r() { echo "${T[$1-$j]}" | tr ' ' '\n' | grep . | awk '{printf "%.1f ", $1}'; }
  echo "| $j | $(m plain) | $(m setsid) | $(m pmig) | $(r plain)| $(r setsid)| $(r pmig)|"
done
echo "(medians of $REPS)"
# One recipe's cost, as make pays it.
per() {
  local xs=""
  for _ in $(seq 100); do
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    xs+="$(( (t1 - t0) / 1000 )) "
  done
  echo "$xs" | tr ' ' '\n' | grep . | median | awk '{printf "%.2f", $1/1000}'
}
cat >"$STATE/per.sh" <<EOF
#!/bin/bash
$(declare -f median per)
echo "| /bin/sh -c true | \$(per /bin/sh -c true) |"
echo "| pmig sh --local -c true | \$(per $PMIG sh --local -c true) |"
echo "| pmig sh -c true (asks the selector for an idle node each time) | \$(per $PMIG sh -c true) |"
mkdir -p \$(dirname \$0)/pool && touch \$(dirname \$0)/pool/n2
echo "| pmig sh -c true (a host of the pmig make pool, as --on n2) | \$(PMIG_MAKE_HOSTS=\$(dirname \$0)/pool per $PMIG sh -c true) |"
EOF
chmod +x "$STATE/per.sh"
echo
echo "| one recipe | median ms of 100 |"
echo "|---|---:|"
"${X[@]}" "$STATE/per.sh"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
