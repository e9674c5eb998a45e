package capture

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestHandle drives the revision bookkeeping with watch responses as
// etcd sends them (no server needed: handle is the pure part).
func TestHandle(t *testing.T) {
	const cid = 0xc1
	hdr := func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{ClusterId: cid, Revision: rev} }
	put := func(rev int64, key string) *mvccpb.Event {
		return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: rev, CreateRevision: rev, Version: 1}}
	}
	del := func(rev int64, key string) *mvccpb.Event {
		return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
	}
	tests := []struct {
		name  string
		resps []*pb.WatchResponse
		gap   GapReason // "" : no gap
		// revs are the revisions pending after the responses.
		revs []int64
	}{
		{name: "dense revisions, a txn is one revision", resps: []*pb.WatchResponse{
			{Header: hdr(10), Created: true},
			{Header: hdr(11), Events: []*mvccpb.Event{put(11, "a"), put(11, "b"), del(11, "c")}},
			{Header: hdr(13), Events: []*mvccpb.Event{put(12, "a"), put(13, "d")}},
			{Header: hdr(13)},
		}, revs: []int64{11, 12, 13}},
		{name: "the resumed revision's own events are dropped", resps: []*pb.WatchResponse{
			{Header: hdr(11), Events: []*mvccpb.Event{put(10, "x"), put(10, "y"), put(11, "a")}},
		}, revs: []int64{11}},
		{name: "a revision split in fragments is one revision", resps: []*pb.WatchResponse{
			{Header: hdr(11), Events: []*mvccpb.Event{put(11, "a")}, Fragment: true},
			{Header: hdr(11), Events: []*mvccpb.Event{put(11, "b")}},
		}, revs: []int64{11}},
		{name: "compacted", resps: []*pb.WatchResponse{
			{Header: hdr(50), Canceled: true, CompactRevision: 40},
		}, gap: GapCompacted},
		{name: "another cluster", resps: []*pb.WatchResponse{
			{Header: &pb.ResponseHeader{ClusterId: 0xdd, Revision: 11}, Events: []*mvccpb.Event{put(11, "a")}},
		}, gap: GapClusterID},
		{name: "revision below the captured one", resps: []*pb.WatchResponse{
			{Header: hdr(11), Events: []*mvccpb.Event{put(11, "a")}},
			{Header: hdr(11), Events: []*mvccpb.Event{put(9, "a")}},
		}, gap: GapRevisionBackwards},
		{name: "progress below the captured revision: restored", resps: []*pb.WatchResponse{
			{Header: hdr(11), Events: []*mvccpb.Event{put(11, "a")}},
			{Header: hdr(5)},
		}, gap: GapRevisionBackwards},
		{name: "a revision skipped", resps: []*pb.WatchResponse{
			{Header: hdr(12), Events: []*mvccpb.Event{put(12, "a")}},
		}, gap: GapBrokenChain},
		{name: "progress past what was delivered", resps: []*pb.WatchResponse{
			{Header: hdr(15)},
		}, gap: GapBrokenChain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &Job{MaxSegmentBytes: 1 << 30, MaxBufferBytes: 1 << 30, Stats: &Stats{}, Interval: time.Second}
			r := &runner{job: *job, lg: slog.New(slog.NewTextHandler(io.Discard, nil))}
			c := &capt{r: r, job: &r.job, g: &generation{id: "g", clusterID: cid, durable: 10, leases: map[int64]bool{}},
				ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
			c.lastRev, c.skipRev = 10, 10
			var err error
			for _, resp := range tt.resps {
				if err = c.handle(t.Context(), item{resp: resp, at: time.Unix(1, 0), size: respSize(resp)}); err != nil {
					break
				}
			}
			var gap *gapError
			switch {
			case tt.gap == "" && err != nil:
				t.Fatalf("handle: %v, want no gap", err)
			case tt.gap != "" && (!errors.As(err, &gap) || gap.reason != tt.gap):
				t.Fatalf("handle: %v, want a gap %s", err, tt.gap)
			}
			if tt.gap != "" {
				return
			}
			var got []int64
			for _, r := range c.pend {
				got = append(got, r.Revision)
			}
			if len(got) != len(tt.revs) {
				t.Fatalf("pending revisions %v, want %v", got, tt.revs)
			}
			for i := range got {
				if got[i] != tt.revs[i] {
					t.Fatalf("pending revisions %v, want %v", got, tt.revs)
				}
			}
			if c.open != nil {
				t.Errorf("revision %d left open", c.open.Revision)
			}
		})
	}
}

