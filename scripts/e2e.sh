#!/usr/bin/env bash
# End-to-end: the built lifeboat binary against the real etcd binary, the
# way an operator runs it. Exits non-zero on the first failed expectation.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.bin
LB=$BIN/lifeboat
work=$(mktemp -d)
etcd_pid=""
plain_pid=""
cleanup() {
  [ -n "$etcd_pid" ] && kill "$etcd_pid" 2>/dev/null && wait "$etcd_pid" 2>/dev/null || true
  [ -n "$plain_pid" ] && kill "$plain_pid" 2>/dev/null && wait "$plain_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "e2e: FAIL: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

cport=$(free_port); pport=$(free_port)
ep=http://127.0.0.1:$cport
"$BIN/etcd" --name e2e --data-dir "$work/etcd" \
  --listen-client-urls "$ep" --advertise-client-urls "$ep" \
  --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "e2e=http://127.0.0.1:$pport" --log-level error >"$work/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do "$BIN/etcdctl" --endpoints "$ep" endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
"$BIN/etcdctl" --endpoints "$ep" endpoint health >/dev/null || fail "etcd did not start: $(cat "$work/etcd.log")"

for i in $(seq 1 300); do echo "put /registry/configmaps/default/cm-$i value-$i-$(head -c 600 /dev/urandom | base64 -w0)"; done \
  | sed 's/^put //' | while read -r k v; do "$BIN/etcdctl" --endpoints "$ep" put "$k" "$v" >/dev/null; done

export ETCDCTL_ENDPOINTS=$ep
store=file://$work/store
common=(--store "$store" --spool-dir "$work/spool" --log-format json)

echo "e2e: lifeboat snapshot"
"$LB" snapshot "${common[@]}" >"$work/snap.out" 2>"$work/snap.err" || fail "snapshot exited $?: $(cat "$work/snap.err")"
grep -q "backup .* stored" "$work/snap.out" || fail "no summary: $(cat "$work/snap.out")"
[ -z "$(ls -A "$work/spool")" ] || fail "spool not empty: $(ls -A "$work/spool")"

echo "e2e: lifeboat list -o json"
"$LB" list "${common[@]}" -o json >"$work/list.json"
python3 - "$work/list.json" <<'PY' || fail "list json"
import json, sys
d = json.load(open(sys.argv[1]))
b = d["backups"]
assert len(b) == 1, b
m = b[0]["manifest"]
assert b[0]["state"] == "ok"
assert m["total_keys"] == 300, m["total_keys"]
assert m["hash_kv_status"] == "match", m["hash_kv_status"]
PY

echo "e2e: lifeboat verify latest"
"$LB" verify latest "${common[@]}" >/dev/null || fail "verify latest"

echo "e2e: modes are 0600/0700"
find "$work/store" -type f ! -perm 0600 | grep . && fail "store file not 0600"
find "$work/store" -mindepth 1 -type d ! -perm 0700 | grep . && fail "store dir not 0700"

echo "e2e: recovering without lifeboat: sha256sum, age -d | zstd -d, then etcdutl snapshot restore"
# age and age-keygen are built from lifeboat's own age module (make tools);
# zstd is Debian's (installed here when missing and we may).
[ -x "$BIN/age" ] && [ -x "$BIN/age-keygen" ] || make -s "$BIN/age" >/dev/null
[ -x "$BIN/etcdutl" ] || make -s "$BIN/etcdutl" >/dev/null
if ! command -v zstd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -qq zstd >/dev/null || fail "apt-get install zstd failed"
  else
    fail "the zstd CLI is needed (Debian/Ubuntu: apt-get install zstd)"
  fi
fi
"$BIN/age-keygen" -o "$work/key.txt" 2>/dev/null
pub=$("$BIN/age-keygen" -y "$work/key.txt")
enc=(--store "$store" --spool-dir "$work/spool" --log-format json --cluster enc --recipient "$pub" --identity-file "$work/key.txt")
"$LB" snapshot "${enc[@]}" >/dev/null 2>"$work/enc.err" || fail "encrypted snapshot: $(cat "$work/enc.err")"
obj=$(find "$work/store/enc" -name '*.db.zst.age')
[ -f "$obj" ] || fail "no encrypted object in $work/store/enc"
manifest=${obj%.db.zst.age}.json
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["object_sha256"])' "$manifest")
[ "$(sha256sum <"$obj" | cut -d' ' -f1)" = "$want" ] || fail "object sha256 differs from the manifest's"
"$BIN/age" -d -i "$work/key.txt" <"$obj" | zstd -q -d >"$work/plain.db" || fail "age -d | zstd -d"
"$BIN/etcdutl" snapshot restore "$work/plain.db" --data-dir "$work/plain-data" --name plain \
  --initial-cluster "plain=http://127.0.0.1:1" --initial-advertise-peer-urls "http://127.0.0.1:1" \
  >"$work/etcdutl.log" 2>&1 || fail "etcdutl snapshot restore of the age|zstd output: $(cat "$work/etcdutl.log")"
pcport=$(free_port); ppport=$(free_port)
"$BIN/etcd" --name plain --data-dir "$work/plain-data" \
  --listen-client-urls "http://127.0.0.1:$pcport" --advertise-client-urls "http://127.0.0.1:$pcport" \
  --listen-peer-urls "http://127.0.0.1:$ppport" --initial-advertise-peer-urls "http://127.0.0.1:1" \
  --initial-cluster "plain=http://127.0.0.1:1" --log-level error >"$work/plain-etcd.log" 2>&1 &
