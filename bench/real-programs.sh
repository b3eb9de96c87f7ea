#!/bin/bash
# Real programs moved around a fresh 3-node cluster by every strategy (or the
# ones named), three hops each (bench/hops.sh), each output compared with an
# unmigrated run: gzip -9 of 140 MB of text, bc computing pi to 3600 digits,
# sort of 12M numbers, python3 with four hashing threads, a perl hash.
# Usage: [PMIG=BINARY] [LINK=unlimited] bench/real-programs.sh [STRATEGY...]
# Prints one line per program and strategy (down_ms of the three hops, and
# whether the output matched); the full log goes to $OUT (default
# /tmp/pmig-real-programs.log). Inputs are made once in $DATA
# (default /tmp/pmig-real-programs).
set -u
cd "$(dirname "$0")/.."
data=${DATA:-/tmp/pmig-real-programs}
out=${OUT:-/tmp/pmig-real-programs.log}
mkdir -p "$data"
if [ ! -s "$data/nums4.txt" ]; then
    python3 - "$data" <<'PY'
import random, sys
d = sys.argv[1]
random.seed(7)
words = [''.join(random.choice('abcdefghij') for _ in range(random.randint(3, 9))) for _ in range(5000)]
with open(f'{d}/big.txt', 'w') as f:
    for i in range(2_500_000):
        f.write(' '.join(random.choice(words) for _ in range(8)) + '\n')
with open(f'{d}/nums4.txt', 'w') as f:
    nums = [f"{random.randint(0, 10**12)}\n" for _ in range(3_000_000)]
    for _ in range(4):
        f.writelines(nums)
open(f'{d}/pi.bc', 'w').write("scale=3600; 4*a(1)\nquit\n")
PY
fi
strategies=${*:-post-copy ampom pre-copy stop-copy demand-paging auto flushing freeze-free assisted-post-copy queued-pre-copy}
w=bench/workloads
: >"$out"
for s in $strategies; do
    for p in "gzip -9 -c $data/big.txt" "bc -l $data/pi.bc" "sort $data/nums4.txt" \
             "python3 $PWD/$w/pythreads.py" "perl $PWD/$w/perlhash.pl"; do
        r=$(WARM=${WARM:-0.7} timeout 900 bench/hops.sh "$s" $p 2>&1)
        st=$?
        printf '=== %s :: %s\n%s\n--- exit %s\n' "$s" "$p" "$r" "$st" >>"$out"
        downs=$(echo "$r" | sed -n 's/.*down_ms \([0-9.]*\).*/\1/p' | paste -sd/)
        verdict=$(echo "$r" | grep -q 'output equals' && echo "output equal" || echo "OUTPUT NOT EQUAL")
        [ "$st" = 0 ] || verdict="$verdict; exit $st: $(echo "$r" | grep -m1 -i 'failed\|still running\|differs' | cut -c1-160)"
        printf '%-20s %-8s down_ms %-20s %s\n' "$s" "${p%% *}" "${downs:--}" "$verdict"
    done
done
