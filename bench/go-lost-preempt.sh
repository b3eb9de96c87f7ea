#!/bin/bash
# A Go program whose preemption signal was lost, restored under new ids
# (BENCHMARKS.md, "A Go program's lost preemption signal").
#
# The Go runtime sends a thread no second preemption signal (SIGURG) until
# the thread has handled the first (its m's signalPending). One lost in a
# move (sent with the old ids by a thread frozen between reading them and
# the send) leaves the flag set for good: a goroutine that loops without
# calls on that thread then holds up every garbage collection.
#
# This reproduces that state on purpose. It runs tests/go/preempt (built
# here, with its symbols: the two offsets are read from its code), sets
# signalPending on every m through /proc/PID/mem (gdb gives each thread's
# thread pointer, which leads to its g, then its m), checks that the program
# stops making rounds, then dumps it with --leave-running and restores the
# image next to the stopped original (so the copy gets new ids). It prints
# the rounds of the original and of the copy over a few seconds: a copy
# that makes rounds again was un-stuck by its restore.
# Usage: [PMIG=BINARY] bench/go-lost-preempt.sh
set -u
cd "$(dirname "$0")/.."
B=$(realpath "${PMIG:-target/release/pmig}")
for t in go gdb python3; do
    command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 2; }
done
[ -x "$B" ] || { echo "build first: make build" >&2; exit 2; }
tmp=$(mktemp -d /tmp/pmig-golost.XXXXXX)
orig=
copy=
cleanup() {
    [ -n "$orig" ] && kill -9 "$orig" 2>/dev/null
    [ -n "$copy" ] && kill -9 "$copy" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
(cd tests/go/preempt && CGO_ENABLED=0 go build -o "$tmp/preempt" .) || exit 1
# m.signalPending: the word doSigPreempt clears with an XCHGL; m.procid: the
# word signalM loads for tgkill.
pending=$(go tool objdump -s 'runtime.doSigPreempt$' "$tmp/preempt" |
    grep -o 'XCHGL [A-Z0-9]*, 0x[0-9a-f]*(' | tail -1 | grep -o '0x[0-9a-f]*')
procid=$(go tool objdump -s 'runtime.signalM$' "$tmp/preempt" |
    grep -o 'MOVQ 0x[0-9a-f]*(AX), AX' | head -1 | grep -o '0x[0-9a-f]*')
[ -n "$pending" ] && [ -n "$procid" ] || { echo "offsets not found in this Go's runtime" >&2; exit 1; }
echo "go: $(go version | awk '{print $3}'), m.procid at $procid, m.signalPending at $pending"
rounds() {
    local n
    n=$(grep -c '^round ' "$1" 2>/dev/null)
    echo "${n:-0}"
}
# Its output goes to a file, which the copy writes on from where the
# original stopped (the original, held up, writes nothing more).
"$tmp/preempt" 1000000 >"$tmp/out" 2>/dev/null </dev/null 251>&- &
orig=$!
for _ in $(seq 200); do [ "$(rounds "$tmp/out")" -ge 3 ] && break; sleep 0.05; done
# Each thread's thread pointer, then g (the word below it), g.m (offset 0x30),
# checked by m.procid naming the thread, then signalPending set.
gdb -batch -p "$orig" -ex 'thread apply all p/x $fs_base' 2>/dev/null |
    awk '/^Thread/ {tid=$4} /^\$/ {print tid, $3}' | tr -d ')' >"$tmp/fs"
python3 - "$orig" "$procid" "$pending" "$tmp/fs" <<'EOF' || exit 1
import struct, sys
pid, procid, pending = int(sys.argv[1]), int(sys.argv[2], 16), int(sys.argv[3], 16)
threads = [l.split() for l in open(sys.argv[4]) if l.strip()]
with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
    def q(a):
        mem.seek(a)
        return struct.unpack("<Q", mem.read(8))[0]
    n = 0
    for tid, fs in threads:
        g = q(int(fs, 16) - 8)
        m = q(g + 0x30) if g else 0
        if m and q(m + procid) == int(tid):
            mem.seek(m + pending)
            mem.write(struct.pack("<I", 1))
            n += 1
    print(f"signalPending set on {n} of {len(threads)} threads' m")
    sys.exit(0 if n else 1)
EOF
sleep 1
r0=$(rounds "$tmp/out")
sleep 2
r1=$(rounds "$tmp/out")
echo "original: round $r0, 2 s later round $r1"
[ "$r1" -gt "$((r0 + 1))" ] && { echo "the original was not held up: nothing to show" >&2; exit 1; }
"$B" dump --pid "$orig" --dir "$tmp/img" --leave-running >/dev/null || exit 1
kill -STOP "$orig"
c0=$(rounds "$tmp/out")
"$B" restore --dir "$tmp/img" --detach --pidfile "$tmp/pid" </dev/null >/dev/null || exit 1
copy=$(cat "$tmp/pid")
sleep 3
c1=$(rounds "$tmp/out")
echo "copy (pid $copy, original $orig, stopped): $((c1 - c0)) rounds in its first 3 s"
[ "$c1" -gt "$c0" ] && echo "the copy makes rounds again" || echo "the copy is held up as the original was"
