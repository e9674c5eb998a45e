#!/usr/bin/env bash
# Copies (issue 22): `lifeboat copy` of one backup of a ~1.1 GB
# Kubernetes-like database from one S3 bucket to another (versitygw on
# loopback, age encryption on) against `lifeboat fetch` of the same
# backup, alternating runs; and the peak RSS of `lifeboat agent --once`
# (a backup, no drill) with one copy against without.
# Results: bench-out/copy.md (copy them into docs/benchmarks.md).
#
#   BENCH_OBJECTS=180000 BENCH_RUNS=3 BENCH_DIR=/var/tmp/lifeboat-bench-copy scripts/bench-copy.sh
#   BENCH_SECTIONS=agent scripts/bench-copy.sh   # one part only (copy, agent)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.bin
OBJECTS=${BENCH_OBJECTS:-180000}
RUNS=${BENCH_RUNS:-3}
DIR=${BENCH_DIR:-/var/tmp/lifeboat-bench-copy}
OUT=$PWD/bench-out
SECTIONS=" ${BENCH_SECTIONS:-copy agent} "
want() { [[ $SECTIONS == *" $1 "* ]]; }
mkdir -p "$DIR" "$OUT"
go build -o "$BIN/benchtool" ./internal/test/benchtool
go build -o "$BIN/age-keygen" filippo.io/age/cmd/age-keygen

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
cport=$(free_port); pport=$(free_port); vport=$(free_port)
ep=http://127.0.0.1:$cport
fresh=0
[ -f "$DIR/seeded-$OBJECTS" ] || { rm -rf "$DIR/etcd"; fresh=1; }
"$BIN/etcd" --name bench --data-dir "$DIR/etcd" --quota-backend-bytes $((8<<30)) \
  --listen-client-urls "$ep" --advertise-client-urls "$ep" \
  --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "bench=http://127.0.0.1:$pport" --log-level error >"$DIR/etcd.log" 2>&1 &
etcd_pid=$!
rm -rf "$DIR/vgw"; mkdir -p "$DIR/vgw/data" "$DIR/vgw/versions"
"$BIN/versitygw" --port "127.0.0.1:$vport" --access bench --secret bench-secret --health /health \
  posix --versioning-dir "$DIR/vgw/versions" "$DIR/vgw/data" >"$DIR/vgw.log" 2>&1 &
vgw_pid=$!
trap 'kill $etcd_pid $vgw_pid 2>/dev/null; wait 2>/dev/null || true' EXIT
for _ in $(seq 150); do "$BIN/etcdctl" --endpoints "$ep" endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$vport/health" >/dev/null && break; sleep 0.1; done
if [ $fresh = 1 ]; then
  echo "bench: seeding $OBJECTS objects (once; kept in $DIR)"
  "$BIN/benchtool" seed --endpoints "$ep" --objects "$OBJECTS"
  touch "$DIR/seeded-$OBJECTS"
fi
"$BIN/etcdctl" --endpoints "$ep" endpoint status -w table

export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
rm -f "$DIR/age.key"; "$BIN/age-keygen" -o "$DIR/age.key" 2>/dev/null
recipient=$(grep -m1 -o 'age1[0-9a-z]*' "$DIR/age.key")
s3=(--s3-endpoint "http://127.0.0.1:$vport" --s3-path-style --s3-create-bucket)
# lb ARGS: lifeboat with the bench's store, etcd and keys (a script, so that /usr/bin/time runs it).
cat >"$DIR/lb" <<LB
#!/usr/bin/env bash
exec "$BIN/lifeboat" "\$@" --endpoints "$ep" --store s3://bench/etcd ${s3[*]} --recipient "$recipient" --identity-file "$DIR/age.key" \\
  --spool-dir "$DIR/spool" --scratch-dir "$DIR/scratch" --log-format json
LB
chmod +x "$DIR/lb"
lb() { "$DIR/lb" "$@"; }
lb snapshot >/dev/null 2>"$OUT/copy-snapshot.err"

# timed NAME CMD...: runs CMD under /usr/bin/time, appends "NAME wall_s rss_kb".
timed() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$OUT/time.tmp" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" || { echo "bench: $name failed"; cat "$OUT/$name.err"; exit 1; }
  echo "$name $(cat "$OUT/time.tmp")" >>"$OUT/copy-runs.txt"
}
: >"$OUT/copy-runs.txt"
want copy && for i in $(seq "$RUNS"); do
  rm -f "$DIR/fetched.db"
  timed fetch "$DIR/lb" fetch latest "$DIR/fetched.db"
  timed copy "$DIR/lb" copy --copy "s3://bench-dr-$i/etcd"
done
rm -f "$DIR/fetched.db"
# The copy keeps the newest backup only (--keep-last 1: the copies'
# policy, the primary is not pruned here), so that each run copies the
# backup it took, as a running agent does.
want agent && for i in $(seq "$RUNS"); do
  timed agent-once "$DIR/lb" agent --once --listen "" --lock=false --drill-schedule "" --snapshot-schedule "@every 1h"
  timed agent-once-copy "$DIR/lb" agent --once --listen "" --lock=false --drill-schedule "" --snapshot-schedule "@every 1h" --copy "s3://bench-agent-$i/etcd" --keep-last 1
done
{
  echo "| run | wall s | peak RSS MiB |"
  echo "|---|---|---|"
  awk '{ printf "| %s | %s | %.0f |\n", $1, $2, $3/1024 }' "$OUT/copy-runs.txt"
  echo
  for n in fetch copy agent-once agent-once-copy; do
    awk -v n=$n '$1==n { print $2, $3 }' "$OUT/copy-runs.txt" | sort -n | awk -v n=$n '{ w[NR]=$1; r[NR]=$2 } END { m=int((NR+1)/2); printf "%s: median wall %s s, median peak RSS %.0f MiB\n", n, w[m], r[m]/1024 }'
  done
} >"$OUT/copy.md"
cat "$OUT/copy.md"
