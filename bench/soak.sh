#!/bin/bash
# Soak test of repeated migrations: looks for leaks and slow degradation.
#
# Brings up a fresh 3-node local cluster, starts one long-running workload on
# n1 and moves it HOPS times round-robin over the nodes (n1 -> n2 -> n3 ->
# n1 ...), cycling through every strategy, each hop right after the previous
# one returns. After every hop it records the hop (strategy, from, to,
# down_ms, total_ms, wall time) and the cluster's resources: each daemon's
# RSS, open fds and threads, this cluster's staging entries in /dev/shm, the
# entries of the daemons' state dirs (procs/, takeover/, anything else), the
# page store's entries, the workload processes in the cluster's nodes
# (frozen originals left behind show here) and the pmig processes there.
# At the end the workload is stopped (or waited for), its DONE line must say
# verify=ok and its checksum must equal that of an unmigrated run of the same
# number of iterations; a table is printed and every resource that grows is
# flagged. The cluster is always torn down (trap), the workload killed, and
# what is left afterwards (namespaces, /dev/shm, processes) is reported.
#
# Usage: [PMIG=BINARY] [LINK=unlimited] [HOPS=60] [WORKLOAD=dirtier|python]
#        [MIB=64] [PY_N=3000000] [STRATEGIES="..."] [PAUSE=0] [RAPID_EVERY=0]
#        [END=term|wait] [OUT=DIR] bench/soak.sh
#
#   WORKLOAD=dirtier  bench/workloads/bin/dirtier --mib $MIB (dirty rate
#                     $DIRTY_RATE pages/s, default 1000), until SIGTERM
#                     (END=term) or $ITER iterations (END=wait, ITER needed)
#   WORKLOAD=python   a python3 program: a dict of $PY_N ints (3M: ~440 MB
#                     RSS) rewritten 1/101 per round, $PY_SLEEP s between
#                     rounds; verifies every entry by recomputation at the end
#   STRATEGIES        the cycle (default: all ten); flushing and freeze-free
#                     get --page-store $OUT/pagestore, so its leftovers are ours
#   PAUSE=S           sleep S seconds between hops (default 0: none)
#   RAPID_EVERY=K     every K-th hop follows the previous one at once (no
#                     pause, no sampling in between), and that previous hop
#                     uses a lazy strategy (cycling through $LAZY), so the
#                     move starts while its pages may still be arriving
#                     (LAZY: the lazy strategies to cycle through)
#   HOP_TIMEOUT=S     bound of one `pmig migrate` (default 180); a hop refused
#                     because an earlier (timed-out) migration is still under
#                     way is retried every 0.5 s for up to BUSY_TIMEOUT s (120)
#   END_TIMEOUT=S     bound of the wait for the workload's end (default 600)
#   WARM=S            seconds the workload runs before the first hop (2)
#   OUT=DIR           where everything is kept (default /tmp/soak/run.XXXX)
# Every resource is sampled right after a hop returns (a demand-paging
# source legitimately holds extra fds, threads and a copy of the pages then),
# and again 2 s and 7 s after the workload has ended (end, end+5s).
# Exit status: 0 when every hop succeeded, the output verified and nothing
# grew or was left behind; 1 otherwise.
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
B=${PMIG:-target/release/pmig}
[ -x "$B" ] || { echo "no pmig binary at $B (set PMIG)" >&2; exit 2; }
HOPS=${HOPS:-60}
LINK=${LINK:-unlimited}
WORKLOAD=${WORKLOAD:-dirtier}
MIB=${MIB:-64}
DIRTY_RATE=${DIRTY_RATE:-1000}
END=${END:-term}
PAUSE=${PAUSE:-0}
RAPID_EVERY=${RAPID_EVERY:-0}
HOP_TIMEOUT=${HOP_TIMEOUT:-180}
END_TIMEOUT=${END_TIMEOUT:-600}
WARM=${WARM:-2}
STRATEGIES=${STRATEGIES:-"stop-copy pre-copy queued-pre-copy demand-paging flushing freeze-free post-copy assisted-post-copy ampom auto"}
LAZY=${LAZY:-"post-copy demand-paging flushing freeze-free ampom assisted-post-copy"}
read -r -a STRATS <<<"$STRATEGIES"
read -r -a LAZYS <<<"$LAZY"
mkdir -p /tmp/soak
OUT=${OUT:-$(mktemp -d /tmp/soak/run.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STATE=$OUT/state
STORE=$OUT/pagestore
mkdir -p "$STORE"
prefix=sk$$
pid=
status=0
log() { echo "$*" | tee -a "$OUT/soak.log"; }

# ---- the workload -----------------------------------------------------------
case $WORKLOAD in
dirtier)
    W=$REPO/bench/workloads/bin/dirtier
    if [ ! -x "$W" ]; then
        timeout 300 make -C bench/workloads >/dev/null || { echo "cannot build $W" >&2; exit 2; }
    fi
    if [ "$END" = wait ]; then
        [ -n "${ITER:-}" ] || { echo "END=wait needs ITER" >&2; exit 2; }
        iter=$ITER
    else
        iter=${ITER:-1000000000}
    fi
    WCMD="$W --mib $MIB --iterations $iter --dirty-rate $DIRTY_RATE --report-ms 0"
    WCOMM=dirtier
    # An unmigrated run of the same iterations at full speed: same checksum.
    refcmd() { "$W" --mib "$MIB" --iterations "$1" --dirty-rate 0 --report-ms 0; }
    ;;
python)
    PY=${PYTHON:-/usr/bin/python3}
    PY_N=${PY_N:-3000000}
    PY_SLEEP=${PY_SLEEP:-0.02}
    PY_ROUNDS=${PY_ROUNDS:-100000000}
    cat >"$OUT/pysoak.py" <<'EOF'
