#!/usr/bin/env bash
# bench-scale.sh: issue 31's big-cluster bench. One real etcd (the binary,
# a 16 GiB quota: the capture section's burst adds revisions) seeded with Kubernetes-like keys of 1–16 KiB, updated,
# partly deleted and compacted (so the file has free pages) to about SIZE,
# then every command end to end beside what a user runs instead:
#
#   snapshot  `etcdctl snapshot save`  vs `lifeboat snapshot` to S3 (versitygw) with age
#   verify    `lifeboat verify latest` (no baseline: time and memory per GB)
#   drill     the user's pipeline (age -d | zstd -d, etcdutl restore, etcd, hashkv) vs `lifeboat drill latest`
#   restore3  the user's (age -d | zstd -d once, `etcdutl snapshot restore` ×3) vs
#             `lifeboat restore latest` of 3 members from one download
#   inspect   the first `lifeboat ls` and `lifeboat get` of the backup
#   capture   `lifeboat agent --capture` (BENCH_CAPTURE_ARGS: more agent flags) started on the database while
#             `benchtool kube` writes 2 000 times a second: its anchor
#             snapshot of the whole database taken under that burst, then
#             60 s of capture at 1 s (peak RSS of the agent over all of it)
#
# Each under /usr/bin/time (wall, user+sys CPU, peak RSS), RUNS pairs, the
# runs of a pair alternating. Results: bench-out/scale-SIZE.md (the table,
# seconds per GB beside the ratios) and bench-out/scale-SIZE-runs.txt.
#
#   make bench-scale SIZE=2GB                  # or 1GB, 4GB, 8GB (whole GB)
#   BENCH_RUNS=3 BENCH_SECTIONS="snapshot drill" scripts/bench-scale.sh 8GB
#
# The seeded data dir is kept in $BENCH_DIR (default /var/tmp/lifeboat-scale/SIZE);
# disk needed, checked per section before anything starts (a section that
# does not fit is skipped, named with what it needs, and the results say
# so): about SIZE + 1 GiB to seed (the database, and etcd's WAL, purged
# with a small --snapshot-count), SIZE/4 per
# stored backup (RUNS + 1), and the largest step of each section: 4 × SIZE
# for restore3, 2 for drill, 1 for the others; each step's output is
# deleted before the next.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.bin
SIZE=${1:-${SIZE:-1GB}}
case $SIZE in
[1-9]GB | [1-9][0-9]GB) mb=$((${SIZE%GB} * 1024)) ;;
[1-9][0-9][0-9]MB) mb=${SIZE%MB} ;; # a smoke run of the script
*)
	echo "bench-scale: size $SIZE: want whole gigabytes, e.g. 1GB, 2GB, 8GB (or 100MB-999MB to try the script)" >&2
	exit 2
	;;
