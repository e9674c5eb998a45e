package etcdtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Authentications returns how many Authenticate requests the in-process
// etcd members of this test binary have handled so far (Handled).
func Authentications(t testing.TB) int {
	t.Helper()
	return Handled(t, "Authenticate")
}

// Handled returns how many requests of the gRPC method (its short name,
// e.g. "Authenticate", "HashKV") the in-process etcd members of this test
// binary have handled so far, from etcd's gRPC server metrics
// (grpc_server_handled_total, in the default Prometheus registry, shared
// by all members). Take the difference around the code under test.
func Handled(t testing.TB, method string) int {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gather etcd's metrics: %v", err)
	}
	var n float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		found = true
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" && l.GetValue() == method {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	if !found {
		t.Fatal("etcd's gRPC server metrics (grpc_server_handled_total) are not in the default registry")
	}
	return int(n)
}
