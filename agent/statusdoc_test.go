package agent

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestStatusDocumentOnce: agent --once against a real etcd and store
// leaves one status document saying what it runs and how its jobs went;
// a second cycle of the same agent replaces it (the older one deleted);
// the document holds no endpoint.
func TestStatusDocumentOnce(t *testing.T) {
	lg, _ := testLogger(t)
	f := newFixture(t, nil, 20)
	cfg := f.config(t, lg)
	cfg.Listen, cfg.Drill, cfg.Prune = "", nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 10m", Drill: ""}
	cfg.StaleAfter = 25 * time.Minute
	for cycle := 1; cycle <= 2; cycle++ {
		a, err := New(cfg, lg)
		if err != nil {
			t.Fatal(err)
		}
		// A new revision each cycle: a second backup, not the same one.
		if _, err := f.etcd.Client(t).Put(t.Context(), "/cycle", "x"); err != nil {
			t.Fatal(err)
		}
		if err := a.RunOnce(t.Context()); err != nil {
			t.Fatalf("cycle %d: RunOnce: %v", cycle, err)
		}
	}
	got, err := f.backups.AgentStatuses(t.Context())
	if err != nil || len(got) != 1 || got[0].Err != nil {
		t.Fatalf("AgentStatuses: %v, %+v", err, got)
	}
	s := got[0].Status
	if s.Mode != repository.AgentOnce || s.Agent != cfg.Identity || !s.Leader || s.Schedules.Snapshot != "@every 10m" ||
		s.StaleAfter.Duration() != 25*time.Minute || s.Every != 0 {
		t.Errorf("document: %+v", s)
	}
	j := s.Jobs[JobSnapshot]
	if j.LastResult != ResultSuccess || j.LastSuccess == nil || j.LastAttempt == nil || j.LastError != "" {
		t.Errorf("snapshot job in the document: %+v", j)
	}
	ids := manifests(t, f.backups)
	if len(ids) != 2 || j.LastSuccess.Before(mustIDTime(t, ids[1])) {
		t.Errorf("backups %v; the document's last success %v is not the second cycle's", ids, j.LastSuccess)
	}
	var docs int
	f.backups.Store.List(t.Context(), testCluster+"/agents/", func(o uploader.ObjectInfo) error { docs++; return nil })
	if docs != 1 {
		t.Errorf("%d status documents stored, want 1 (the older ones deleted by their writer)", docs)
	}
	raw := readKey(t, f.backups, got[0].Key)
	for _, ep := range f.etcd.Endpoints() {
		if strings.Contains(raw, strings.TrimPrefix(ep, "http://")) {
			t.Errorf("the document names the endpoint %s:\n%s", ep, raw)
		}
	}
}

// TestStatusDocumentDaemon: the daemon writes when it starts and at each
// job end; a failing job's error is in the document. (RedactURLs, which
// the errors pass through, is tested in repository.)
func TestStatusDocumentDaemon(t *testing.T) {
	lg, _ := testLogger(t)
	f := newFixture(t, nil, 10)
	cfg := f.config(t, lg)
	cfg.Listen, cfg.Drill, cfg.Prune = "", nil, nil
	cfg.SnapshotRetries = 0
	cfg.Schedules = Schedules{Snapshot: "@every 1s"}
	cfg.Snapshot.Etcd.Endpoints = []string{"http://127.0.0.1:1"} // nothing listens
	cfg.Snapshot.Etcd.DialTimeout = time.Second
	r := start(t, cfg, lg)
	var s *repository.AgentStatus
	deadline := time.Now().Add(time.Minute)
	for s == nil || s.Jobs[JobSnapshot].LastAttempt == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no status document with a snapshot attempt within a minute; last: %+v", s)
		}
		time.Sleep(50 * time.Millisecond)
		got, err := f.backups.AgentStatuses(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 && got[0].Status != nil {
			s = got[0].Status
		}
	}
	r.stop(t)
	j := s.Jobs[JobSnapshot]
	if s.Mode != repository.AgentDaemon || s.Every.Duration() != time.Minute || j.LastResult != ResultFailure || j.LastError == "" || j.LastSuccess != nil || j.NextRun == nil {
		t.Errorf("document: %+v, snapshot job %+v", s, j)
	}
}

func mustIDTime(t *testing.T, id string) time.Time {
	t.Helper()
	at, ok := repository.IDTime(id)
	if !ok {
		t.Fatalf("backup id %q names no time", id)
	}
	return at
}

func readKey(t *testing.T, b *repository.Repo, key string) string {
	t.Helper()
	rc, err := b.Store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestIndexAfterJobs: every job's end leaves the cluster's index
// (repository.Index) listing what the job stored, written before the
// status document that says the job ended; the agent keeps only the
// newest IndexKeep of its indexes.
func TestIndexAfterJobs(t *testing.T) {
	lg, _ := testLogger(t)
	f := newFixture(t, nil, 20)
	cfg := f.config(t, lg)
	cfg.Listen, cfg.Drill, cfg.Prune = "", nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 10m", Drill: ""}
	for cycle := 1; cycle <= 3; cycle++ {
		a, err := New(cfg, lg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.etcd.Client(t).Put(t.Context(), "/cycle", "x"); err != nil {
			t.Fatal(err)
		}
		if err := a.RunOnce(t.Context()); err != nil {
			t.Fatalf("cycle %d: RunOnce: %v", cycle, err)
		}
	}
	var idxKeys []uploader.ObjectInfo
	f.backups.Store.List(t.Context(), testCluster+"/index/", func(o uploader.ObjectInfo) error {
		idxKeys = append(idxKeys, o)
		return nil
	})
	if len(idxKeys) != repository.IndexKeep {
		t.Fatalf("%d indexes stored, want the newest %d", len(idxKeys), repository.IndexKeep)
	}
	idx, err := f.backups.ReadIndex(t.Context(), f.backups.NewestIndexKey(idxKeys))
	if err != nil {
		t.Fatal(err)
	}
	ids := manifests(t, f.backups)
	var carried []string
	for _, d := range idx.Docs {
		carried = append(carried, d.Key)
	}
	want := make([]string, len(ids))
	for i, id := range ids {
		want[i] = f.backups.ManifestKey(id)
	}
	if len(ids) != 3 || strings.Join(carried, " ") != strings.Join(want, " ") {
		t.Errorf("the newest index carries %v; the store's manifests are %v", carried, want)
	}
	st, err := f.backups.AgentStatuses(t.Context())
	if err != nil || len(st) != 1 || st[0].Status == nil {
		t.Fatalf("AgentStatuses: %v %+v", err, st)
	}
	if idx.WrittenAt.After(st[0].Status.WrittenAt) || idx.Writer != cfg.Identity {
		t.Errorf("index written %s by %q; the status document %s: want the index first, by the agent", idx.WrittenAt, idx.Writer, st[0].Status.WrittenAt)
	}
}
