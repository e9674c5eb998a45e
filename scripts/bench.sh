#!/usr/bin/env bash
# Side-by-side benchmark on a ~1 GiB Kubernetes-like database in a real etcd
# (the binary): `etcdctl snapshot save` versus `lifeboat snapshot` into a
# local store, alternating runs, wall time and peak RSS from /usr/bin/time,
# and the p99 latency of a 200 puts/s load with and without each backup.
# Then the same into S3 (versitygw on loopback, age encryption on) next to
# etcdctl and a sequential save-then-compress-then-upload pipeline.
# Results: bench-out/results.md (copy them into docs/benchmarks.md).
#
#   BENCH_OBJECTS=250000 BENCH_RUNS=3 BENCH_DIR=/var/tmp/lifeboat-bench scripts/bench.sh
#   BENCH_SECTIONS="local s3" BENCH_RUNS=5 scripts/bench.sh   # some sections only
#     (sections: local, load, s3, drill, inspect, cluster, pitr, pitr-replay; the default is all;
#     pitr and pitr-replay: scripts/bench-pitr.sh)
#   BENCH_SECTIONS="load cluster" BENCH_OBJECTS=30000 BENCH_CLUSTER_OBJECTS=50000 scripts/bench.sh
#     (p99 only, on modest databases: the single member with the live HashKV on
#     and off, and the 3-member cluster, load on the leader)
#   LIFEBOAT_BENCH_BASE_BIN=/tmp/lifeboat-old adds that binary to the cluster section, side by side;
#   BENCH_CLUSTER_REPEAT=3 BENCH_CLUSTER_IDLE=15s: three backups per load window (more samples per p99);
#   BENCH_CLUSTER_EXTRA="--compression none" adds lifeboat with those flags.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.bin
OBJECTS=${BENCH_OBJECTS:-180000}
RUNS=${BENCH_RUNS:-3}
DIR=${BENCH_DIR:-/var/tmp/lifeboat-bench}
OUT=$PWD/bench-out
SECTIONS=" ${BENCH_SECTIONS:-local load s3 drill inspect cluster pitr pitr-replay} "
want() { [[ $SECTIONS == *" $1 "* ]]; }
mkdir -p "$DIR" "$OUT"
go build -o "$BIN/benchtool" ./internal/test/benchtool
go build -o "$BIN/age-keygen" filippo.io/age/cmd/age-keygen
go build -o "$BIN/etcdutl" go.etcd.io/etcd/etcdutl/v3

. scripts/bench-lib.sh
cport=$(free_port); pport=$(free_port)
ep=http://127.0.0.1:$cport
fresh=0
[ -f "$DIR/seeded-$OBJECTS" ] || { rm -rf "$DIR/etcd"; fresh=1; }
start_bench_etcd "$DIR/etcd" "$cport" "$pport" "$DIR/etcd.log"
vgw_pid=""
trap 'kill $etcd_pid $vgw_pid 2>/dev/null; wait $etcd_pid 2>/dev/null || true' EXIT
for _ in $(seq 150); do "$BIN/etcdctl" --endpoints "$ep" endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
if [ $fresh = 1 ]; then
  echo "bench: seeding $OBJECTS objects (once; kept in $DIR)"
  "$BIN/benchtool" seed --endpoints "$ep" --objects "$OBJECTS"
  touch "$DIR/seeded-$OBJECTS"
fi
"$BIN/etcdctl" --endpoints "$ep" endpoint status -w table

# timed NAME CMD...: runs CMD under /usr/bin/time, appends "NAME wall_s rss_kb".
timed() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$OUT/time.tmp" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" || { echo "bench: $name failed"; cat "$OUT/$name.err"; exit 1; }
  echo "$name $(cat "$OUT/time.tmp")" >>"$OUT/runs.txt"
}
etcdctl_save() { rm -f "$DIR/etcdctl.db"; "$BIN/etcdctl" --endpoints "$ep" snapshot save "$DIR/etcdctl.db"; }
lifeboat_snap() { "${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}" snapshot --endpoints "$ep" --store "file://$DIR/store" --spool-dir "$DIR/spool" --log-format json "$@"; }
export -f etcdctl_save lifeboat_snap; export BIN ep DIR

