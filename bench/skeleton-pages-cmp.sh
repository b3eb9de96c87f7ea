#!/bin/bash
# Alternated runs of bench/hops.sh with two builds (BENCHMARKS.md, "The pages
# of the stop sent against the skeleton's"): BASE (default
# /tmp/base-target/release/pmig) and NEW (default target/release/pmig), two
# rounds of four cases, three hops each; prints each hop's line and the
# timing marks of the plans against the skeleton's image.
# Needs /tmp/npenv (python3 -m venv /tmp/npenv && /tmp/npenv/bin/pip install numpy).
set -u
cd "$(dirname "$0")/.."
repo=$PWD
BASE=${BASE:-/tmp/base-target/release/pmig}
NEW=${NEW:-$repo/target/release/pmig}
tl=$(mktemp -d /tmp/pmig-cmp.XXXXXX)
trap 'rm -rf "$tl"' EXIT
echo "start $(date -u +%FT%TZ)"
for rep in 1 2; do
    for bin in base new; do
        if [ $bin = base ]; then B=$BASE; else B=$NEW; fi
        while IFS='|' read -r s link cmd; do
            echo "== rep $rep $bin $s $link $cmd"
            rm -rf "${tl:?}"/*
            PMIG=$B LINK=$link WARM=2 TIMELINE=$tl timeout 900 \
                bash -c "$repo/bench/hops.sh $s $cmd" 2>&1 | grep -E "down_ms|output"
            grep -h "planned against" "$tl"/hop-*.txt | sed 's/^/   /'
        done <<CASES
post-copy|10mbit|/usr/bin/python3 $repo/bench/workloads/s22/pyalloc.py
freeze-free|10mbit|/usr/bin/python3 $repo/bench/workloads/s22/pyalloc.py
post-copy|100mbit|/tmp/npenv/bin/python $repo/bench/workloads/s22/npwork.py 5000
demand-paging|100mbit|/tmp/npenv/bin/python $repo/bench/workloads/s22/npwork.py 5000
CASES
    done
done
echo "end $(date -u +%FT%TZ)"