esac
RUNS=${BENCH_RUNS:-1}
DIR=${BENCH_DIR:-/var/tmp/lifeboat-scale}/$SIZE
OUT=$PWD/bench-out
LB=${LIFEBOAT_BENCH_BIN:-$BIN/lifeboat}
SECTIONS=" ${BENCH_SECTIONS:-snapshot verify drill restore3 inspect capture} "
want() { [[ $SECTIONS == *" $1 "* ]]; }
mkdir -p "$DIR"
# Disk, checked first (before the tools, a build or a seed), per section:
# the base is the seeded database (SIZE and 1 GiB of etcd's WAL: the
# bench etcd runs with --snapshot-count 100, so etcd purges its WAL down to
# --max-wals files as it seeds; with etcd's default every WAL file of the
# seed was kept, 3.5 GB beside the 4.1 GB database at 4GB; not counted
# when it is kept from an earlier run) and the stored backups (one per snapshot run and the first one,
# each counted at SIZE/4: zstd and age made the 2.08 GB database's backup
# 406 MB, 0.195 of it); each section adds its largest step's copies (step_of). Each step's
# output is deleted before the next (clean_step), so the steps' copies are
# never on disk together. A section that does not fit is skipped, named
# with the disk it needs, and the results say so; when none fits, the
# run stops with an error.
# step_of SECTION: its largest step's copies, in SIZEs: snapshot the
# etcdctl copy (lifeboat's spool is smaller), verify its spool, drill the
# user's decoded copy and its etcd's data dir, restore3 the user's decoded
# copy and 3 restored members, inspect the cache's copy, capture the
# anchor snapshot's spool and what the burst adds to the database.
step_of() {
	case $1 in
	drill | capture) echo 2 ;;
	restore3) echo 4 ;;
	*) echo 1 ;;
	esac
}
base_kb=$(((RUNS + 1) * mb * 256))
[ -f "$DIR/seeded" ] || base_kb=$((base_kb + mb * 1024 + (1 << 20)))
free_kb=$(df -Pk "$DIR" | awk 'NR==2 {print $4}')
kept="" SKIPPED=""
for s in $SECTIONS; do
	need_kb=$((base_kb + $(step_of "$s") * mb * 1024))
	if [ "$free_kb" -lt "$need_kb" ]; then
		msg="$s (needs about $((need_kb >> 20)) GiB: $(step_of "$s") × $SIZE for its largest step beside the base of $((base_kb >> 20)) GiB; $((free_kb >> 20)) GiB free)"
		echo "bench-scale: skipping $msg" >&2
		SKIPPED="$SKIPPED${SKIPPED:+; }$msg"
	else
		kept="$kept $s"
	fi
done
if [ -z "$kept" ]; then
	echo "bench-scale: not enough disk for a $SIZE run: $DIR has $((free_kb >> 20)) GiB free, no section fits beside the base of $((base_kb >> 20)) GiB" \
		"(the seeded database, $SIZE and 1 GiB of WAL unless kept from an earlier run, and $((RUNS + 1)) stored backups at $SIZE/4 each);" \
		"free space there, or set BENCH_DIR to a directory on a larger disk" >&2
	exit 1
fi
SECTIONS=" $kept "
mkdir -p "$OUT"
for t in etcd etcdctl etcdutl age age-keygen versitygw; do
	[ -x "$BIN/$t" ] || {
		echo "bench-scale: no $BIN/$t: run make tools" >&2
		exit 1
	}
done
[ -x "$LB" ] || {
	echo "bench-scale: no $LB: run make build" >&2
	exit 1
}
command -v zstd >/dev/null || {
	echo "bench-scale: the user's pipeline needs the zstd command (apt-get install zstd)" >&2
	exit 1
}
go build -o "$BIN/benchtool" ./internal/test/benchtool
. scripts/bench-lib.sh
[ -f "$DIR/ports" ] || echo "$(free_port) $(free_port)" >"$DIR/ports"
read -r cport pport <"$DIR/ports"
ep=http://127.0.0.1:$cport
[ -f "$DIR/seeded" ] || rm -rf "$DIR/etcd"
c=http://127.0.0.1:$cport p=http://127.0.0.1:$pport
"$BIN/etcd" --name bench --data-dir "$DIR/etcd" --quota-backend-bytes $((16 << 30)) --snapshot-count 100 \
	--listen-client-urls "$c" --advertise-client-urls "$c" \
	--listen-peer-urls "$p" --initial-advertise-peer-urls "$p" \
	--initial-cluster "bench=$p" --log-level error >"$DIR/etcd.log" 2>&1 &
etcd_pid=$!
vgw_pid=""
trap 'kill $etcd_pid $vgw_pid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 300); do "$BIN/etcdctl" --endpoints "$ep" endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
if [ ! -f "$DIR/seeded" ]; then
	# About 8.5 KiB of value per object, and the seed's history and free
	# pages around it: ~11 KiB of file per object (measured at 1 GB).
	objects=$((mb * 93))
	echo "bench-scale: seeding $objects objects of 1–16 KiB (once; kept in $DIR)"
	"$BIN/benchtool" seed --endpoints "$ep" --objects "$objects" --min-value 1024 --max-value 16384
	touch "$DIR/seeded"