: >"$OUT/runs.txt"
want local && for i in $(seq "$RUNS"); do
  timed etcdctl bash -c etcdctl_save
  timed lifeboat bash -c lifeboat_snap
done
rm -rf "$DIR/store"/*

# load_during NAME CMD: p99 of 200 puts/s while CMD runs (1 s before, until it ends).
load_during() {
  local name=$1; shift
  "$BIN/benchtool" load --endpoints "$ep" --rate 200 --duration 10m >"$OUT/load-$name.json" &
  local lp=$!
  sleep 1
  "$@" >/dev/null 2>&1
  sleep 0.5
  kill -TERM $lp; wait $lp || true
}
: >"$OUT/load.txt"; rm -f "$OUT"/slow-*.txt "$OUT"/cluster-*.log
want load && for i in $(seq "$RUNS"); do
  "$BIN/benchtool" load --endpoints "$ep" --rate 200 --duration 8s >"$OUT/load-idle.json"
  echo "idle $(cat "$OUT/load-idle.json")" >>"$OUT/load.txt"
  load_during etcdctl bash -c etcdctl_save
  echo "etcdctl $(cat "$OUT/load-etcdctl.json")" >>"$OUT/load.txt"
  load_during lifeboat bash -c lifeboat_snap
  echo "lifeboat $(cat "$OUT/load-lifeboat.json")" >>"$OUT/load.txt"
  # The live HashKV off (snapshot.live_hashkv=defer): on this single member
  # it is the only member, and its hash blocks every write.
  load_during lifeboat-defer bash -c "lifeboat_snap --live-hashkv defer"
  echo "lifeboat-defer $(cat "$OUT/load-lifeboat-defer.json")" >>"$OUT/load.txt"
done
rm -rf "$DIR/store"/* "$DIR/etcdctl.db"

# S3: versitygw on loopback, encryption on.
vport=$(free_port)
start_versitygw "$DIR" "$vport"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
"$BIN/age-keygen" -o "$DIR/age.key" 2>/dev/null || true
recipient=$(grep -m1 -o 'age1[0-9a-z]*' "$DIR/age.key")
s3url=http://127.0.0.1:$vport
lifeboat_s3() { "${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}" snapshot --endpoints "$ep" --store s3://bench/etcd --s3-endpoint "$s3url" --s3-path-style --s3-create-bucket --recipient "$recipient" --spool-dir "$DIR/spool" --log-format json; }
seqpipe() { "$BIN/benchtool" seqpipe --endpoints "$ep" --dir "$DIR" --bucket bench --s3-endpoint "$s3url"; }
export -f lifeboat_s3 seqpipe; export s3url recipient
want s3 && for i in $(seq "$RUNS"); do
  timed etcdctl bash -c etcdctl_save
  timed lifeboat-s3 bash -c lifeboat_s3
  timed seqpipe-s3 bash -c seqpipe
done
# Drill from S3 (fetch, decrypt, decompress, verify, restore, boot, checks)
# versus the bare minimum by hand on a local file: etcdutl snapshot
# restore + starting etcd + HashKV.
snaprev=0
if want drill; then
  rm -f "$DIR/etcdctl.db"; "$BIN/etcdctl" --endpoints "$ep" snapshot save "$DIR/etcdctl.db" >/dev/null
  snaprev=$("$BIN/etcdutl" snapshot status "$DIR/etcdctl.db" -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)["revision"])')
fi
bport=$(free_port); bpeer=$(free_port)
baseline_restore() {
  rm -rf "$DIR/bl"
  "$BIN/etcdutl" snapshot restore "$DIR/etcdctl.db" --data-dir "$DIR/bl" --name bl \
    --initial-cluster "bl=http://127.0.0.1:$bpeer" --initial-advertise-peer-urls "http://127.0.0.1:$bpeer" >/dev/null 2>&1
  "$BIN/etcd" --name bl --data-dir "$DIR/bl" --listen-client-urls "http://127.0.0.1:$bport" --advertise-client-urls "http://127.0.0.1:$bport" \
    --listen-peer-urls "http://127.0.0.1:$bpeer" --initial-advertise-peer-urls "http://127.0.0.1:$bpeer" \
    --initial-cluster "bl=http://127.0.0.1:$bpeer" --log-level error >/dev/null 2>&1 &
  local p=$!
  until "$BIN/etcdctl" --endpoints "http://127.0.0.1:$bport" endpoint health >/dev/null 2>&1; do sleep 0.05; done
  "$BIN/etcdctl" --endpoints "http://127.0.0.1:$bport" endpoint hashkv --rev "$snaprev" >/dev/null
  kill $p; wait $p 2>/dev/null || true
  rm -rf "$DIR/bl"
}
lifeboat_drill() { "${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}" drill latest --store s3://bench/etcd --s3-endpoint "$s3url" --s3-path-style --identity-file "$DIR/age.key" --scratch-dir "$DIR/scratch" --spool-dir "$DIR/spool" --log-format json -o json; }
# The same drill from a local store holding the plain snapshot: what the
# baseline does by hand, with lifeboat's checks (sha256 while copying,
# bbolt structure and HashKV of the file, key count, prefixes, a write).
lifeboat_drill_local() { "${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}" drill latest --store "file://$DIR/drillstore" --scratch-dir "$DIR/scratch" --log-format json -o json; }
export -f baseline_restore lifeboat_drill lifeboat_drill_local; export bport bpeer snaprev
want drill && ! want s3 && bash -c lifeboat_s3 >/dev/null 2>&1 # a backup to drill
want drill && { rm -rf "$DIR/drillstore"; "${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}" snapshot --endpoints "$ep" --store "file://$DIR/drillstore" --compression none --spool-dir "$DIR/spool" --log-format json >/dev/null 2>&1; }
want drill && for i in $(seq "$RUNS"); do
  timed restore-baseline bash -c baseline_restore
  timed drill-s3 bash -c lifeboat_drill
  timed restore-baseline bash -c baseline_restore
  timed drill-local bash -c lifeboat_drill_local
done
rm -rf "$DIR/drillstore"
# Looking inside a backup (issue 14), on the S3 backup with age: the first
# `get` (fetch, checks, index into a fresh cache) against `lifeboat fetch`
# of the same backup (paired: fetch, then get; -o raw: the seed's values are
# not real protobuf), then a `get` and an `ls` of
# /registry/configmaps/ (about 14 100 keys at 180 000 objects) served from
# the cache. The backup is named by id: `latest` would list the store.
if want inspect; then
  want s3 || want drill || bash -c lifeboat_s3 >/dev/null 2>&1
  lb=${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}
  s3args=(--store s3://bench/etcd --s3-endpoint "$s3url" --s3-path-style --identity-file "$DIR/age.key" --log-format json)
  iid=$("$lb" list "${s3args[@]}" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["backups"][0]["id"])')
  rm -rf "$DIR/icache"
  "$lb" ls "$iid" /registry/configmaps/ "${s3args[@]}" --cache-dir "$DIR/icache" -o json >"$OUT/inspect-ls.json"
  ikey=$(python3 -c 'import json,sys; ks=json.load(open(sys.argv[1])); print(ks[len(ks)//2]["key"])' "$OUT/inspect-ls.json")
  ikeys=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$OUT/inspect-ls.json")
  echo "bench: inspect: backup $iid, $ikeys keys under /registry/configmaps/, get $ikey"
  rm -rf "$DIR/icache" "$DIR/ifetch.db"
  for i in $(seq "$RUNS"); do
    timed inspect-fetch "$lb" fetch "$iid" "$DIR/ifetch.db" "${s3args[@]}"
    rm -f "$DIR/ifetch.db"
    timed inspect-first-get "$lb" get "$iid" "$ikey" -o raw --cache-dir "$DIR/icache" "${s3args[@]}"
    timed inspect-cached-get "$lb" get "$iid" "$ikey" -o raw --cache-dir "$DIR/icache" "${s3args[@]}"
    timed inspect-cached-ls "$lb" ls "$iid" /registry/configmaps/ --cache-dir "$DIR/icache" "${s3args[@]}"
    rm -rf "$DIR/icache"
  done
fi
kill $vgw_pid; wait $vgw_pid 2>/dev/null || true; vgw_pid=""
rm -rf "$DIR/vgw" "$DIR/etcdctl.db"

# The default 3-member case: three etcd members on this one disk, 200 puts/s
# on the leader, p99 idle, during `etcdctl snapshot save` from a follower, and
# during `lifeboat snapshot` (defaults: a follower's snapshot, HashKV from the
# other follower), with the live HashKV off, and with LIFEBOAT_BENCH_BASE_BIN.
if want cluster; then
  kill $etcd_pid; wait $etcd_pid 2>/dev/null || true # one etcd at a time on two cores
  COBJECTS=${BENCH_CLUSTER_OBJECTS:-50000}
  cdir=$DIR/cluster
  [ -f "$cdir/seeded-$COBJECTS" ] || rm -rf "$cdir"
  mkdir -p "$cdir"
  # The members' data dirs remember their peer URLs: keep the ports of the
  # run that created them.
  [ -f "$cdir/ports" ] || for _ in 1 2 3; do echo "$(free_port) $(free_port)"; done >"$cdir/ports"
  names=(c0 c1 c2); cports=(); initial=""; i=0
  while read -r cp_ pp; do
    n=${names[$i]}; i=$((i+1)); cports+=("$cp_")
    eval "peer_$n=$pp"
    initial+="${initial:+,}$n=http://127.0.0.1:$pp"
  done <"$cdir/ports"
  cpids=()
  for i in 0 1 2; do
    n=${names[$i]}; pp=$(eval echo "\$peer_$n"); c_ep=http://127.0.0.1:${cports[$i]}
    "$BIN/etcd" --name "$n" --data-dir "$cdir/$n" --quota-backend-bytes $((8<<30)) \
      --listen-client-urls "$c_ep" --advertise-client-urls "$c_ep" \
      --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
      --initial-cluster "$initial" --initial-cluster-state new --log-level error >"$cdir/$n.log" 2>&1 &
    cpids+=($!)
  done
  trap 'kill $vgw_pid ${cpids[*]} 2>/dev/null || true; wait 2>/dev/null || true' EXIT
  ceps=$(printf 'http://127.0.0.1:%s,' "${cports[@]}"); ceps=${ceps%,}
  for _ in $(seq 300); do "$BIN/etcdctl" --endpoints "$ceps" endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
  if [ ! -f "$cdir/seeded-$COBJECTS" ]; then
    echo "bench: seeding the cluster with $COBJECTS objects (once; kept in $cdir)"
    "$BIN/benchtool" seed --endpoints "http://127.0.0.1:${cports[0]}" --objects "$COBJECTS"
    touch "$cdir/seeded-$COBJECTS"
  fi
  "$BIN/etcdctl" --endpoints "$ceps" endpoint status -w table
  # leader_ep / follower_ep: from each member's status.
  cstatus() { "$BIN/etcdctl" --endpoints "$ceps" endpoint status -w json; }
  leader_ep() { cstatus | python3 -c 'import json,sys; s=json.load(sys.stdin); print(next(e["Endpoint"] for e in s if e["Status"]["header"]["member_id"]==e["Status"]["leader"]))'; }
  follower_ep() { cstatus | python3 -c 'import json,sys; s=json.load(sys.stdin); print(next(e["Endpoint"] for e in s if e["Status"]["header"]["member_id"]!=e["Status"]["leader"]))'; }
  cl_etcdctl() { rm -f "$DIR/etcdctl.db"; "$BIN/etcdctl" --endpoints "$(follower_ep)" snapshot save "$DIR/etcdctl.db"; }
  # The floor: the follower's snapshot stream read and thrown away (no
  # file, no check, no upload), what any online backup of a member costs.
  cl_stream() { "$BIN/benchtool" stream --endpoints "$(follower_ep)"; }
  cl_lifeboat() { local bin=$1; shift; "$bin" snapshot --endpoints "$ceps" --store "file://$DIR/cstore" --spool-dir "$DIR/spool" --log-format json "$@"; }
  cl_load() { # cl_load NAME CMD...: p99 of 200 puts/s on the leader while CMD runs
    local name=$1; shift
    "$BIN/benchtool" load --endpoints "$(leader_ep)" --rate 200 --duration 10m --slow "${BENCH_SLOW:-25ms}" >"$OUT/load-$name.json" 2>>"$OUT/slow-$name.txt" &
    local lp=$!
    sleep 1
    for _ in $(seq "${BENCH_CLUSTER_REPEAT:-1}"); do
      "$@" >>"$OUT/cluster-$name.log" 2>&1 || echo "bench: $name failed (see $OUT/cluster-$name.log)"
    done
    sleep 0.5
    kill -TERM $lp; wait $lp || true
    echo "$name $(cat "$OUT/load-$name.json")" >>"$OUT/load.txt"
  }
  export -f cstatus leader_ep follower_ep cl_etcdctl cl_stream cl_lifeboat; export ceps
  for i in $(seq "$RUNS"); do
    "$BIN/benchtool" load --endpoints "$(leader_ep)" --rate 200 --duration "${BENCH_CLUSTER_IDLE:-8s}" >"$OUT/load-cluster-idle.json"
    echo "cluster-idle $(cat "$OUT/load-cluster-idle.json")" >>"$OUT/load.txt"
    cl_load cluster-etcdctl bash -c cl_etcdctl
    cl_load cluster-stream bash -c cl_stream
    cl_load cluster-lifeboat bash -c "cl_lifeboat ${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}"
    cl_load cluster-lifeboat-defer bash -c "cl_lifeboat ${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat} --live-hashkv defer"
    if [ -n "${BENCH_CLUSTER_EXTRA:-}" ]; then # e.g. "--compression none": what else costs latency
      cl_load cluster-lifeboat-extra bash -c "cl_lifeboat ${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat} $BENCH_CLUSTER_EXTRA"
    fi
    if [ -n "${LIFEBOAT_BENCH_BASE_BIN:-}" ]; then
      cl_load cluster-lifeboat-base bash -c "cl_lifeboat $LIFEBOAT_BENCH_BASE_BIN"
    fi
    rm -rf "$DIR/cstore"
    sleep 3 # the next idle window must not measure this removal (ext4 frees the files' blocks in its journal commits)
  done
  grep -h '"hash_kv_endpoint"\|"snapshot verified"' "$OUT"/cluster-*.log | tail -2 || true
  kill "${cpids[@]}"; wait "${cpids[@]}" 2>/dev/null || true; cpids=()
  rm -f "$DIR/etcdctl.db"
fi

# Point-in-time recovery (issue 13): capture's recovery point, its cost on
# etcd and its memory, the replay (scripts/bench-pitr.sh).
if want pitr || want pitr-replay; then . scripts/bench-pitr.sh; fi

python3 - "$OUT" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
runs = {}
for line in open(os.path.join(out, "runs.txt")):
    name, wall, rss = line.split()
    runs.setdefault(name, []).append((float(wall), int(rss)))
load = {}
for line in open(os.path.join(out, "load.txt")):
    name, js = line.split(" ", 1)
    load.setdefault(name, []).append(json.loads(js))
med = statistics.median
order = [line.split()[0] for line in open(os.path.join(out, "runs.txt"))]
walls = [float(line.split()[1]) for line in open(os.path.join(out, "runs.txt"))]
def paired(name, base="etcdctl"):
    """Median over runs of name's wall time divided by the etcdctl run just before it:
    the machine is shared, so only runs side by side compare."""
    rs, last = [], None
    for n, w in zip(order, walls):
        if n == base:
            last = w
        elif n == name and last:
            rs.append(w / last)
    return med(rs) if rs else float("nan")
def wall(name): return med(w for w, _ in runs[name])
def rss(name): return max(r for _, r in runs[name]) / 1024
p99 = {k: med(x["p99_ms"] for x in v) for k, v in load.items()}
lines = [
  "| measure | etcdctl snapshot save | lifeboat | lifeboat / etcdctl (paired runs) |",
  "|---|---|---|---|",
]
if "lifeboat" in runs:
    lines += [
      f"| local store: wall time, median of {len(runs['lifeboat'])} (s) | {wall('etcdctl'):.2f} | {wall('lifeboat'):.2f} | {paired('lifeboat'):.2f}x |",
      f"| local store: peak RSS (MiB) | {rss('etcdctl'):.0f} | {rss('lifeboat'):.0f} | |",
    ]
if "lifeboat-s3" in runs:
    lines += [
      f"| S3 (versitygw) with age: wall time, median of {len(runs['lifeboat-s3'])} (s) | | {wall('lifeboat-s3'):.2f} | {paired('lifeboat-s3'):.2f}x |",
      f"| S3: sequential save, then compress, then upload (s) | | {wall('seqpipe-s3'):.2f} | {paired('seqpipe-s3'):.2f}x |",
      f"| S3 with age: peak RSS (MiB) | | {rss('lifeboat-s3'):.0f} | |",
    ]
if "drill-s3" in runs:
    lines += [
      f"| drill from S3 with age vs etcdutl restore + etcd start + HashKV on a local file (s) | {wall('restore-baseline'):.2f} | {wall('drill-s3'):.2f} | {paired('drill-s3', 'restore-baseline'):.2f}x |",
      f"| drill from a local store, uncompressed, vs the same baseline (s) | {wall('restore-baseline'):.2f} | {wall('drill-local'):.2f} | {paired('drill-local', 'restore-baseline'):.2f}x |",
    ]
if "inspect-first-get" in runs:
    lines += [
      f"| first `get` from S3 with age (fetch, checks, index) vs `lifeboat fetch` of the same backup (s) | {wall('inspect-fetch'):.2f} | {wall('inspect-first-get'):.2f} | {paired('inspect-first-get', 'inspect-fetch'):.2f}x |",
      f"| `get` from the cache / `ls` of /registry/configmaps/ from the cache, whole process (ms) | | {wall('inspect-cached-get')*1000:.0f} / {wall('inspect-cached-ls')*1000:.0f} | |",
      f"| peak RSS: fetch / first get / cached get / cached ls (MiB) | {rss('inspect-fetch'):.0f} | {rss('inspect-first-get'):.0f} / {rss('inspect-cached-get'):.0f} / {rss('inspect-cached-ls'):.0f} | |",
    ]
def idle_ratio(name, idle):
    """Median over runs of name's p99 divided by the idle p99 measured just before it."""
    rs, last = [], None
    for line in open(os.path.join(out, "load.txt")):
        n, js = line.split(" ", 1)
        if n == idle:
            last = json.loads(js)["p99_ms"]
        elif n == name and last:
            rs.append(json.loads(js)["p99_ms"] / last)
    return med(rs) if rs else float("nan")
if "idle" in p99:
    lines += [
      f"| p99 latency of 200 puts/s during the backup (ms); idle p99 {p99['idle']:.1f} | {p99['etcdctl']:.1f} ({idle_ratio('etcdctl', 'idle'):.1f}x idle) | {p99['lifeboat']:.1f} ({idle_ratio('lifeboat', 'idle'):.1f}x idle) | |",
    ]
if "lifeboat-defer" in p99:
    lines += [
      f"| single member, `--live-hashkv defer`: p99 (ms) | | {p99['lifeboat-defer']:.1f} ({idle_ratio('lifeboat-defer', 'idle'):.1f}x idle) | |",
    ]
if "cluster-idle" in p99:
    lines += [
      f"| 3 members, load on the leader: p99 (ms); idle p99 {p99['cluster-idle']:.1f} | {p99['cluster-etcdctl']:.1f} ({idle_ratio('cluster-etcdctl', 'cluster-idle'):.1f}x idle; from a follower) | {p99['cluster-lifeboat']:.1f} ({idle_ratio('cluster-lifeboat', 'cluster-idle'):.1f}x idle) | |",
      f"| 3 members, `--live-hashkv defer`: p99 (ms) | | {p99['cluster-lifeboat-defer']:.1f} ({idle_ratio('cluster-lifeboat-defer', 'cluster-idle'):.1f}x idle) | |",
      f"| 3 members, the floor: the follower's snapshot stream read and discarded (`benchtool stream`): p99 (ms) | {p99['cluster-stream']:.1f} ({idle_ratio('cluster-stream', 'cluster-idle'):.1f}x idle) | | |",
    ]
if "cluster-lifeboat-extra" in p99:
    lines += [
      f"| 3 members, BENCH_CLUSTER_EXTRA ({os.environ.get('BENCH_CLUSTER_EXTRA', '')}): p99 (ms) | | {p99['cluster-lifeboat-extra']:.1f} ({idle_ratio('cluster-lifeboat-extra', 'cluster-idle'):.1f}x idle) | |",
    ]
if "cluster-lifeboat-base" in p99:
    lines += [
      f"| 3 members, LIFEBOAT_BENCH_BASE_BIN: p99 (ms) | | {p99['cluster-lifeboat-base']:.1f} ({idle_ratio('cluster-lifeboat-base', 'cluster-idle'):.1f}x idle) | |",
    ]
# When the backups stall the leader: the slowest put (of those over the
# --slow threshold) that started within 0.6 s after each "backup stored".
import datetime
def stamp(t):
    t = t.rstrip("Z")
    head, _, frac = t.partition(".")
    return datetime.datetime.fromisoformat(head + "." + (frac + "000000")[:6])
after = []
for n in sorted(p99):
    sp, lp = os.path.join(out, f"slow-{n}.txt"), os.path.join(out, f"cluster-{n}.log")
    if not n.startswith("cluster-lifeboat") or not os.path.exists(sp) or not os.path.exists(lp):
        continue
    slow = [(stamp(l.split()[2]), float(l.split()[3][:-2])) for l in open(sp) if l.startswith("slow put ")]
    worst = []
    for l in open(lp):
        try:
            d = json.loads(l)
        except ValueError:
            continue
        if d.get("msg") == "backup stored":
            t = stamp(d["time"])
            near = [ms for s, ms in slow if -0.2 < (s - t).total_seconds() < 0.6]
            worst.append(f"{max(near):.0f}" if near else "-")
    after.append(f"| {n}: slowest put right after each backup was stored (ms; - none over the --slow threshold) | {' '.join(worst)} |")
if after:
    lines += ["", "| end of the backup | per window |", "|---|---|"] + after
lines += [
  "",
  "raw runs (name wall_s peak_rss_kb):",
  "```", open(os.path.join(out, "runs.txt")).read().strip(), "```",
  "load (p99 per window):",
  "```", open(os.path.join(out, "load.txt")).read().strip(), "```",
]
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