# Deterministic dict workload: N int entries, each round rewrites the keys
# k = r mod 101 (affine map mod 2^32); stops after R rounds or at SIGTERM,
# then checks every entry against its closed form and prints a checksum of
# all values (depends only on N and the rounds done).
import sys, signal, time, hashlib
from array import array
N = int(sys.argv[1]); R = int(sys.argv[2]); SLEEP = float(sys.argv[3])
S = 101
MASK = 0xffffffff
stop = False
def on(sig, f):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on)
signal.signal(signal.SIGINT, on)
def v0(k):
    return (k * 2654435761 + 12345) & MASK
t0 = time.monotonic()
d = {k: v0(k) for k in range(N)}
print(f"READY n={N}", flush=True)
r = 0
while r < R and not stop:
    a = 1103515245 + 2 * (r % 7)
    for k in range(r % S, N, S):
        d[k] = (d[k] * a + r) & MASK
    r += 1
    if SLEEP:
        time.sleep(SLEEP)
A = [1] * S
B = [0] * S
for q in range(r):
    c = q % S
    a = 1103515245 + 2 * (q % 7)
    A[c] = (A[c] * a) & MASK
    B[c] = (B[c] * a + q) & MASK
bad = 0 if len(d) == N else 1
vals = array('I')
for k in range(N):
    x = d.get(k)
    if x is None or x != ((A[k % S] * v0(k) + B[k % S]) & MASK):
        bad += 1
        x = 0
    vals.append(x)
h = hashlib.sha256(vals.tobytes()).hexdigest()[:16]
print(f"DONE iter={r} n={N} checksum={h} bad={bad} verify={'ok' if bad == 0 else 'FAIL'} elapsed_s={time.monotonic()-t0:.1f}", flush=True)
sys.exit(0 if bad == 0 else 1)
EOF
    WCMD="$PY $OUT/pysoak.py $PY_N $PY_ROUNDS $PY_SLEEP"
    WCOMM=$(basename "$PY")
    WCOMM=${WCOMM:0:15}
    refcmd() { "$PY" "$OUT/pysoak.py" "$PY_N" "$1" 0; }
    ;;
*) echo "WORKLOAD must be dirtier or python" >&2; exit 2 ;;
esac

x() { "$B" cluster exec --prefix "$prefix" --state-dir "$STATE" "$@"; }

