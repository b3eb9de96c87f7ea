# Sourced by bench/stop-timeline.sh and bench/no-peer-list.sh (from the
# repository's root). start_dirtier FLAGS: starts the dirtier ($W) of $mib
# MiB on n1 through their `x`, with FLAGS added, its output in $tmp/w.out
# ($out); waits for its READY, then a second more, and sets $pid.
start_dirtier() {
    out="$tmp/w.out"
    pid=$(x n1 -- bash -c "$W --mib $mib $1 --seconds 0 --report-ms 0 >$out 2>&1 </dev/null 251>&- & echo \$!" \
        </dev/null 2>/dev/null)
    for _ in $(seq 600); do grep -q READY "$out" 2>/dev/null && break; sleep 0.1; done
    grep -q READY "$out" || { echo "the dirtier did not start" >&2; exit 1; }
    sleep 1
}
