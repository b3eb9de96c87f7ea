#!/usr/bin/env bash
# make demo: a running program is captured, killed, and brought back; it
# carries on from where it was, with its memory, threads and open files.
set -euo pipefail
cd "$(dirname "$0")/.."
# Whatever the caller left open (a CI's or a job server's pipes) must not
# end up in the demo's process: pmig would rightly refuse a stray pipe.
for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
PMIG=${PMIG:-target/release/pmig}
work=$(mktemp -d /tmp/pmig-demo.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "pmig check: does this kernel have what the engine needs?"
"$PMIG" check

cat > "$work/counter.py" <<'PY'
import hashlib, threading, time, sys
# Two threads fold numbers into a running hash and log to a file; the main
# thread holds 64 MiB of data whose digest is checked at the end.
data = bytearray(hashlib.sha256(str(i).encode()).digest()[0] for i in range(64 << 20))
want = hashlib.sha256(data).hexdigest()
out = open(sys.argv[1], "a", buffering=1)
state = {"n": 0}
lock = threading.Lock()
def work(tag):
    for _ in range(40):
        with lock:
            state["n"] += 1
            out.write(f"{tag} step {state['n']}\n")
        time.sleep(0.05)
ts = [threading.Thread(target=work, args=(t,)) for t in ("A", "B")]
[t.start() for t in ts]
[t.join() for t in ts]
ok = hashlib.sha256(data).hexdigest() == want
out.write(f"done: {state['n']} steps, 64 MiB intact: {ok}\n")
sys.exit(0 if ok and state["n"] == 80 else 1)
PY

say "start a python program (2 threads, 64 MiB of data, logging to a file)"
python3 "$work/counter.py" "$work/log.txt" </dev/null >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "step 10" "$work/log.txt" 2>/dev/null && break; sleep 0.05; done
echo "pid $pid, log so far: $(wc -l < "$work/log.txt") lines"

say "pmig dump: freeze every thread, write the image, verify it, kill the process"
"$PMIG" dump --pid "$pid" --dir "$work/img"
wait "$pid" 2>/dev/null || true
orig=$pid; pid=
ls -l "$work/img"
echo "log at the dump: $(wc -l < "$work/log.txt") lines; process $orig is gone: $(kill -0 $orig 2>/dev/null && echo no || echo yes)"

say "pmig restore: the same process comes back and finishes its work"
"$PMIG" restore --dir "$work/img" --report
echo "exit status 0; last log lines:"
tail -3 "$work/log.txt"
grep -q "done: 80 steps, 64 MiB intact: True" "$work/log.txt" && say "the restored program finished correctly"
