#!/usr/bin/env bash
# p99 of 200 puts/s: no watcher vs a bare etcdctl watch of the keyspace (the floor of any capture).
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/.bin}
D=/var/tmp/watchfloor; rm -rf $D; mkdir -p $D
ep=http://127.0.0.1:23791
$BIN/etcd --name wf --data-dir $D/etcd --listen-client-urls $ep --advertise-client-urls $ep \
  --listen-peer-urls http://127.0.0.1:23801 --initial-advertise-peer-urls http://127.0.0.1:23801 \
  --initial-cluster wf=http://127.0.0.1:23801 --log-level error > $D/etcd.log 2>&1 &
epid=$!
trap 'kill $epid 2>/dev/null; wait' EXIT
for _ in $(seq 100); do $BIN/etcdctl --endpoints $ep endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
$BIN/benchtool seed --endpoints $ep --objects 2000 --min-value 1024 --max-value 4096 >/dev/null
for i in 1 2 3; do
  echo "off $(cut -d' ' -f1 /proc/loadavg) $($BIN/benchtool load --endpoints $ep --rate 200 --duration 45s)"
  $BIN/etcdctl --endpoints $ep watch --prefix '' > /dev/null 2>&1 &
  wp=$!
  sleep 1
  echo "watch $(cut -d' ' -f1 /proc/loadavg) $($BIN/benchtool load --endpoints $ep --rate 200 --duration 45s)"
  kill $wp; wait $wp 2>/dev/null || true
done
