package drill_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// cancelAtReport is a real store that calls cancel just before it writes
// a drill report, and then refuses the write when its own context has
// ended: a shutdown (SIGTERM, a lost lock) arriving while a verdict is
// being stored.
type cancelAtReport struct {
	uploader.Store
	cancel func()
}

func (s cancelAtReport) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/drills/") && s.cancel != nil {
		s.cancel()
		if err := ctx.Err(); err != nil {
			return uploader.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
		}
	}
	return s.Store.Put(ctx, key, r, opts)
}

// TestDrillAndStore: the rule by which lifeboat drill and the agent's
// drill job both store reports. A verdict, passed or failed, is stored,
// also when ctx ends while it is being written (the agent's copy of the
// rule wrote it under ctx and lost it); an interrupted drill and one that
// could not run (no identity) store nothing.
func TestDrillAndStore(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	src := restoretest.StartSource(t, 200)
	id := restoretest.NewIdentity(t)
	tests := []struct {
		name     string
		enc      repository.Encoding
		prefixes []string
		// cancel: "" never, "fetch" as the download starts, "report"
		// as the report is written.
		cancel          string
		wantVerdict     bool
		wantInterrupted bool
		wantErr         error
	}{
		{name: "passed", enc: repository.Encoding{Compression: "zstd"}, wantVerdict: true},
		{name: "a check failed", enc: repository.Encoding{Compression: "zstd"}, prefixes: []string{"/no/such/prefix/"}, wantVerdict: true, wantErr: drill.ErrFailed},
		{name: "ctx ends while the report is stored", enc: repository.Encoding{Compression: "zstd"}, cancel: "report", wantVerdict: true},
		{name: "interrupted", enc: repository.Encoding{Compression: "zstd"}, cancel: "fetch", wantInterrupted: true, wantErr: context.Canceled},
		{name: "no identity: no verdict", enc: restoretest.AgeEncoding(id)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct := restoretest.DirRepo(t, t.TempDir())
			m := src.Backup(t, direct, tt.enc)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			st := cancelAtReport{Store: direct.Store}
			if tt.cancel == "report" {
				st.cancel = cancel
			}
			o := drill.Options{
				Backups: &repository.Repo{Store: st, Cluster: direct.Cluster}, Manifest: m,
				ScratchDir: t.TempDir(), CheckPrefixes: tt.prefixes, Version: "test",
			}
			if tt.cancel == "fetch" {
				o.Progress = func(stored, raw int64) { cancel() }
			}
			if tt.enc.EncryptionName() == "none" {
				o.Identities = []age.Identity{id}
			}
			d, err := drill.RunAndStore(ctx, o)
			t.Logf("drill: %v", err)
			if d.Report == nil {
				t.Fatalf("no report (err %v)", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && tt.wantVerdict && err != nil {
				t.Errorf("error %v, want none", err)
			}
			if d.Verdict != tt.wantVerdict || d.Interrupted != tt.wantInterrupted || d.StoreErr != nil {
				t.Errorf("Verdict %v, Interrupted %v, StoreErr %v; want %v, %v, nil", d.Verdict, d.Interrupted, d.StoreErr, tt.wantVerdict, tt.wantInterrupted)
			}
			last, err := direct.LastDrills(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			r, stored := last[m.ID]
			if stored != tt.wantVerdict {
				t.Fatalf("report stored: %v, want %v", stored, tt.wantVerdict)
			}
			if stored && r.Passed != d.Report.Passed {
				t.Errorf("stored verdict passed=%v, the drill's %v", r.Passed, d.Report.Passed)
			}
		})
	}
}
