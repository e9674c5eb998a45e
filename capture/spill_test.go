package capture

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestSpill: items written to the spool file come back in order, with
// their receive times, responses and errors; a drained file is reset,
// and closing removes it (it has no name: the directory stays empty).
func TestSpill(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	resp := func(rev int64) *pb.WatchResponse {
		return &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev, ClusterId: 7}, Events: []*mvccpb.Event{
			{Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v\x00"), ModRevision: rev, CreateRevision: 2, Version: 3, Lease: 9}},
			{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("/d"), ModRevision: rev}},
		}}
	}
	in := []item{
		{resp: resp(10), at: at, size: 100},
		{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 10}}, at: at.Add(time.Second), size: 64},
		{err: errors.New("stream broke"), at: at.Add(2 * time.Second)},
	}
	var s spill
	defer s.close()
	for round := range 2 {
		for _, it := range in {
			if err := s.write(dir, it); err != nil {
				t.Fatal(err)
			}
		}
		if s.unread != 164 || s.n != 3 {
			t.Fatalf("round %d: %d items, %d bytes unread: want 3, 164", round, s.n, s.unread)
		}
		for i, want := range in {
			got, err := s.read()
			if err != nil {
				t.Fatal(err)
			}
			if !got.at.Equal(want.at) || got.size != 0 || (got.err == nil) != (want.err == nil) || (got.err != nil && got.err.Error() != want.err.Error()) {
				t.Errorf("round %d item %d: %+v, want %+v (size 0)", round, i, got, want)
			}
			if d := cmp.Diff(want.resp, got.resp, protocmp.Transform()); d != "" {
				t.Errorf("round %d item %d response (-want +got):\n%s", round, i, d)
			}
		}
		if s.n != 0 || s.unread != 0 || s.woff != 0 {
			t.Fatalf("round %d: drained spill not reset: %+v", round, s)
		}
	}
	s.close()
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("spool dir after close: %v %v, want empty", es, err)
	}
}