# Workload pids ever seen in the cluster (to find leftovers after it is down).
seen_pids() { [ -f "$OUT/seen-pids" ] && sort -un "$OUT/seen-pids"; }

leftovers() {
    local what=$1
    {
        echo "## leftovers $what"
        echo "ip netns (this cluster): $(ip netns list 2>/dev/null | awk -v p="$prefix-" 'index($1,p)==1{printf "%s ", $1}')"
        local pat='^$'
        [ -n "${DPIDS:-}" ] && pat="^pmig-n[0-9]+-(${DPIDS// /|})-"
        echo "/dev/shm (this cluster's daemons): $(ls /dev/shm 2>/dev/null | grep -E "$pat" | tr '\n' ' ')"
        echo "/dev/shm (all): $(ls /dev/shm 2>/dev/null | tr '\n' ' ')"
        echo "page store $STORE: $(ls "$STORE" 2>/dev/null | wc -l) entries $(ls "$STORE" 2>/dev/null | head -5 | tr '\n' ' ')"
        echo "pmig processes of this cluster: $(pgrep -a pmig 2>/dev/null | grep -F -- "$STATE" | grep -v "cluster down" | tr '\n' ';')"
        echo "pmig processes (all): $(pgrep -a pmig 2>/dev/null | tr '\n' ';')"
        local p alive=
        for p in $(seen_pids); do
            [ -d /proc/$p ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = "$WCOMM" ] && alive+="$p($(awk '{print $3}' /proc/$p/stat 2>/dev/null)) "
        done
        echo "workload pids seen in the cluster still alive: ${alive:-none}"
        echo "$WCOMM processes (all): $(pgrep -a -x "$WCOMM" 2>/dev/null | tr '\n' ';')"
    } | tee -a "$OUT/soak.log" >"$OUT/leftovers-$what.txt"
}

cleanup() {
    local p
    trap - EXIT INT TERM
    # The workload: wherever it is (every pid it had that still runs it).
    for p in $pid $(seen_pids); do
        [ -n "$p" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = "$WCOMM" ] && kill -9 "$p" 2>/dev/null
    done
    timeout 120 "$B" cluster down --prefix "$prefix" --state-dir "$STATE" >"$OUT/down.log" 2>&1 </dev/null
    log "cluster down: $(cat "$OUT/down.log")"
    sleep 2
    leftovers after-down
    local n
    n=$(grep -cE "^(ip netns \(this cluster\)|/dev/shm \(this cluster's daemons\)|pmig processes of this cluster|workload pids seen in the cluster still alive): *[^ n]" "$OUT/leftovers-after-down.txt")
    [ "$n" -gt 0 ] && { log "LEFTOVERS after cluster down (see above)"; status=1; }
    log "result: status $status; everything in $OUT"
    exit $status
}
trap cleanup EXIT
trap 'log "interrupted"; status=1; exit 1' INT TERM

log "# soak: $HOPS hops, link $LINK, workload $WORKLOAD ($WCMD), strategies: ${STRATS[*]}, pause $PAUSE, rapid every $RAPID_EVERY; prefix $prefix; out $OUT; started $(date -Is)"
timeout 120 "$B" cluster up --prefix "$prefix" --nodes 3 --link "$LINK" --state-dir "$STATE" \
    >"$OUT/up.log" 2>&1 </dev/null || { cat "$OUT/up.log"; status=1; exit 1; }
addr() { awk -v n="$1" '$1==n{print $2}' "$OUT/up.log"; }
DPIDS=$(python3 -c 'import json,sys; print(" ".join(str(n["daemon_pid"]) for n in json.load(open(sys.argv[1]))["nodes"]))' "$STATE/cluster.json")
log "daemons: $DPIDS"

