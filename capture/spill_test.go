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

// TestHoldSpillsPastHoldBytes: while a new generation's snapshot is
// stored (hold), the watch keeps at most Job.HoldBytes in memory, not
// MaxBufferBytes: the rest goes to the spool file, and the loop takes
// every item back in the order it came (memory first, then the spool).
func TestHoldSpillsPastHoldBytes(t *testing.T) {
	job := (&Job{}).filled()
	if job.HoldBytes != 4<<20 || job.Compact.MaxBytes != 16<<20 {
		t.Fatalf("HoldBytes %d, Compact.MaxBytes %d by default: want MaxBufferBytes/8 and /2, %d and %d", job.HoldBytes, job.Compact.MaxBytes, 4<<20, 16<<20)
	}
	job.HoldBytes, job.SpoolDir, job.Stats = 250, t.TempDir(), &Stats{}
	c := &capt{job: &job, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	c.hold.Store(true)
	defer c.closeSpill()
	at := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	for rev := range int64(6) {
		c.push(item{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 10 + rev}}, at: at, size: 100})
	}
	if h := c.heldBytes(); h != 200 {
		t.Errorf("%d bytes held in memory: want 200 (two items under HoldBytes 250)", h)
	}
	if n := job.Stats.SpilledBytes.Load(); n == 0 {
		t.Errorf("nothing spilled: want the items past HoldBytes in the spool file")
	}
	for rev := int64(10); rev < 16; rev++ {
		it, ok := c.next()
		if !ok || it.resp.GetHeader().GetRevision() != rev {
			t.Fatalf("item %d: %v %v, want revision %d (in order)", rev-10, it.resp, ok, rev)
		}
	}
	if _, ok := c.next(); ok {
		t.Errorf("an item after the six pushed")
	}
}
