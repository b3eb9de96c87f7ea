# Sourced by bench/sweep.sh and bench/early-moves.sh (from the repository's
# root): exports SWEEP_DATA and SWEEP_WORKLOADS, and makes the data the
# cases use on the first run (text.txt, 15 MB; text24.txt, 370 MB;
# after.tcl, a Tcl loop with `after` timers; pi1200.bc, pi to 1200 digits
# for bc -l; cc1-input.c, the C file bench/workloads/s17/cc1-input.py
# writes).
export SWEEP_DATA=${SWEEP_DATA:-/var/tmp/pmig-sweep-data}
export SWEEP_WORKLOADS=$PWD/bench/workloads
if [ ! -s "$SWEEP_DATA/text24.txt" ]; then
    mkdir -p "$SWEEP_DATA"
    awk 'BEGIN { for (i = 1; i <= 400000; i++)
        printf "line %d alpha beta %d gamma %d\n", (i * 7919) % 1000003, i % 97, i }' \
        >"$SWEEP_DATA/text.txt"
    for _ in $(seq 24); do cat "$SWEEP_DATA/text.txt"; done >"$SWEEP_DATA/text24.txt"
fi
cat >"$SWEEP_DATA/after.tcl" <<'TCL'
set n 0
proc tick {} { global n; incr n; if {$n < 300} { after 10 tick } else { set ::done 1 } }
after 10 tick
vwait ::done
puts "ticks $n"
set s 0
for {set i 0} {$i < 6000000} {incr i} { set s [expr {($s + $i * 7) % 1000003}] }
puts "sum $s"
TCL
echo 'scale=1200; 4*a(1)' >"$SWEEP_DATA/pi1200.bc"
python3 bench/workloads/s17/cc1-input.py >"$SWEEP_DATA/cc1-input.c"