# ---- the sampler: one JSON line per call -----------------------------------
cat >"$OUT/sample.py" <<'EOF'
import json, os, re, sys
out, state, wcomm, dpids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
rec = json.loads(sys.argv[5])
def rd(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return None
def netns(p):
    try:
        return os.readlink(f"/proc/{p}/ns/net")
    except OSError:
        return None
nodes = ["n1", "n2", "n3"]
nsmap = {}
for i, d in enumerate(dpids):
    n = nodes[i]
    st = rd(f"/proc/{d}/status")
    if st is None or re.search(r"^State:\s+Z", st, re.M):
        rec[f"rss_{n}"] = rec[f"fd_{n}"] = rec[f"thr_{n}"] = -1
        continue
    nsmap[netns(d)] = n
    rec[f"rss_{n}"] = int(re.search(r"^VmRSS:\s+(\d+)", st, re.M).group(1))
    rec[f"thr_{n}"] = int(re.search(r"^Threads:\s+(\d+)", st, re.M).group(1))
    try:
        rec[f"fd_{n}"] = len(os.listdir(f"/proc/{d}/fd"))
    except OSError:
        rec[f"fd_{n}"] = -1
# /dev/shm: this cluster's staging directories (pmig-<node>-<daemon pid>-...)
pat = re.compile(r"^pmig-n\d+-(%s)-" % "|".join(dpids))
shm = [e for e in os.listdir("/dev/shm") if pat.match(e)]
# pre-copy's local page stores (pmig-<node>-store-<migration id>): ours are
# the ids our daemons' logs name
ids = set()
for n in nodes:
    ids.update(re.findall(r"migration (\d+)", rd(f"{state}/{n}/daemon.log") or ""))
spat = re.compile(r"^pmig-n\d+-store-(\d+)$")
shm += [e for e in os.listdir("/dev/shm") if spat.match(e) and spat.match(e).group(1) in ids]
rec["shm"] = len(shm)
def du(p):
    t = 0
    for root, ds, fs in os.walk(p):
        for f in fs:
            try:
                t += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return t
rec["shm_kib"] = sum(du(f"/dev/shm/{e}") for e in shm) // 1024
# state dirs
procs = take = other = 0
for n in nodes:
    d = f"{state}/{n}"
    try:
        ents = os.listdir(d)
    except OSError:
        continue
    for e in ents:
        if e == "procs":
            procs += len(os.listdir(f"{d}/procs"))
        elif e == "takeover":
            take += len(os.listdir(f"{d}/takeover"))
        elif e != "daemon.log":
            other += 1
rec["procs"], rec["takeover"], rec["statex"] = procs, take, other
try:
    rec["store"] = len(os.listdir(f"{out}/pagestore"))
except OSError:
    rec["store"] = -1
# processes in the cluster's nodes
wl, wlz, pm, pmrss, wlstates = 0, 0, 0, 0, []
seen = []
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    comm = (rd(f"/proc/{p}/comm") or "").strip()
    if comm not in (wcomm, "pmig"):
        continue
    stat = rd(f"/proc/{p}/stat")
    if stat is None:
        continue
    s = stat[stat.rindex(")") + 2:].split()
    state_ch, ppid = s[0], s[1]
    ns = netns(p)
    if comm == wcomm:
        if ns in nsmap:
            wl += 1
            wlstates.append(f"{p}:{nsmap[ns]}:{state_ch}")
            seen.append(p)
        elif state_ch == "Z" and ppid in dpids:
            wlz += 1
    elif ns in nsmap:
        pm += 1
        st = rd(f"/proc/{p}/status") or ""
        m = re.search(r"^VmRSS:\s+(\d+)", st, re.M)
        pmrss += int(m.group(1)) if m else 0
rec["wl"], rec["wl_zombie"], rec["wl_procs"] = wl, wlz, " ".join(sorted(wlstates))
rec["pmig"], rec["pmig_rss"] = pm, pmrss
with open(f"{out}/seen-pids", "a") as f:
    for p in seen:
        f.write(p + "\n")
with open(f"{out}/hops.jsonl", "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
sample() { python3 "$OUT/sample.py" "$OUT" "$STATE" "$WCOMM" "$DPIDS" "$1"; }

# ---- start the workload -----------------------------------------------------
pid=$(timeout 60 "$B" cluster exec --prefix "$prefix" --state-dir "$STATE" n1 -- bash -c "cd $OUT; $WCMD >$OUT/out 2>$OUT/err </dev/null 251>&- & echo \$!" </dev/null 2>/dev/null)
[ -n "$pid" ] || { log "the workload did not start: $(cat "$OUT/err" 2>/dev/null)"; status=1; exit 1; }
echo "$pid" >>"$OUT/seen-pids"
for _ in $(seq 600); do grep -q READY "$OUT/out" 2>/dev/null && break; sleep 0.1; done
grep -q READY "$OUT/out" || { log "the workload is not READY after 60 s"; status=1; exit 1; }
log "workload pid $pid on n1: $(head -1 "$OUT/out")"
sleep "$WARM"
sample '{"hop":0,"strategy":"-","from":"-","to":"n1","ok":1}'

# Which node a pid's network namespace is ("" if none of ours / gone).
node_of() {
    local ns d i=1
    ns=$(readlink "/proc/$1/ns/net" 2>/dev/null) || return 0
    for d in $DPIDS; do
        [ "$(readlink "/proc/$d/ns/net" 2>/dev/null)" = "$ns" ] && { echo "n$i"; return 0; }
        i=$((i + 1))
    done
}
next_node() { case $1 in n1) echo n2 ;; n2) echo n3 ;; *) echo n1 ;; esac; }