plain_pid=$!
n=""
for _ in $(seq 100); do
  n=$(ETCDCTL_ENDPOINTS="http://127.0.0.1:$pcport" "$BIN/etcdctl" get --prefix /registry/configmaps/ --count-only -w fields 2>/dev/null | awk '/"Count"/ {print $3}') && [ -n "$n" ] && break
  sleep 0.2
done
kill "$plain_pid"; wait "$plain_pid" 2>/dev/null || true; plain_pid=""
[ "$n" = 300 ] || fail "etcd on the hand-restored dir has $n configmaps, want 300: $(cat "$work/plain-etcd.log")"

echo "e2e: lifeboat fetch latest FILE gives the same snapshot file, which etcdutl restores"
"$LB" fetch latest "${enc[@]}" "$work/fetched.db" >/dev/null 2>"$work/fetch.err" || fail "fetch: $(cat "$work/fetch.err")"
[ "$(stat -c %a "$work/fetched.db")" = 600 ] || fail "fetched file mode $(stat -c %a "$work/fetched.db")"
cmp -s "$work/fetched.db" "$work/plain.db" || fail "fetch output differs from age -d | zstd -d"
"$BIN/etcdutl" snapshot restore "$work/fetched.db" --data-dir "$work/fetched-data" \
  >"$work/etcdutl.log" 2>&1 || fail "etcdutl snapshot restore of the fetched file: $(cat "$work/etcdutl.log")"
set +e
"$LB" fetch latest "${enc[@]}" "$work/fetched.db" >/dev/null 2>&1; rc=$?
set -e
[ $rc = 1 ] || fail "fetch onto an existing file exited $rc, want 1"

echo "e2e: compression s2: age -d | s2d -c - gives the snapshot lifeboat fetch gives, which etcdutl restores"
[ -x "$BIN/s2d" ] || make -s "$BIN/s2d" >/dev/null
s2=(--store "$store" --spool-dir "$work/spool" --log-format json --cluster s2 --compression s2 --recipient "$pub" --identity-file "$work/key.txt")
"$LB" snapshot "${s2[@]}" >/dev/null 2>"$work/s2.err" || fail "s2 snapshot: $(cat "$work/s2.err")"
obj=$(find "$work/store/s2" -name '*.db.s2.age')
[ -f "$obj" ] || fail "no .db.s2.age object in $work/store/s2"
"$LB" verify latest "${s2[@]}" >/dev/null 2>"$work/s2.err" || fail "verify of the s2 backup: $(cat "$work/s2.err")"
"$LB" fetch latest "${s2[@]}" "$work/s2-fetched.db" >/dev/null 2>"$work/s2.err" || fail "fetch of the s2 backup: $(cat "$work/s2.err")"
"$BIN/age" -d -i "$work/key.txt" <"$obj" | "$BIN/s2d" -q -c - >"$work/s2-plain.db" || fail "age -d | s2d -c -"
cmp -s "$work/s2-fetched.db" "$work/s2-plain.db" || fail "fetch of the s2 backup differs from age -d | s2d -c -"
"$BIN/etcdutl" snapshot restore "$work/s2-plain.db" --data-dir "$work/s2-data" \
  >"$work/etcdutl.log" 2>&1 || fail "etcdutl snapshot restore of the age|s2d output: $(cat "$work/etcdutl.log")"

echo "e2e: a corrupted object fails verify with exit 1"
obj=$(find "$work/store" -name "*.zst" -print -quit)
printf 'X' | dd of="$obj" bs=1 seek=100 conv=notrunc status=none
set +e
"$LB" verify latest "${common[@]}" >/dev/null 2>"$work/verify.err"; rc=$?
set -e
[ $rc = 1 ] || fail "verify of corrupt object exited $rc, want 1"
grep -q "does not match its manifest" "$work/verify.err" || fail "verify error: $(cat "$work/verify.err")"

echo "e2e: bad config exits 2"
set +e
"$LB" snapshot --store ftp://nowhere >/dev/null 2>&1; rc=$?
set -e
[ $rc = 2 ] || fail "bad store URL exited $rc, want 2"

echo "e2e: etcd down exits 1, nothing stored"
kill "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true; etcd_pid=""
before=$(find "$work/store" -type f | wc -l)
set +e
"$LB" snapshot "${common[@]}" --dial-timeout 1s >/dev/null 2>"$work/down.err"; rc=$?
set -e
[ $rc = 1 ] || fail "snapshot with etcd down exited $rc, want 1"
[ "$(wc -l <"$work/down.err")" = 1 ] || fail "want one error line, got: $(cat "$work/down.err")"
[ "$(find "$work/store" -type f | wc -l)" = "$before" ] || fail "something was stored"
[ -z "$(ls -A "$work/spool")" ] || fail "spool not empty"

echo "e2e: lifeboat demo"
(cd "$work" && "$LB" demo --objects 500 >"$work/demo.out" 2>&1) || fail "demo: $(cat "$work/demo.out")"
for want in "done: backup" "capture stored every revision through" "marked for deletion at revision" \
	"keys of namespace payments-prod are back" "kind: Deployment" "point in time: namespace payments-prod"; do
	grep -q "$want" "$work/demo.out" || fail "demo output lacks \"$want\": $(cat "$work/demo.out")"
done

echo "e2e: ok"