fi
"$BIN/etcdctl" --endpoints "$ep" endpoint status -w table
# The key every agent's cluster holds (its lock, under a lease): restore
# removes it from what it restores, so restore3 measures that removal, as
# on a real cluster's backup (a backup without it skips the removal).
lease=$("$BIN/etcdctl" --endpoints "$ep" lease grant 3600 | awk '{print $2}')
"$BIN/etcdctl" --endpoints "$ep" put --lease="$lease" /lifeboat/lock/bench/holder bench >/dev/null
db=$(stat -c %s "$DIR/etcd/member/snap/db")

vport=$(free_port)
rm -rf "$DIR/spool" "$DIR/scratch" "$DIR/r"
mkdir -p "$DIR/spool" "$DIR/scratch"
start_versitygw "$DIR" "$vport"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
[ -f "$DIR/age.key" ] || "$BIN/age-keygen" -o "$DIR/age.key" 2>/dev/null
recipient=$(grep -m1 -o 'age1[0-9a-z]*' "$DIR/age.key")
S3ARGS="--store s3://bench/etcd --s3-endpoint http://127.0.0.1:$vport --s3-path-style"
peers="m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802,m3=http://127.0.0.1:23803"

etcdctl_save() { rm -f "$DIR/etcdctl.db" && "$BIN/etcdctl" --endpoints "$ep" snapshot save "$DIR/etcdctl.db" && rm -f "$DIR/etcdctl.db"; }
lifeboat_snapshot() { exec "$LB" snapshot --endpoints "$ep" $S3ARGS --s3-create-bucket --recipient "$recipient" --spool-dir "$DIR/spool" --log-format json; }
lifeboat_verify() { exec "$LB" verify latest $S3ARGS --identity-file "$DIR/age.key" --spool-dir "$DIR/spool" --log-format json; }
newest_object() { find "$DIR/vgw/data/bench/etcd" -name '*.db.*.age' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2; }
bport=$(free_port)
bpeer=$(free_port)
user_drill() {
	rm -rf "$DIR/ud" "$DIR/ud.db"
	"$BIN/age" -d -i "$DIR/age.key" "$(newest_object)" | zstd -q -d -o "$DIR/ud.db"
	"$BIN/etcdutl" snapshot restore "$DIR/ud.db" --data-dir "$DIR/ud" --name ud \
		--initial-cluster "ud=http://127.0.0.1:$bpeer" --initial-advertise-peer-urls "http://127.0.0.1:$bpeer" >/dev/null 2>&1
	"$BIN/etcd" --name ud --data-dir "$DIR/ud" --quota-backend-bytes $((10 << 30)) \
		--listen-client-urls "http://127.0.0.1:$bport" --advertise-client-urls "http://127.0.0.1:$bport" \
		--listen-peer-urls "http://127.0.0.1:$bpeer" --initial-advertise-peer-urls "http://127.0.0.1:$bpeer" \
		--initial-cluster "ud=http://127.0.0.1:$bpeer" --log-level error >/dev/null 2>&1 &
	local p=$!
	until "$BIN/etcdctl" --endpoints "http://127.0.0.1:$bport" endpoint health >/dev/null 2>&1; do sleep 0.05; done
	"$BIN/etcdctl" --endpoints "http://127.0.0.1:$bport" endpoint hashkv >/dev/null
	kill $p
	wait $p 2>/dev/null || true
	rm -rf "$DIR/ud" "$DIR/ud.db"
}
lifeboat_drill() { exec "$LB" drill latest $S3ARGS --identity-file "$DIR/age.key" --scratch-dir "$DIR/scratch" --spool-dir "$DIR/spool" --log-format json -o json; }
user_restore3() {
	rm -rf "$DIR/r" "$DIR/ur.db"
	"$BIN/age" -d -i "$DIR/age.key" "$(newest_object)" | zstd -q -d -o "$DIR/ur.db"
	for m in m1 m2 m3; do
		"$BIN/etcdutl" snapshot restore "$DIR/ur.db" --data-dir "$DIR/r/$m" --name "$m" \
			--initial-cluster "$peers" --initial-advertise-peer-urls "http://127.0.0.1:2380${m#m}" >/dev/null 2>&1
	done
	rm -rf "$DIR/r" "$DIR/ur.db"
}
lifeboat_restore3() {
	rm -rf "$DIR/r"
	exec "$LB" restore latest $S3ARGS --identity-file "$DIR/age.key" --spool-dir "$DIR/spool" \
		--data-dir "$DIR/r/{name}" --initial-cluster "$peers" --log-format json
}
# The first ls and get of the backup: each with an empty cache (fetch, check, index).
lifeboat_ls() { rm -rf "$DIR/cache" && exec "$LB" ls latest / $S3ARGS --identity-file "$DIR/age.key" --cache-dir "$DIR/cache" --log-format json; }
lifeboat_get() { rm -rf "$DIR/cache" && exec "$LB" get latest /registry/namespaces/default -o raw $S3ARGS --identity-file "$DIR/age.key" --cache-dir "$DIR/cache" --log-format json; }
# The agent with capture on a fresh prefix (so it takes its anchor
# snapshot of the whole database) while benchtool kube writes 2 000 times
# a second; a watcher stops the load and the agent (SIGTERM) 60 s after
# the capture is up with a durable point. exec: the measured process is
# the agent. The load's figures go to scale-capture-load.json.
capture_burst() {
	local me=$$ load m=http://127.0.0.1:$mport/metrics
	"$BIN/benchtool" kube --endpoints "$ep" --objects "$kobjects" --rate 2000 --max-value 2048 --duration 2h --metrics "$m" \
		>"$OUT/scale-capture-load.json" 2>"$OUT/scale-capture-load.err" &
	load=$!
	(
		for _ in $(seq 3600); do
			if "$BIN/benchtool" scrape --metrics "$m" 2>/dev/null | python3 -c 'import json,sys; m=json.load(sys.stdin); sys.exit(0 if m.get("lifeboat_capture_up")==1 and m.get("lifeboat_capture_revision",0)>0 and m.get("lifeboat_capture_recovery_point_timestamp_seconds",0)>0 else 1)' 2>/dev/null; then
				echo "capture up at $(date -u +%T)" >>"$OUT/scale-capture-load.err"
				sleep 60
				break
			fi
			sleep 1
		done
		kill -TERM "$load"
		wait "$load" 2>/dev/null
		kill -TERM "$me"
	) >/dev/null 2>&1 &
	exec "$LB" agent --endpoints "$ep" --store "s3://bench/burst-$(date +%s)" --s3-endpoint "http://127.0.0.1:$vport" --s3-path-style \
		--recipient "$recipient" --identity-file "$DIR/age.key" --capture --capture-interval 1s --listen "127.0.0.1:$mport" \
		--spool-dir "$DIR/spool" --scratch-dir "$DIR/scratch" --snapshot-schedule "@every 24h" --drill-schedule "" --log-format json ${BENCH_CAPTURE_ARGS:-}
}
mport=$(free_port)
kobjects=$((mb * 93))
export -f etcdctl_save lifeboat_snapshot lifeboat_verify newest_object user_drill lifeboat_drill user_restore3 lifeboat_restore3 lifeboat_ls lifeboat_get capture_burst
export BIN LB DIR ep S3ARGS recipient bport bpeer peers mport kobjects vport OUT

