#!/bin/bash
# Moves any program around a fresh 3-node local cluster and checks its
# output against an unmigrated run (BENCHMARKS.md, "Post-copy: private file
# copies before the stop").
# Usage: [PMIG=BINARY] [LINK=unlimited] [WARM=SECONDS] bench/hops.sh STRATEGY CMD [ARGS...]
# The program starts on n1 with its output to a file, runs WARM seconds
# (default 1), then moves n1 -> n2 -> n3 -> n1; each hop prints its down_ms,
# its post_ms, the bytes per phase, the faults that waited for a page and
# how long (lazy strategies), the program's RssAnon before the hop and
# once it returned, and the program's output is compared with that of
# the same command run unmigrated (before the cluster comes up). With
# TIMELINE=DIR, the daemons' timing marks of each hop are written to
# DIR/hop-NODE.txt (ms from the first mark). With PIDNS=1 every node has its
# own pid namespace (`cluster up --pid-ns`), as separate machines have: the
# program keeps its pid and thread ids. With NO_PEERS=1 no daemon has a
# `--peer` list (`cluster up --no-peer-list`), as daemons started by hand
# may not. With PIDFILE=F the pid moved is the
# one the command writes to the file F of its directory (a process inside a
# pipeline, or under a parent), and the output is compared AFTER seconds
# (default 2) after that process ends, once the rest of the pipeline has.
# With KEEP=DIR, a run whose output differs, or one of whose hops failed,
# leaves the daemons' state directories (their logs) and the program's
# stderr in DIR. With DAEMON_ARGS="ARG …", every daemon gets those
# arguments too (`--compress always`). A program still
# running LIMIT_S seconds after its last hop (default 600) counts as hung.
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
[ -x "$B" ] || { echo "build first: make build" >&2; exit 2; }
[ $# -ge 2 ] || { echo "usage: $0 STRATEGY CMD [ARGS...]" >&2; exit 2; }
strategy=$1; shift
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-hops.XXXXXX")
prefix=hp$$
pid=
# Each thread's state, kernel wait channel and system call: what a program
# that does not end is doing, before the cleanup kills it.
show_threads() {
    grep -E "^(State|TracerPid):" "/proc/$pid/status" 2>/dev/null
    for t in /proc/"$pid"/task/*; do
        echo "  thread ${t##*/}: $(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null) syscall $(cat "$t/syscall" 2>/dev/null)"
    done
}
# Whether the program runs (in its node's pid namespace with PIDNS=1).
alive() {
    if [ -n "${PIDNS:-}" ]; then
        x "$from" -- kill -0 "$pid" 2>/dev/null </dev/null
    else
        kill -0 "$pid" 2>/dev/null
    fi
}
cleanup() {
    if [ -z "${PIDNS:-}" ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "process $pid still runs at exit:" >&2
        show_threads >&2
        kill -9 "$pid" 2>/dev/null
    fi
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
# With KEEP=DIR, what the daemons and the program said is kept there (a run
# whose output differs, or whose hop failed).
keep() {
    [ -n "${KEEP:-}" ] || return 0
    mkdir -p "$KEEP"
    cp -r "$tmp/state" "$tmp/err" "$tmp/out" "$KEEP/" 2>/dev/null
    echo "  logs kept in $KEEP"
}
printf '%q ' "$@" >"$tmp/cmd"
# The reference: the same command, unmigrated.
(cd "$tmp" && bash -c "$(cat "$tmp/cmd")" >"$tmp/ref" 2>/dev/null </dev/null)
ref_status=$?
# A command that could not even start (not found, not executable): its
# empty output would "equal" an empty output of the migrated run.
if [ "$ref_status" = 126 ] || [ "$ref_status" = 127 ]; then
    echo "the unmigrated run could not start its command (exit $ref_status): nothing to compare"
    exit 3
fi
[ -n "${TIMELINE:-}" ] && { mkdir -p "$TIMELINE"; export PMIG_LOG=info,pmig_timing=debug; }
[ -n "${PIDFILE:-}" ] && rm -f "$tmp/$PIDFILE"
daemon_args=()
for a in ${DAEMON_ARGS:-}; do daemon_args+=("--daemon-arg=$a"); done
"$B" cluster up --prefix "$prefix" --nodes 3 --link "${LINK:-unlimited}" --state-dir "$tmp/state" \
    ${PIDNS:+--pid-ns} ${NO_PEERS:+--no-peer-list} "${daemon_args[@]}" >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
pid=$(x n1 -- bash -c "cd $tmp; $(cat "$tmp/cmd") >$tmp/out 2>$tmp/err </dev/null 251>&- & echo \$!" \
    </dev/null 2>/dev/null)
if [ -n "${PIDFILE:-}" ]; then
    for _ in $(seq 100); do [ -s "$tmp/$PIDFILE" ] && break; sleep 0.05; done
    [ -s "$tmp/$PIDFILE" ] || { echo "the command wrote no pid to $PIDFILE"; exit 1; }
    pid=$(cat "$tmp/$PIDFILE")
fi
sleep "${WARM:-1}"
from=n1
status=0
# The program's resident anonymous memory on NODE, in KiB (RssAnon; the
# kernel's zero page is not counted).
rss_anon() { x "$1" -- awk '/^RssAnon:/{print $2}' "/proc/$pid/status" </dev/null 2>/dev/null; }
for to in n2 n3 n1; do
    rss_before=$(rss_anon "$from")
    x "$from" -- "$B" migrate --pid "$pid" --to "$(addr $to):7070" --strategy "$strategy" --json \
        >"$tmp/m.json" 2>"$tmp/m.err" </dev/null || { echo "$from -> $to: $(cat "$tmp/m.err")"; status=1; keep; break; }
    python3 - "$tmp/m.json" "$from" "$to" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b = d["bytes_per_phase"]
k = d.get("skeleton")
sk = "" if not k else ("  skeleton" if k.get("used") else f"  no skeleton ({k.get('why_not')})")
notes = d.get("notes", [])
# The note on new ids (every hop of a cluster without PIDNS=1) as a word.
ids = [n for n in notes if "under new ids" in n]
if ids:
    sk += f"  new ids (pid {d['new_pid']})"
fw = d.get("fault_waits")
if fw and sum(fw["counts"]):
    sk += f"  {sum(fw['counts'])} faults waited {fw['mean_ms']:.2f} ms mean, {fw['max_ms']:.1f} max"
if d.get("pages_as_changes"):
    sk += f"  {d['pages_as_changes']} pages as their changes"
print(f"{sys.argv[2]} -> {sys.argv[3]}: down_ms {d['down_ms']:.1f}  post_ms {d['post_ms']:.0f}  bytes before/at/after the stop "
      f"{b['preparation']}/{b['down']}/{b['post']}{sk}")
for n in notes:
    if n not in ids:
        print(f"  note: {n}")
PY
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$tmp/m.json")
    rss_after=$(rss_anon "$to")
    echo "  RssAnon ${rss_before:-?} KiB before, ${rss_after:-?} KiB after"
    if [ -n "${TIMELINE:-}" ]; then
        grep -ah pmig_timing "$tmp"/state/*/daemon.log | grep -av "pmig restore: pmig\|INFO" \
            | sed 's/.*pmig_timing: //' | sort -n \
            | awk 'NR==1{t0=$1} {t=$1; $1=""; printf "%8.2f %s\n", (t-t0)/1e6, $0}' >"$TIMELINE/hop-$to.txt"
        for f in "$tmp"/state/*/daemon.log; do : >"$f"; done
    fi
    from=$to
    sleep 0.3
done
# Bounded: at most LIMIT_S seconds (10 minutes) for the program to finish.
for _ in $(seq $((${LIMIT_S:-600} * 10))); do alive || break; sleep 0.1; done
if alive; then
    echo "the program is still running after ${LIMIT_S:-600} s"
    exit 1
fi
pid=
[ -n "${PIDFILE:-}" ] && sleep "${AFTER:-2}"
if cmp -s "$tmp/out" "$tmp/ref"; then
    echo "output equals the unmigrated run's ($(wc -c <"$tmp/out") bytes)"
else
    echo "OUTPUT DIFFERS from the unmigrated run:"; diff "$tmp/ref" "$tmp/out" | head -5; status=1
    keep
fi
exit $status
