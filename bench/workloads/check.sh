#!/usr/bin/env bash
# Quick self-test of the workloads (run by `make check`).
#  1. each case runs twice in --iterations mode: both must print READY and
#     DONE ... verify=ok, exit 0, and give the same DONE line once the timing
#     fields (elapsed_ms, max_pause_ms, max_pause_us) are removed;
#  2. with --inject-fault every workload must detect the corruption
#     (verify=FAIL, exit 1);
#  3. --seconds mode prints TICK lines; SIGTERM ends a --seconds 0 run
#     cleanly with a verified DONE line; another --seed changes the checksum.
set -u
BIN=${1:-bin}
fail=0
pass=0

strip_timing() {
    sed -E 's/ (elapsed_ms|max_pause_ms|max_pause_us)=[0-9]+//g'
}

run() { # prints stdout; returns exit status
    "$BIN/$1" "${@:2}" 2>/dev/null
}

bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
ok() { pass=$((pass + 1)); }

check_twice() {
    local name=$1; shift
    local out1 out2 rc1 rc2 d1 d2
    out1=$(run "$name" --report-ms 0 "$@"); rc1=$?
    out2=$(run "$name" --report-ms 0 "$@"); rc2=$?
    d1=$(grep '^DONE ' <<<"$out1" | strip_timing)
    d2=$(grep '^DONE ' <<<"$out2" | strip_timing)
    if [[ $rc1 -ne 0 || $rc2 -ne 0 ]]; then bad "$name $*: exit $rc1/$rc2: $d1"; return; fi
    if ! grep -qE '^READY pid=[0-9]+ rss_kib=[0-9]+$' <<<"$out1"; then bad "$name $*: no READY line"; return; fi
    if [[ "$d1" != *" verify=ok"* ]]; then bad "$name $*: $d1"; return; fi
    if [[ "$d1" != "$d2" ]]; then bad "$name $*: runs differ: '$d1' vs '$d2'"; return; fi
    local want
    want=$(sed -nE 's/.*--iterations ([0-9]+).*/\1/p' <<<" $* ")
    if [[ -n "$want" && "$d1" != "DONE iter=$want "* ]]; then bad "$name $*: iteration count: $d1"; return; fi
    printf '  ok  %-13s %-45s %s\n' "$name" "$*" "$(grep -oE 'checksum=[0-9a-f]+' <<<"$d1")"
    ok
}

check_inject() {
    local name=$1; shift
    local out rc
    out=$(run "$name" --report-ms 0 --inject-fault "$@"); rc=$?
    if [[ $rc -ne 1 || "$out" != *"verify=FAIL"* ]]; then
        bad "$name --inject-fault $*: not detected (exit $rc): $(grep '^DONE' <<<"$out")"
    else
        printf '  ok  %-13s detects --inject-fault: %s\n' "$name" "$(grep -oE 'reason=.*' <<<"$out")"
        ok
    fi
}

echo "== deterministic runs (each twice)"
check_twice getpid       --iterations 200000
check_twice rma          --mib 4 --iterations 300000
check_twice rma          --mib 2 --dirty-rate 20000 --iterations 2000
check_twice reference    --iterations 300
check_twice reference    --kib 300 --iterations 50 --seed 7
check_twice dirtier      --mib 4 --dirty-rate 20000 --iterations 2000
check_twice dirtier      --mib 8 --hot-mib 1 --dirty-rate 0 --iterations 20000
check_twice stream       --mib 8 --iterations 10
check_twice stream       --mib 1 --iterations 0
check_twice dgemm        --mib 4 --iterations 15
check_twice dgemm        --mib 4 --iterations 40
check_twice dgemm_sparse --mib 16 --work-mib 2 --iterations 10
check_twice dgemm_sparse --mib 8 --work-mib 2 --cold-untouched --iterations 5
check_twice randomaccess --mib 8 --iterations 500
check_twice fft          --mib 4 --iterations 4
check_twice fft          --mib 4 --iterations 5

echo "== fault injection must be detected"
check_inject getpid       --iterations 1000
check_inject rma          --mib 2 --iterations 10000
check_inject reference    --iterations 10
check_inject dirtier      --mib 2 --dirty-rate 0 --iterations 1000
check_inject dirtier      --mib 8 --hot-mib 1 --dirty-rate 0 --iterations 1000
check_inject stream       --mib 4 --iterations 3
check_inject dgemm        --mib 4 --iterations 40
check_inject dgemm_sparse --mib 16 --work-mib 2 --iterations 10
check_inject randomaccess --mib 4 --iterations 100
check_inject fft          --mib 4 --iterations 3

echo "== --seconds mode, TICK lines, SIGTERM, seeds"
out=$(run dirtier --mib 4 --seconds 0.45 --report-ms 100); rc=$?
ticks=$(grep -cE '^TICK t_ms=[0-9]+ iter=[0-9]+ max_pause_ms=[0-9]+ max_pause_us=[0-9]+$' <<<"$out")
if [[ $rc -eq 0 && $ticks -ge 3 && "$out" == *"verify=ok"* ]]; then
    echo "  ok  dirtier --seconds 0.45: $ticks TICK lines"; ok
else
    bad "dirtier --seconds 0.45: exit $rc, $ticks TICK lines"
fi
tmp=$(mktemp)
"$BIN/rma" --mib 4 --seconds 0 --report-ms 100 >"$tmp" 2>/dev/null &
pid=$!
sleep 0.4
kill -TERM "$pid"
wait "$pid"; rc=$?
if [[ $rc -eq 0 ]] && grep -q '^DONE .* verify=ok' "$tmp"; then
    echo "  ok  rma --seconds 0 stopped by SIGTERM: $(grep -oE '^DONE iter=[0-9]+' "$tmp")"; ok
else
    bad "rma --seconds 0 + SIGTERM: exit $rc: $(cat "$tmp")"
fi
rm -f "$tmp"
c1=$(run stream --mib 1 --iterations 2 --seed 1 --report-ms 0 | grep -oE 'checksum=[0-9a-f]+')
c2=$(run stream --mib 1 --iterations 2 --seed 2 --report-ms 0 | grep -oE 'checksum=[0-9a-f]+')
if [[ -n "$c1" && "$c1" != "$c2" ]]; then echo "  ok  --seed changes the checksum"; ok; else bad "--seed: $c1 vs $c2"; fi

echo "== $pass passed, $fail failed"
[[ $fail -eq 0 ]]