runs=$OUT/scale-$SIZE-runs.txt
: >"$runs"
# timed NAME CMD...: CMD under /usr/bin/time; appends "NAME wall user sys
# rss_kb self_kb" to the runs: rss_kb is the largest of the process and
# its children (a drill's throwaway etcd maps the whole database), self_kb
# the peak of the command's own process (VmHWM; the lifeboat_* functions
# exec lifeboat), sampled every 50 ms.
timed() {
	local name=$1 pid child hwm=0 v
	shift
	/usr/bin/time -f "%e %U %S %M" -o "$OUT/time.tmp" "$@" >"$OUT/scale-$name.out" 2>"$OUT/scale-$name.err" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		child=$(pgrep -P "$pid" | head -1 || true)
		if [ -n "$child" ]; then
			v=$(awk '/^VmHWM/ {print $2}' "/proc/$child/status" 2>/dev/null || true)
			[ -n "$v" ] && [ "$v" -gt "$hwm" ] && hwm=$v
		fi
		sleep 0.05
	done
	wait "$pid" || {
		echo "bench-scale: $name failed:"
		tail -20 "$OUT/scale-$name.err"
		exit 1
	}
	echo "$name $(cat "$OUT/time.tmp") $hwm" >>"$runs"
	clean_step
}
# clean_step deletes what a step left (restored members, the drill's and
# the user's copies, the cache, the scratch and spool contents): the next
# step starts with the disk the check above counted.
clean_step() {
	rm -rf "$DIR/r" "$DIR/ud" "$DIR/ud.db" "$DIR/ur.db" "$DIR/etcdctl.db" "$DIR/cache"
	find "$DIR/spool" "$DIR/scratch" -mindepth 1 -delete 2>/dev/null || true
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bash -c lifeboat_snapshot >/dev/null 2>&1 # the bucket, the page cache, a backup to read
for _ in $(seq "$RUNS"); do
	if want snapshot; then timed etcdctl bash -c etcdctl_save && timed snapshot bash -c lifeboat_snapshot; fi
	if want verify; then timed verify bash -c lifeboat_verify; fi
	if want drill; then timed user-drill bash -c user_drill && timed drill bash -c lifeboat_drill; fi
	if want restore3; then timed user-restore3 bash -c user_restore3 && timed restore3 bash -c lifeboat_restore3; fi
	if want inspect; then timed ls bash -c lifeboat_ls && timed get bash -c lifeboat_get; fi
	if want capture; then timed capture bash -c capture_burst; fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$runs" "$load_before" "$load_after" "$db" "$RUNS" "$SIZE" >"$OUT/scale-$SIZE.md" <<'EOF'
import statistics as st, sys
runs, lb, la, db, n, size = sys.argv[1:]
gb = int(db) / 1e9
rows = {}
for line in open(runs):
    name, wall, user, sys_, rss, own = line.split()
    rows.setdefault(name, []).append((float(wall), float(user) + float(sys_), int(rss) / 1024, int(own) / 1024))
med = st.median
print(f"{size}: database {int(db) / (1 << 30):.2f} GiB ({gb:.2f} GB), {n} run(s) of each; load average before {lb}, after {la}\n")
print("| command | wall | s per GB | CPU | peak RSS, lifeboat's own | peak RSS with children | baseline | baseline wall | wall ratio | baseline CPU | baseline RSS |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name, label, base, blabel in [
    ("snapshot", "snapshot to S3 with age", "etcdctl", "etcdctl snapshot save"),
    ("verify", "verify latest", None, ""),
    ("drill", "drill latest", "user-drill", "age -d \\| zstd -d, etcdutl, etcd, hashkv"),
    ("restore3", "restore latest, 3 members", "user-restore3", "age -d \\| zstd -d, etcdutl restore ×3"),
    ("ls", "first ls of the backup", None, ""),
    ("get", "first get of a key", None, ""),
    ("capture", "agent: anchor snapshot under 2 000 writes/s, then 60 s of capture", None, ""),
]:
    if name not in rows:
        continue
    l = rows[name]
    w, c, r, o = (med([x[i] for x in l]) for i in range(4))
    cells = [label, f"{w:.1f} s", f"{w / gb:.1f}", f"{c:.1f} s", f"{o:.0f} MiB", f"{r:.0f} MiB"]
    if base and base in rows:
        b = rows[base]
        ratio = med([y[0] / x[0] for x, y in zip(b, l)])
        cells += [blabel, f"{med([x[0] for x in b]):.1f} s", f"{ratio:.2f}×", f"{med([x[1] for x in b]):.1f} s", f"{med([x[2] for x in b]):.0f} MiB"]
    else:
        cells += ["", "", "", "", ""]
    print("| " + " | ".join(cells) + " |")
EOF
[ -z "$SKIPPED" ] || echo "
Skipped for disk: $SKIPPED." >>"$OUT/scale-$SIZE.md"
cat "$OUT/scale-$SIZE.md"