// handleEnv is a capt driven by hand against a real etcd (for lease
// lookups) and a directory store, its generation at revision 10.
func handleEnv(t *testing.T) (*capt, *clientv3.Client) {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	lg, _ := jobtest.Logger(t)
	sess, err := snapshot.Dial(t.Context(), snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second}, lg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := Job{Session: sess, Repo: repository.New(d, jobtest.Cluster), Encoding: repository.Encoding{Compression: "zstd"},
		MaxSegmentBytes: 1 << 30, MaxBufferBytes: 1 << 30, Stats: &Stats{}, Interval: time.Second, Now: time.Now,
		Token: func() (int64, bool) { return 1, true }}
	r := &runner{job: job, lg: lg}
	cp := &capt{r: r, job: &r.job, g: &generation{id: "g", clusterID: 0xc1, snapID: "snap", snapRev: 10, durable: 10, leases: map[int64]bool{}},
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	cp.lastRev, cp.skipRev = 10, 10
	return cp, c.Client(t)
}

// TestFlushLeavesOpenRevisionsLeases: a flush on the interval tick while
// a fragmented revision is half received stores only the closed
// revisions' leases; the open revision's lease goes with its revision.
// (It was stored with the closed ones, the segment failed validation,
// "lease … first seen at revision 12, outside 11-11", and every retry
// failed alike.)
func TestFlushLeavesOpenRevisionsLeases(t *testing.T) {
	c, cli := handleEnv(t)
	var leases []int64
	for range 2 {
		l, err := cli.Grant(t.Context(), 600)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, int64(l.ID))
	}
	hdr := func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{ClusterId: 0xc1, Revision: rev} }
	put := func(rev int64, key string, lease int64) *mvccpb.Event {
		return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: rev, CreateRevision: rev, Version: 1, Lease: lease}}
	}
	for _, resp := range []*pb.WatchResponse{
		{Header: hdr(12), Events: []*mvccpb.Event{put(11, "a", leases[0])}},
		{Header: hdr(12), Events: []*mvccpb.Event{put(12, "b", leases[1])}, Fragment: true},
	} {
		if err := c.handle(t.Context(), item{resp: resp, at: time.Unix(1, 0), size: respSize(resp)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.flush(t.Context(), false); err != nil {
		t.Fatalf("flush with revision 12 open: %v", err)
	}
	resp := &pb.WatchResponse{Header: hdr(12), Events: []*mvccpb.Event{put(12, "c", 0)}}
	if err := c.handle(t.Context(), item{resp: resp, at: time.Unix(2, 0), size: respSize(resp)}); err != nil {
		t.Fatal(err)
	}
	if err := c.flush(t.Context(), false); err != nil {
		t.Fatalf("flush of revision 12: %v", err)
	}
	infos, _, err := c.job.Repo.ListSegments(t.Context(), "g")
	if err != nil {
		t.Fatal(err)
	}
	type seg struct{ First, Last, Lease, LeaseRev int64 }
	var got []seg
	for _, si := range infos {
		s, _, err := c.job.Repo.ReadSegment(t.Context(), si, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range s.Leases {
			if l.TTL != 600 {
				t.Errorf("lease %x recorded with TTL %d, want 600", l.ID, l.TTL)
			}
			got = append(got, seg{s.First, s.Last, l.ID, l.Revision})
		}
	}
	want := []seg{{11, 11, leases[0], 11}, {12, 12, leases[1], 12}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("segments' leases (-want +got):\n%s", diff)
	}
}

// TestLeaseLookupsOffTheWatchPath: handling revisions that each use a
// new lease asks etcd nothing (each lookup was a round trip of up to 5 s
// on the watch's processing path); the flush looks them up, in parallel,
// and stores every lease with its granted TTL.
func TestLeaseLookupsOffTheWatchPath(t *testing.T) {
	c, cli := handleEnv(t)
	const n = 100
	for i := range n {
		l, err := cli.Grant(t.Context(), int64(600+i))
		if err != nil {
			t.Fatal(err)
		}
		rev := int64(11 + i)
		resp := &pb.WatchResponse{Header: &pb.ResponseHeader{ClusterId: 0xc1, Revision: rev}, Events: []*mvccpb.Event{{Type: mvccpb.PUT,
			Kv: &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/events/e%d", i), Value: []byte("v"), ModRevision: rev, CreateRevision: rev, Version: 1, Lease: int64(l.ID)}}}}
		if err := c.handle(t.Context(), item{resp: resp, at: time.Unix(1, 0), size: respSize(resp)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.job.Stats.LeaseLookups.Load(); got != 0 {
		t.Fatalf("%d lease lookups while handling the watch's responses: want none (they wait for the flush)", got)
	}
	if err := c.flush(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if got := c.job.Stats.LeaseLookups.Load(); got != n {
		t.Errorf("%d lease lookups at the flush, want %d", got, n)
	}
	infos, _, err := c.job.Repo.ListSegments(t.Context(), "g")
	if err != nil || len(infos) != 1 {
		t.Fatalf("segments %v %v: want 1", infos, err)
	}
	s, _, err := c.job.Repo.ReadSegment(t.Context(), infos[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Leases) != n {
		t.Fatalf("%d leases stored, want %d", len(s.Leases), n)
	}
	for i, l := range s.Leases {
		if l.TTL != int64(600+i) || l.Revision != int64(11+i) {
			t.Errorf("lease %d: %+v, want TTL %d first seen at %d", i, l, 600+i, 11+i)
		}
	}
}
