package capture

import (
	"fmt"
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func TestForked(t *testing.T) {
	seg := func(first, last int64, level int) repository.SegmentInfo {
		return repository.SegmentInfo{First: first, Last: last, Level: level, Object: uploader.ObjectInfo{Key: fmt.Sprintf("%d-%d.L%d", first, last, level)}}
	}
	for _, tc := range []struct {
		name    string
		segs    []repository.SegmentInfo
		base    int64
		durable int64
		fork    bool
	}{
		{name: "own chain", segs: []repository.SegmentInfo{seg(3, 10, 0), seg(11, 20, 0), seg(21, 25, 0)}, base: 10, durable: 25},
		{name: "fork before base is resume's", segs: []repository.SegmentInfo{seg(3, 10, 0), seg(3, 5, 0), seg(11, 20, 0)}, base: 10, durable: 20},
		{name: "late put at the resumed revision", segs: []repository.SegmentInfo{seg(3, 10, 0), seg(11, 12, 0), seg(11, 20, 0)}, base: 10, durable: 20, fork: true},
		{name: "segment after the durable one", segs: []repository.SegmentInfo{seg(3, 10, 0), seg(11, 20, 0), seg(21, 22, 0)}, base: 10, durable: 20, fork: true},
		{name: "compacted over the chain", segs: []repository.SegmentInfo{seg(3, 10, 0), seg(11, 20, 0), seg(11, 25, 1), seg(21, 25, 0)}, base: 10, durable: 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := forked(tc.segs, tc.base, tc.durable); (got != "") != tc.fork {
				t.Errorf("forked = %q, want a fork: %v", got, tc.fork)
			}
		})
	}
}