# ---- the hops ------------------------------------------------------------------
from=n1
k=0
lz=0
fails=0
for hop in $(seq 1 "$HOPS"); do
    strategy=${STRATS[$k]}
    rapid_next=0
    if [ "$RAPID_EVERY" -gt 0 ] && [ $(((hop + 1) % RAPID_EVERY)) -eq 0 ] && [ "$hop" -lt "$HOPS" ]; then
        # The next hop follows at once: this one is lazy.
        strategy=${LAZYS[$((lz % ${#LAZYS[@]}))]}
        lz=$((lz + 1))
        rapid_next=1
    else
        k=$(((k + 1) % ${#STRATS[@]}))
    fi
    to=$(next_node "$from")
    store_arg=()
    case $strategy in flushing | freeze-free) store_arg=(--page-store "$STORE") ;; esac
    t0=$(date +%s%N)
    timeout "$HOP_TIMEOUT" "$B" cluster exec --prefix "$prefix" --state-dir "$STATE" "$from" -- \
        "$B" migrate --pid "$pid" --to "$(addr "$to"):7070" --strategy "$strategy" "${store_arg[@]}" --json \
        >"$OUT/m.json" 2>"$OUT/m.err" </dev/null
    rc=$?
    # A migration still under way (one whose client timed out) refuses the
    # next: wait for it to end (bounded), follow the process, try again.
    tries=0
    while [ $rc -ne 0 ] && grep -q "already being migrated" "$OUT/m.err" && [ $tries -lt $((${BUSY_TIMEOUT:-120} * 2)) ]; do
        tries=$((tries + 1))
        sleep 0.5
        if [ ! -d "/proc/$pid" ] || [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
            cand=$(pgrep -x "$WCOMM" | while read -r p; do
                n=$(node_of "$p"); s=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
                [ -n "$n" ] && [ "$s" != Z ] && echo "$p $n"
            done)
            [ "$(echo "$cand" | grep -c .)" -eq 1 ] || break
            log "  (hop $hop: $pid moved meanwhile to $(echo "$cand" | cut -d' ' -f2) as $(echo "$cand" | cut -d' ' -f1) by the earlier migration)"
            pid=$(echo "$cand" | cut -d' ' -f1); from=$(echo "$cand" | cut -d' ' -f2)
            echo "$pid" >>"$OUT/seen-pids"
            to=$(next_node "$from")
        fi
        timeout "$HOP_TIMEOUT" "$B" cluster exec --prefix "$prefix" --state-dir "$STATE" "$from" -- \
            "$B" migrate --pid "$pid" --to "$(addr "$to"):7070" --strategy "$strategy" "${store_arg[@]}" --json \
            >"$OUT/m.json" 2>"$OUT/m.err" </dev/null
        rc=$?
    done
    [ $tries -gt 0 ] && log "  (hop $hop: $tries retries while an earlier migration was under way)"
    t1=$(date +%s%N)
    wall=$(((t1 - t0) / 1000000))
    if [ $rc -eq 0 ] && newpid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['new_pid'])" "$OUT/m.json" 2>/dev/null); then
        cp "$OUT/m.json" "$OUT/hop-$hop.json"
        rec=$(python3 - "$OUT/m.json" "$hop" "$from" "$to" "$wall" "$rapid_next" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({"hop": int(sys.argv[2]), "strategy": d["strategy"], "from": sys.argv[3], "to": sys.argv[4],
                  "ok": 1, "down_ms": round(d["down_ms"], 2), "total_ms": round(d["total_ms"], 1),
                  "wall_ms": int(sys.argv[5]), "new_pid": d["new_pid"], "bytes": d.get("bytes_total"),
                  "rapid_next": int(sys.argv[6])}))
PY
)
        printf '%3d %-20s %s->%s %s\n' "$hop" "$strategy" "$from" "$to" \
            "$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print('down', d['down_ms'], 'ms, total', d['total_ms'], 'ms, wall', d['wall_ms'], 'ms, new pid', d['new_pid'])" "$rec")" \
            | tee -a "$OUT/soak.log"
        pid=$newpid
        echo "$pid" >>"$OUT/seen-pids"
        from=$to
    else
        fails=$((fails + 1))
        err=$(tr '\n' ' ' <"$OUT/m.err" | cut -c1-600)
        [ $rc -eq 124 ] && err="TIMEOUT after ${HOP_TIMEOUT}s; $err"
        log "HOP $hop FAILED ($strategy $from->$to, rc $rc, ${wall} ms): $err"
        cp "$OUT/m.err" "$OUT/hop-$hop.err"
        hopfrom=$from
        # Where is the process now? A migration whose client went away (a
        # timeout) may still be under way in the daemons: while the process
        # is frozen (traced, state t), wait for it to run again or to go.
        for _ in $(seq $((HOP_TIMEOUT * 10))); do
            [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = t ] || break
            sleep 0.1
        done
        where=$(node_of "$pid")
        st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
        if [ -n "$where" ] && [ "$st" != Z ]; then
            log "  the process $pid is still on $where (state $st); going on from there"
            from=$where
        else
            log "  the process $pid is gone (state '${st:-none}'); looking for the workload in the cluster"
            cand=$(pgrep -x "$WCOMM" | while read -r p; do
                n=$(node_of "$p"); s=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
                [ -n "$n" ] && [ "$s" != Z ] && echo "$p $n $s"
            done)
            log "  candidates: ${cand:-none}"
            if [ "$(echo "$cand" | grep -c .)" -eq 1 ]; then
                pid=$(echo "$cand" | cut -d' ' -f1); from=$(echo "$cand" | cut -d' ' -f2)
                echo "$pid" >>"$OUT/seen-pids"
            else
                log "  cannot tell where the workload is: stopping the hops"
                rec="{\"hop\":$hop,\"strategy\":\"$strategy\",\"from\":\"$hopfrom\",\"to\":\"$to\",\"ok\":0,\"wall_ms\":$wall}"
                sample "$rec"
                status=1
                break
            fi
        fi
        rec="{\"hop\":$hop,\"strategy\":\"$strategy\",\"from\":\"$hopfrom\",\"to\":\"$to\",\"ok\":0,\"wall_ms\":$wall}"
        status=1
    fi
    if [ $rapid_next -eq 1 ]; then
        # Straight on: the record is written without resources.
        echo "$rec" >>"$OUT/hops.jsonl"
        continue
    fi
    sample "$rec"
    [ "$PAUSE" != 0 ] && sleep "$PAUSE"
done
log "hops done: $fails failed"

# ---- the end ------------------------------------------------------------------
if [ "$END" = term ]; then
    kill -TERM "$pid" 2>/dev/null
fi
ended=0
for _ in $(seq $((END_TIMEOUT * 10))); do
    if [ ! -d "/proc/$pid" ] || [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then ended=1; break; fi
    sleep 0.1
done
if [ $ended -eq 0 ]; then
    log "THE WORKLOAD (pid $pid) IS STILL RUNNING after ${END_TIMEOUT}s: state $(grep State /proc/$pid/status 2>/dev/null)"
    status=1
fi
done_line=$(grep DONE "$OUT/out" | tail -1)
log "workload output: $done_line"
if echo "$done_line" | grep -q "verify=ok"; then
    n=$(echo "$done_line" | sed 's/.*iter=\([0-9]*\).*/\1/')
    ref=$(refcmd "$n" 2>/dev/null | grep DONE)
    c1=$(echo "$done_line" | sed 's/.*checksum=\([0-9a-f]*\).*/\1/')
    c2=$(echo "$ref" | sed 's/.*checksum=\([0-9a-f]*\).*/\1/')
    if [ "$c1" = "$c2" ]; then
        log "VERIFIED: verify=ok, checksum $c1 equals an unmigrated run of $n iterations"
    else
        log "CHECKSUM DIFFERS from an unmigrated run of $n iterations: $c1 vs $c2 ($ref)"
        status=1
    fi
else
    log "NOT VERIFIED: no 'verify=ok' DONE line; out: $(tail -3 "$OUT/out" | tr '\n' ' ') err: $(tail -3 "$OUT/err" | tr '\n' ' ')"
    status=1
fi
# Settled state once the workload is gone, then with 5 s more.
sleep 2
sample '{"hop":"end","strategy":"-","from":"-","to":"-","ok":1}'
sleep 5
sample '{"hop":"end+5s","strategy":"-","from":"-","to":"-","ok":1}'
for d in "$STATE"/n*/; do
    n=$(basename "$d")
    log "daemon $n log: $(wc -l <"$d/daemon.log") lines, $(grep -c ' WARN ' "$d/daemon.log") WARN, $(grep -c ' ERROR ' "$d/daemon.log") ERROR"
done
leftovers before-down
# Where the daemons' memory is: their mappings by RSS.
i=1
for d in $DPIDS; do
    cp "/proc/$d/smaps" "$OUT/smaps-n$i.txt" 2>/dev/null
    python3 - "$OUT/smaps-n$i.txt" "n$i" <<'PY' | tee -a "$OUT/soak.log"
import re, sys
maps, cur = [], None
for l in open(sys.argv[1]):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", l):
        f = l.split()
        cur = {"name": f[5] if len(f) > 5 else "[anon]", "range": f[0], "rss": 0}
        maps.append(cur)
    elif l.startswith("Rss:") and cur is not None:
        cur["rss"] = int(l.split()[1])
tot = sum(m["rss"] for m in maps)
anon = sum(m["rss"] for m in maps if m["name"] in ("[anon]", "[heap]"))
top = sorted(maps, key=lambda m: -m["rss"])[:4]
print(f"daemon {sys.argv[2]} RSS {tot} KiB, anon+heap {anon} KiB; largest: " +
      ", ".join(f"{m['name']} {m['range']} {m['rss']} KiB" for m in top))
PY
    i=$((i + 1))
done

# ---- the table and the growth check -------------------------------------------
python3 - "$OUT/hops.jsonl" <<'PY' | tee -a "$OUT/soak.log" "$OUT/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cols = ["rss_n1", "rss_n2", "rss_n3", "fd_n1", "fd_n2", "fd_n3", "thr_n1", "thr_n2", "thr_n3",
        "shm", "shm_kib", "procs", "takeover", "statex", "store", "wl", "wl_zombie", "pmig", "pmig_rss"]
hdr = f"{'hop':>6} {'strategy':<20} {'from':>4} {'to':>3} {'down':>8} {'total':>8} {'wall':>6} " \
      f"{'rss n1/n2/n3 KiB':>20} {'fds':>9} {'thr':>8} {'shm':>3} {'prc':>3} {'tko':>3} {'sto':>3} {'wl':>2} {'pm':>2}"
print(hdr)
def g(r, k, d="-"):
    v = r.get(k, d)
    return d if v is None else v
for r in rows:
    ok = r.get("ok", 1)
    s = r["strategy"] + ("" if ok else " FAILED")
    if "rss_n1" in r:
        res = (f"{r['rss_n1']:>6}/{r['rss_n2']:>6}/{r['rss_n3']:>6} {r['fd_n1']:>2}/{r['fd_n2']:>2}/{r['fd_n3']:>2} "
               f"{r['thr_n1']:>2}/{r['thr_n2']:>2}/{r['thr_n3']:>2} {r['shm']:>3} {r['procs']:>3} {r['takeover']:>3} "
               f"{r['store']:>3} {r['wl']:>2} {r['pmig']:>2}")
    else:
        res = "(rapid: not sampled)"
    print(f"{str(r['hop']):>6} {s:<20} {r['from']:>4} {r['to']:>3} {str(g(r,'down_ms')):>8} {str(g(r,'total_ms')):>8} "
          f"{str(g(r,'wall_ms')):>6} {res}")
print()
sam = [r for r in rows if "rss_n1" in r]
flags = []
print(f"{'resource':<10} {'first':>8} {'min':>8} {'max':>8} {'last(hops)':>10} {'end':>8} {'end+5s':>8} {'ups':>4} {'downs':>5}  verdict")
for c in cols:
    v = [r[c] for r in sam if r["hop"] not in ("end", "end+5s")]
    e = [r[c] for r in sam if r["hop"] == "end"]
    e5 = [r[c] for r in sam if r["hop"] == "end+5s"]
    if not v:
        continue
    ups = sum(1 for a, b in zip(v, v[1:]) if b > a)
    downs = sum(1 for a, b in zip(v, v[1:]) if b < a)
    n = len(v)
    third = max(1, n // 3)
    m1 = sum(v[:third]) / third
    m3 = sum(v[-third:]) / third
    verdict = ""
    last_end = e5[0] if e5 else (e[0] if e else v[-1])
    if downs == 0 and ups > 0:
        verdict = "MONOTONIC GROWTH"
    elif c.startswith("rss") or c == "pmig_rss" or c == "shm_kib":
        if m3 > m1 * 1.10 and m3 - m1 > 2048:
            verdict = f"TREND +{(m3 - m1) / 1024:.1f} MiB (mean of last third vs first third)"
    elif m3 > m1 and max(v[-third:]) > max(v[:third]):
        verdict = f"TREND (mean {m1:.1f} -> {m3:.1f})"
    baseline = v[0]
    if c in ("shm", "shm_kib", "procs", "takeover", "statex", "store", "wl", "wl_zombie", "pmig") and last_end > (0 if c != "pmig" else 3):
        verdict += f" LEFT AT END ({last_end})"
    if c.startswith("fd") or c.startswith("thr"):
        if last_end > baseline:
            verdict += f" END>{'START'} ({baseline} -> {last_end})"
    if verdict:
        flags.append(f"{c}: {verdict.strip()}")
    print(f"{c:<10} {v[0]:>8} {min(v):>8} {max(v):>8} {v[-1]:>10} {str(e[0] if e else '-'):>8} {str(e5[0] if e5 else '-'):>8} {ups:>4} {downs:>5}  {verdict.strip()}")
print()
# Per strategy: down and total over the cycles (slow degradation).
by = {}
for r in rows:
    if r.get("ok") and "down_ms" in r:
        by.setdefault(r["strategy"], []).append((r["down_ms"], r["total_ms"]))
print("per strategy: down_ms list | total_ms list")
for s, l in by.items():
    print(f"  {s:<22} {' '.join(str(a) for a, _ in l)} | {' '.join(str(b) for _, b in l)}")
fails = [r for r in rows if not r.get("ok", 1)]
print()
print(f"failed hops: {len(fails)}")
print("FLAGS: " + ("; ".join(flags) if flags else "none"))
PY
grep -q "^FLAGS: none" "$OUT/table.txt" || status=1
exit $status
