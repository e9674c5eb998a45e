package repository_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestUntrustedMarker: a progress marker planted without the signing
// key vouches for nothing: with trusted keys the window's time stays
// where the cluster's own markers put it, and the window names the
// planted one; without trust (before signing) it would have moved the
// recovery point an hour ahead.
func TestUntrustedMarker(t *testing.T) {
	ctx := t.Context()
	g := newSignedGeneration(t)
	w, key, t0, m, s := g.repo, g.key, g.t0, g.anchor, g.anchor.Revision
	segKey, hash := g.lastSeg, g.lastHash
	marker := func(b *repository.Repo, at time.Time) {
		t.Helper()
		p := &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a", SnapshotID: m.ID,
			SnapshotRevision: s, Through: s + 3, At: at, LastSegment: segKey, LastHash: hash, Token: 1}
		if _, err := b.PutProgress(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	marker(w, t0.Add(time.Minute))
	marker(&repository.Repo{Store: w.Store, Cluster: w.Cluster}, t0.Add(time.Hour)) // the attacker's

	for _, tc := range []struct {
		name      string
		trust     *signing.Trust
		want      time.Time
		untrusted int
	}{
		{"trusted key", &signing.Trust{Keys: []signing.PublicKey{key.Public()}}, t0.Add(time.Minute), 1},
		{"no trust configured", nil, t0.Add(time.Hour), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := repository.New(w.Store, w.Cluster)
			r.Trust = tc.trust
			l, err := r.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ws, err := r.Windows(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			if len(ws) != 1 || !ws[0].ThroughTime.Equal(tc.want) || len(ws[0].Untrusted) != tc.untrusted {
				t.Fatalf("window: %+v, want through time %s and %d untrusted marker(s)", ws, tc.want, tc.untrusted)
			}
		})
	}
}

// signedGeneration is a signed store with one backup (anchor, taken at
// t0) and a chain of one segment after it, through anchor.Revision+3.
type signedGeneration struct {
	repo              *repository.Repo
	key               *signing.Key
	t0                time.Time
	anchor            *repository.Manifest
	lastSeg, lastHash string
}

func newSignedGeneration(t *testing.T) signedGeneration {
	t.Helper()
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	g := signedGeneration{repo: dirBackups(t, t.TempDir()), key: key, t0: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	g.repo.Signer = key
	g.anchor = jobtest.PutBackup(t, g.repo, g.t0, uploader.PutOptions{}, true)
	s := g.anchor.Revision
	g.lastSeg, g.lastHash = putChain(t, g.repo, g.anchor.ID, s, [][2]int64{{s + 1, s + 3}})
	return g
}

// markerGets counts the reads of progress markers.
type markerGets struct {
	uploader.Store
	n atomic.Int64
}

func (c *markerGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.Contains(key, "/progress/") {
		c.n.Add(1)
	}
	return c.Store.Get(ctx, key)
}

// TestWindowsReadsMarkersOnce: with signing on, Windows checks each
// marker that moves the window's time once per Repo, not again on every
// call (the agent, capture's compactor and prune call it every few
// seconds), and a sealed marker is read once for its time and its
// reason together. An unreadable one stays unknown: read again.
func TestWindowsReadsMarkersOnce(t *testing.T) {
	ctx := t.Context()
	g := newSignedGeneration(t)
	w, key, t0, m, s := g.repo, g.key, g.t0, g.anchor, g.anchor.Revision
	segKey, hash := g.lastSeg, g.lastHash
	for i, sealed := range []bool{false, false, true} {
		p := &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a", SnapshotID: m.ID,
			SnapshotRevision: s, Through: s + 3, At: t0.Add(time.Duration(i+1) * time.Minute), LastSegment: segKey, LastHash: hash, Token: 1, Sealed: sealed}
		if sealed {
			p.SealReason = "test"
		}
		if _, err := w.PutProgress(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	st := &markerGets{Store: w.Store}
	r := repository.New(st, w.Cluster)
	r.Trust = &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
	l, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{3, 0, 0} {
		st.n.Store(0)
		ws, err := r.Windows(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != 1 || !ws[0].ThroughTime.Equal(t0.Add(3*time.Minute)) || !ws[0].Sealed || ws[0].SealReason != "test" {
			t.Fatalf("call %d: window %+v, want through time %s, sealed for test", i+1, ws, t0.Add(3*time.Minute))
		}
		if got := st.n.Load(); got != want {
			t.Errorf("call %d of Windows read %d progress markers, want %d", i+1, got, want)
		}
	}
	// A marker planted without the key is read again each time: only
	// what was checked is kept.
	p := &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a", SnapshotID: m.ID,
		SnapshotRevision: s, Through: s + 3, At: t0.Add(time.Hour), LastSegment: segKey, LastHash: hash, Token: 1}
	if _, err := (&repository.Repo{Store: w.Store, Cluster: w.Cluster}).PutProgress(ctx, p); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		st.n.Store(0)
		ws, err := r.Windows(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != 1 || !ws[0].ThroughTime.Equal(t0.Add(3*time.Minute)) || len(ws[0].Untrusted) != 1 {
			t.Fatalf("planted marker, call %d: window %+v, want through time %s and the planted marker untrusted", i+1, ws, t0.Add(3*time.Minute))
		}
		if got := st.n.Load(); got != 1 {
			t.Errorf("planted marker, call %d of Windows read %d progress markers, want 1 (the planted one)", i+1, got)
		}
	}
}
