# Point-in-time recovery (issue 13), sourced by scripts/bench.sh for the
# sections pitr and pitr-replay (it uses its BIN, DIR, OUT, RUNS, want,
# free_port and etcd_pid). Results: bench-out/pitr.txt (one line per run:
# name, load average before and after, the run's JSON) and
# bench-out/pitr.md.
#
# pitr: `lifeboat agent --capture` (the binary; BENCH_PITR_DRIVER=inproc
# runs capture.Run in benchtool instead, to check the harness) against a
# fresh etcd of BENCH_PITR_OBJECTS (default 20 000) Kubernetes-like
# objects, into versitygw with age encryption:
#   lag-5s, lag-1s   the recovery point under 500 writes/s of 1-4 KiB values
#                    (benchtool kube: the agent's lifeboat_capture_lag_seconds
#                    scraped every 250 ms, and the time from each sampled
#                    write's response to the first progress marker in the
#                    store through its revision), capture.interval 5s and 1s;
#   cost-off, cost-on  p99 of 200 puts/s (benchtool load, 1 KiB values) with
#                    no agent and with the agent capturing, alternated;
#   mem              peak RSS (VmHWM) of the agent capturing 2 000 writes/s:
#                    a second agent run that continues the generation (no
#                    snapshot in the process), its peak since start and since
#                    the load began (clear_refs).
# BENCH_PITR_PARTS (default "lag cost mem") picks parts of pitr;
# BENCH_PITR_COST_INTERVAL (default 1s) is the cost runs' capture.interval
# and BENCH_PITR_AGENT_ARGS more agent flags (e.g. --capture-compaction-levels none);
# BENCH_PITR_AGENT_NICE runs the agent at that nice value (10: as the
# systemd unit deploys it, Nice=10; nice execs, so the pid is the agent's);
# BENCH_PITR_SECS (default 60) is each run's length, RUNS the pairs;
# LIFEBOAT_BENCH_AGENT_BIN runs the agent from another binary than restore.
#
#   BENCH_SECTIONS=pitr BENCH_RUNS=2 scripts/bench.sh
set -euo pipefail
LB=${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}
LBA=${LIFEBOAT_BENCH_AGENT_BIN:-$LB} # the agent's binary (default: the same)
PSECS=${BENCH_PITR_SECS:-60}
POBJECTS=${BENCH_PITR_OBJECTS:-20000}
PDRIVER=${BENCH_PITR_DRIVER:-agent}
PDIR=$DIR/pitr
PPARTS=" ${BENCH_PITR_PARTS:-lag cost mem} "
want_part() { [[ $PPARTS == *" $1 "* ]]; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/'; }
: >"$OUT/pitr.txt"
record() { # record NAME LOAD_BEFORE JSON
  echo "$1 $2,$(loadavg) $3" >>"$OUT/pitr.txt"
  echo "bench: pitr $1 (load $2,$(loadavg)): $3"
}

# One etcd at a time on two cores: the 1 GiB member rests meanwhile.
kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true

pvport=$(free_port)
rm -rf "$PDIR"
start_versitygw "$PDIR" "$pvport"
pvgw_pid=$vgw_pid; vgw_pid=""
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
[ -f "$DIR/age.key" ] || "$BIN/age-keygen" -o "$DIR/age.key" 2>/dev/null
precipient=$(grep -m1 -o 'age1[0-9a-z]*' "$DIR/age.key")
ps3=http://127.0.0.1:$pvport
pmport=$(free_port)
pmetrics=http://127.0.0.1:$pmport/metrics
agent_pid=""
pitr_etcd_pid=""
trap 'kill $agent_pid $pitr_etcd_pid $pvgw_pid 2>/dev/null || true; wait 2>/dev/null || true' EXIT

# agent_start STORE_PREFIX INTERVAL EP: the capture running (up, a revision).
agent_start() {
  local prefix=$1 interval=$2 aep=$3
  if [ "$PDRIVER" = inproc ]; then
    "$BIN/benchtool" capture --endpoints "$aep" --store "s3://bench/$prefix" --s3-endpoint "$ps3" \
      --recipient "$precipient" --interval "$interval" --spool-dir "$DIR/spool" --listen "127.0.0.1:$pmport" \
      >>"$OUT/agent-$prefix.log" 2>&1 &
  else
    ${BENCH_PITR_AGENT_NICE:+nice -n "$BENCH_PITR_AGENT_NICE"} "$LBA" agent --endpoints "$aep" --store "s3://bench/$prefix" --s3-endpoint "$ps3" --s3-path-style --s3-create-bucket \
      --recipient "$precipient" --identity-file "$DIR/age.key" --capture --capture-interval "$interval" --listen "127.0.0.1:$pmport" \
      --spool-dir "$DIR/spool" --scratch-dir "$DIR/scratch" --snapshot-schedule "@every 1h" --drill-schedule "" \
      --log-format json ${BENCH_PITR_AGENT_ARGS:-} >>"$OUT/agent-$prefix.log" 2>&1 &
  fi
  agent_pid=$!
  for _ in $(seq 600); do
    # Up, with a durable point: before its first one the agent reports the
    # time since it began (its anchor snapshot included) as the lag.
    if "$BIN/benchtool" scrape --metrics "$pmetrics" 2>/dev/null |
      python3 -c 'import json,sys; m=json.load(sys.stdin); sys.exit(0 if m.get("lifeboat_capture_up")==1 and m.get("lifeboat_capture_revision",0)>0 and m.get("lifeboat_capture_recovery_point_timestamp_seconds",0)>0 else 1)' 2>/dev/null; then
      return 0
    fi
    kill -0 "$agent_pid" 2>/dev/null || { echo "bench: the agent exited (see $OUT/agent-$prefix.log)"; tail -5 "$OUT/agent-$prefix.log"; exit 1; }
    sleep 0.2
  done
  echo "bench: the capture did not start within 120 s (see $OUT/agent-$prefix.log)"; exit 1
}
agent_stop() {
  kill -TERM "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=""
}
# etcd_start DATA_DIR: a single member on fresh ports; sets pep.
etcd_start() {
  local cp_ pp
  cp_=$(free_port); pp=$(free_port); pep=http://127.0.0.1:$cp_
  "$BIN/etcd" --name pitr --data-dir "$1" --quota-backend-bytes $((8<<30)) \
    --listen-client-urls "$pep" --advertise-client-urls "$pep" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "pitr=http://127.0.0.1:$pp" --log-level error >"$PDIR/etcd.log" 2>&1 &
  pitr_etcd_pid=$!
  for _ in $(seq 300); do "$BIN/etcdctl" --endpoints "$pep" endpoint health >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "bench: etcd on $1 did not start"; exit 1
}

if want pitr; then
  etcd_start "$PDIR/etcd"
  "$BIN/benchtool" seed --endpoints "$pep" --objects "$POBJECTS" --min-value 1024 --max-value 4096
  for i in $(seq "$RUNS"); do
    want_part lag || break
    for iv in 5s 1s; do
      agent_start "lag-$iv-$i" "$iv" "$pep"
      l=$(loadavg)
      js=$("$BIN/benchtool" kube --endpoints "$pep" --objects "$POBJECTS" --rate 500 --duration "${PSECS}s" \
        --metrics "$pmetrics" --store "s3://bench/lag-$iv-$i" --s3-endpoint "$ps3")
      agent_stop
      record "lag-$iv" "$l" "$js"
    done
  done
  for i in $(seq "$RUNS"); do
    want_part cost || break
    l=$(loadavg)
    js=$("$BIN/benchtool" load --endpoints "$pep" --rate 200 --duration "${PSECS}s")
    record cost-off "$l" "$js"
    agent_start cost "${BENCH_PITR_COST_INTERVAL:-1s}" "$pep"
    l=$(loadavg)
    js=$("$BIN/benchtool" load --endpoints "$pep" --rate 200 --duration "${PSECS}s")
    agent_stop
    record cost-on "$l" "$js"
  done
  want_part mem && {
  # The anchor snapshot in a first run, so that the measured process only
  # captures: it continues the generation.
  agent_start mem 5s "$pep"; agent_stop
  agent_start mem 5s "$pep"
  whole=$(awk '/VmHWM/ {print $2}' "/proc/$agent_pid/status")
  echo 5 >"/proc/$agent_pid/clear_refs" # VmHWM from here: the capture only
  l=$(loadavg)
  js=$("$BIN/benchtool" kube --endpoints "$pep" --objects "$POBJECTS" --rate 2000 --duration "${PSECS}s" --metrics "$pmetrics")
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$agent_pid/status"); rss=$(awk '/VmRSS/ {print $2}' "/proc/$agent_pid/status")
  agent_stop
  record mem "$l" "{\"vmhwm_capture_kb\":$hwm,\"vmrss_end_kb\":$rss,\"vmhwm_before_kb\":$whole,\"load\":$js}"
  }
  kill "$pitr_etcd_pid"; wait "$pitr_etcd_pid" 2>/dev/null || true; pitr_etcd_pid=""
fi

# pitr-replay: a point-in-time restore (snapshot + BENCH_PITR_REPLAY_REVISIONS
# revisions, default 720 000 = one hour of 200 writes/s, written as fast as
# etcd takes them, one write per revision) against a plain restore of the
# same snapshot, alternated: wall time, the replay's own duration and rate.
# The base is a copy of the 1 GiB bench database (BENCH_PITR_REPLAY_BASE=big)
# or a fresh one of BENCH_PITR_OBJECTS objects (small).
if want pitr-replay; then
  RN=${BENCH_PITR_REPLAY_REVISIONS:-720000}
  rdir=$PDIR/replay
  rm -rf "$rdir"; mkdir -p "$rdir"
  robjects=$POBJECTS
  if [ "${BENCH_PITR_REPLAY_BASE:-big}" = big ]; then
    cp -a "$DIR/etcd" "$rdir/etcd"; robjects=$OBJECTS
    etcd_start "$rdir/etcd"
  else
    etcd_start "$rdir/etcd"
    "$BIN/benchtool" seed --endpoints "$pep" --objects "$POBJECTS" --min-value 1024 --max-value 4096
  fi
  agent_start replay 5s "$pep"
  l=$(loadavg)
  js=$("$BIN/benchtool" kube --endpoints "$pep" --objects "$robjects" --rate 0 --count "$RN" --inflight 64 --duration 2h)
  record replay-writes "$l" "$js"
  target=$(echo "$js" | python3 -c 'import json,sys; print(json.load(sys.stdin)["last_revision"])')
  for _ in $(seq 1200); do
    got=$("$BIN/benchtool" scrape --metrics "$pmetrics" | python3 -c 'import json,sys; print(int(json.load(sys.stdin).get("lifeboat_capture_revision",0)))')
    [ "$got" -ge "$target" ] && break
    sleep 0.5
  done
  [ "$got" -ge "$target" ] || { echo "bench: the capture did not reach revision $target (at $got)"; exit 1; }
  agent_stop
  kill "$pitr_etcd_pid"; wait "$pitr_etcd_pid" 2>/dev/null || true; pitr_etcd_pid=""
  rpeer=http://127.0.0.1:$(free_port)
  prestore() { # prestore NAME ARGS...: one restore, timed, into $rdir/out
    local name=$1; shift
    rm -rf "$rdir/out" "$rdir"/out.lifeboat-old-*
    l=$(loadavg)
    /usr/bin/time -f "%e %M" -o "$OUT/time.tmp" "$LB" restore "$@" --data-dir "$rdir/out" --name r --initial-advertise-peer-urls "$rpeer" \
      --store s3://bench/replay --s3-endpoint "$ps3" --s3-path-style --identity-file "$DIR/age.key" \
      --spool-dir "$DIR/spool" --scratch-dir "$DIR/scratch" >"$OUT/restore-$name.out" 2>"$OUT/restore-$name.err" ||
      { echo "bench: restore $name failed"; cat "$OUT/restore-$name.err"; exit 1; }
    read -r wall rss <"$OUT/time.tmp"
    rep=$(grep -o 'replayed [0-9]* revisions.* in [0-9.]*s ([0-9]* revisions/s)' "$OUT/restore-$name.out" |
      sed -E 's/replayed ([0-9]*) revisions.* in ([0-9.]*)s \(([0-9]*) revisions\/s\)/"revisions":\1,"replay_s":\2,"replay_rate":\3,/' || true)
    record "$name" "$l" "{${rep}\"wall_s\":$wall,\"rss_kb\":$rss}"
  }
  for i in $(seq "$RUNS"); do
    prestore restore-plain latest
    prestore restore-pitr --to-revision "$target"
  done
  rm -rf "$rdir"
fi

python3 - "$OUT" "$PDRIVER" <<'PY'
import json, statistics, sys, os
out, driver = sys.argv[1], sys.argv[2]
rows = []
for line in open(os.path.join(out, "pitr.txt")):
    name, load, js = line.split(" ", 2)
    rows.append((name, load, json.loads(js)))
L = [f"driver: {driver}", "",
     "| run | load avg (before, after) | writes/s | lag metric p50 / p99 / max (s) | write → marker p50 / p99 / max (s) | samples |",
     "|---|---|---|---|---|---|"]
for name, load, r in rows:
    if name.startswith("lag-"):
        m, d = r.get("lag_metric_s") or {}, r.get("lag_durable_s") or {}
        L.append(f"| {name} | {load} | {r['writes_per_s']:.0f} | {m.get('p50',0):.2f} / {m.get('p99',0):.2f} / {m.get('max',0):.2f} | "
                 f"{d.get('p50',0):.2f} / {d.get('p99',0):.2f} / {d.get('max',0):.2f} | {m.get('n',0)} scrapes, {d.get('n',0)} writes ({r.get('lag_durable_unresolved',0)} uncovered) |")
        a = r.get("lag_metric_after_warmup_s")
        if a:
            L.append(f"| {name}, metric after the first 10 s | | | {a.get('p50',0):.2f} / {a.get('p99',0):.2f} / {a.get('max',0):.2f} | | {a.get('n',0)} scrapes |")
L += ["", "| cost run | load avg | puts | p50 (ms) | p99 (ms) | max (ms) | p99 / previous off |", "|---|---|---|---|---|---|---|"]
last, ratios = None, []
for name, load, r in rows:
    if name.startswith("cost-"):
        ratio = ""
        if name == "cost-off":
            last = r["p99_ms"]
        elif last:
            ratios.append(r["p99_ms"] / last); ratio = f"{ratios[-1]:.2f}x"
        L.append(f"| {name} | {load} | {r['puts']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | {ratio} |")
if ratios:
    L.append(f"\nmedian p99 ratio on/off: {statistics.median(ratios):.2f}x ({' '.join(f'{x:.2f}' for x in ratios)})")
for name, load, r in rows:
    if name == "mem":
        ld = r["load"]
        L.append(f"\nmem (load {load}): VmHWM while capturing {r['vmhwm_capture_kb']/1024:.1f} MiB, VmRSS at the end {r['vmrss_end_kb']/1024:.1f} MiB, "
                 f"since the process started, before the load (no snapshot in this process) {r['vmhwm_before_kb']/1024:.1f} MiB; {ld['writes_per_s']:.0f} writes/s for {ld['seconds']:.0f} s "
                 f"({ld['writes']} writes, {ld['errors']} errors), write p99 {ld['latency_ms']['p99']:.1f} ms; capture gauges max: {json.dumps(ld.get('capture_max', {}))}")
L += ["", "| restore run | load avg | wall (s) | peak RSS (MiB) | revisions replayed | replay (s) | replay rate (rev/s) | pitr / previous plain |", "|---|---|---|---|---|---|---|---|"]
last, ratios = None, []
for name, load, r in rows:
    if name.startswith("restore-"):
        ratio = ""
        if name == "restore-plain":
            last = r["wall_s"]
        elif last:
            ratios.append(r["wall_s"] / last); ratio = f"{ratios[-1]:.2f}x"
        L.append(f"| {name} | {load} | {r['wall_s']:.1f} | {r['rss_kb']/1024:.0f} | {r.get('revisions', '')} | {r.get('replay_s', '')} | {r.get('replay_rate', '')} | {ratio} |")
    if name == "replay-writes":
        L.append(f"| (writes: {r['writes']} in {r['seconds']:.0f} s, {r['writes_per_s']:.0f}/s, revisions {r['first_revision']}-{r['last_revision']}; load {load}) | | | | | | | |")
if ratios:
    L.append(f"\nmedian wall ratio pitr/plain: {statistics.median(ratios):.2f}x ({' '.join(f'{x:.2f}' for x in ratios)})")
L += ["", "raw:", "```", open(os.path.join(out, "pitr.txt")).read().strip(), "```"]
open(os.path.join(out, "pitr.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
kill $pvgw_pid 2>/dev/null || true; wait $pvgw_pid 2>/dev/null || true; pvgw_pid=""
