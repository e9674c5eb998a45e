package repository_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestScrubState: a scrub state is stored signed, the newest read back,
// only the newest ScrubStateKeep kept; with trusted keys an unsigned one
// is refused as untrusted.
func TestScrubState(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	trust := &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
	r := &repository.Repo{Store: st, Cluster: "c", Signer: key, Trust: trust}
	ctx := t.Context()
	if s, err := r.LatestScrubState(ctx); s != nil || err != nil {
		t.Fatalf("no state yet: %v, %v", s, err)
	}
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		s := &repository.ScrubState{At: at.Add(time.Duration(i) * time.Hour), Objects: i,
			Read: map[string]repository.ScrubMark{"c/snapshots/x.db": {Size: 3, SeenAt: at, ReadAt: at.Add(time.Duration(i) * time.Hour)}}}
		if err := r.PutScrubState(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	s, err := r.LatestScrubState(ctx)
	if err != nil || s.Objects != 4 || !s.Read["c/snapshots/x.db"].ReadAt.Equal(at.Add(4*time.Hour)) {
		t.Fatalf("latest: %+v, %v", s, err)
	}
	var n int
	_ = st.List(ctx, "c/scrub/", func(uploader.ObjectInfo) error { n++; return nil })
	if n != repository.ScrubStateKeep {
		t.Errorf("%d states kept, want %d", n, repository.ScrubStateKeep)
	}
	unsigned := &repository.Repo{Store: st, Cluster: "c"}
	if err := unsigned.PutScrubState(ctx, &repository.ScrubState{At: at.Add(9 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LatestScrubState(ctx); !errors.Is(err, repository.ErrUntrusted) {
		t.Errorf("an unsigned newest state: %v, want ErrUntrusted", err)
	}
}

func FuzzParseScrubState(f *testing.F) {
	for _, s := range []string{
		`{"format":1,"cluster":"c","at":"2026-12-04T10:00:00Z","read":{"c/x":{"size":3,"seen_at":"2026-12-04T10:00:00Z"}}}`,
		`{"format":1,"at":"2026-12-04T10:00:00Z"}`, `{"format":2}`, `{}`, `[]`, `{"format":1,"at":"2026-12-04T10:00:00Z","read":{"":{}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := repository.ParseScrubState(data)
		if err != nil {
			if !errors.Is(err, repository.ErrBadScrubState) {
				t.Fatalf("error %v does not wrap ErrBadScrubState", err)
			}
			return
		}
		if s.At.IsZero() || s.Format != repository.ScrubStateFormat {
			t.Fatalf("accepted %+v", s)
		}
	})
}
