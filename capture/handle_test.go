package capture

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
