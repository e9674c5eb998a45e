# bench-lib.sh: what the bench scripts share (sourced, not run). Needs BIN.

# free_port prints a free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# start_bench_etcd DATA_DIR CLIENT_PORT PEER_PORT LOG: a single-member etcd
# named bench with an 8 GiB quota in the background; etcd_pid is its pid.
start_bench_etcd() {
  local c=http://127.0.0.1:$2 p=http://127.0.0.1:$3
  "$BIN/etcd" --name bench --data-dir "$1" --quota-backend-bytes $((8<<30)) \
    --listen-client-urls "$c" --advertise-client-urls "$c" \
    --listen-peer-urls "$p" --initial-advertise-peer-urls "$p" \
    --initial-cluster "bench=$p" --log-level error >"$4" 2>&1 &
  etcd_pid=$!
}

# start_versitygw DIR PORT: a fresh versitygw on loopback with the bench
# credentials, its data under DIR/vgw (log DIR/vgw.log), and waits until it
# is healthy; vgw_pid is its pid.
start_versitygw() {
  rm -rf "$1/vgw"; mkdir -p "$1/vgw/data" "$1/vgw/versions"
  "$BIN/versitygw" --port "127.0.0.1:$2" --access bench --secret bench-secret --health /health \
    posix --versioning-dir "$1/vgw/versions" "$1/vgw/data" >"$1/vgw.log" 2>&1 &
  vgw_pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/health" >/dev/null && break; sleep 0.1; done
}
