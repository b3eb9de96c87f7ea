#!/bin/bash
# What the push of a post-copy migration could reach on this machine at
# best: the CPU that each unavoidable step of moving MIB MiB costs, each
# measured alone (bench/push-floor.c), and the bound they set on the
# push's rate against raw TCP when both nodes share this machine's CPUs
# (BENCHMARKS.md, "What the push could reach on one machine").
#
# Steps: raw TCP between two nodes of a fresh local cluster (the limit
# itself: sender in n1, receiver in n2), process_vm_readv out of another
# process (the source's copy out of the frozen process), UFFDIO_COPY into
# registered memory (the destination's install), and AES-256-GCM with
# `openssl speed` (the cipher, once to seal and once to open; pmig's is
# ring's, this is OpenSSL's, both with the CPU's AES instructions).
# Each step's cost is the whole machine's busy CPU time over it, in
# CPU-seconds per GiB (the TCP path's softirq work is not always charged
# to the two processes).
# A push that must do every step cannot move more than (CPUs / the sum of
# the costs) GiB a second, and less when the migrated program takes CPU
# too; that rate over raw TCP's is the bound printed.
# Usage: [PMIG=BINARY] bench/push-floor.sh [MIB [REPS]]   (default 1024 3)
set -u
cd "$(dirname "$0")/.."
B=${PMIG:-target/release/pmig}
[ -x "$B" ] || { echo "build first: make build" >&2; exit 2; }
mib=${1:-1024}; reps=${2:-3}
tmp=$(mktemp -d "${STATE_ROOT:-/tmp}/pmig-floor.XXXXXX")
prefix=pf$$
rpid=
cleanup() {
    [ -n "$rpid" ] && kill "$rpid" 2>/dev/null
    "$B" cluster down --prefix "$prefix" --state-dir "$tmp/state" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
cc -O2 -o "$tmp/push-floor" bench/push-floor.c || exit 1
F=$tmp/push-floor
"$B" cluster up --prefix "$prefix" --nodes 2 --link unlimited --state-dir "$tmp/state" \
    >"$tmp/up.log" 2>&1 </dev/null || { cat "$tmp/up.log"; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$tmp/up.log"; }
x() { "$B" cluster exec --prefix "$prefix" --state-dir "$tmp/state" "$@"; }
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
hz=$(getconf CLK_TCK)
ncpu=$(nproc)
gib=$(awk -v m="$mib" 'BEGIN{print m/1024}')
# Machine CPU-seconds per GiB of a command that moves MIB MiB.
per_gib() { awk -v t="$1" -v hz="$hz" -v g="$gib" 'BEGIN{printf "%.3f", t/hz/g}'; }

echo "machine: $ncpu CPUs, $(uname -r), $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
port=7199
for r in $(seq "$reps"); do
    # raw TCP: n1 -> n2, the same path as a migration's connection.
    port=$((port + 1))
    x n2 -- "$F" recv "$port" >"$tmp/recv.out" 2>&1 </dev/null &
    rpid=$!
    ok=
    for _ in $(seq 100); do
        grep -q listening "$tmp/recv.out" 2>/dev/null && { ok=1; break; }
        sleep 0.05
    done
    [ -n "$ok" ] || { echo "receiver did not start: $(cat "$tmp/recv.out")" >&2; exit 1; }
    b0=$(busy_ticks)
    x n1 -- "$F" send "$(addr n2)" "$port" "$mib" >"$tmp/send.out" </dev/null || exit 1
    wait "$rpid"; rpid=
    b1=$(busy_ticks)
    tcp=$(per_gib $((b1 - b0)))
    tcp_gbps=$(sed -n 's/.*gbps=\([0-9.]*\).*/\1/p' "$tmp/send.out")
    # The copy out of another process, and the install, 1 MiB at a time.
    b0=$(busy_ticks); "$F" pvm "$mib" 1024 >"$tmp/pvm.out" || exit 1; b1=$(busy_ticks)
    pvm=$(sed -n 's/.*cpu_s_per_gib=\([0-9.]*\).*/\1/p' "$tmp/pvm.out")
    b0=$(busy_ticks); "$F" uffd "$mib" 1024 >"$tmp/uffd.out" || exit 1; b1=$(busy_ticks)
    uffd=$(sed -n 's/.*cpu_s_per_gib=\([0-9.]*\).*/\1/p' "$tmp/uffd.out")
    # AES-256-GCM on 16 KiB blocks: bytes per second of one CPU.
    aes=$(openssl speed -evp aes-256-gcm -bytes 16384 -seconds 2 2>/dev/null |
        awk 'tolower($1) == "aes-256-gcm" {v=$NF; sub(/k$/, "", v); printf "%.3f", 2 * 1073741824 / (v * 1000)}')
    [ -n "$aes" ] || aes=nan
    awk -v r="$r" -v n="$ncpu" -v tcp="$tcp" -v g="$tcp_gbps" -v pvm="$pvm" -v uffd="$uffd" -v aes="$aes" 'BEGIN{
        gibs = g * 1e9 / 1073741824; plain = tcp + pvm + uffd; sealed = plain + (aes == "nan" ? 0 : aes);
        printf "rep %d: raw TCP %.2f GB/s using %.2f of %d CPUs, %.3f cpu-s/GiB; process_vm_readv %.3f; UFFDIO_COPY %.3f; AES-GCM seal+open %s\n", r, g, tcp * gibs, n, tcp, pvm, uffd, aes;
        printf "rep %d: floor %.3f cpu-s/GiB unencrypted, %.3f encrypted: at best %.2f and %.2f of raw TCP\n", r, plain, sealed, n / plain / gibs, n / sealed / gibs }'
done
