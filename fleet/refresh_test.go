package fleet

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// agentDone writes cluster's status document as its agent does at a
// job's end (written at written) and once a minute: its snapshot job's
// last attempt and success at job.
func agentDone(t testing.TB, st uploader.Store, cluster string, written, job time.Time) {
	t.Helper()
	s := &repository.AgentStatus{Cluster: cluster, Agent: cluster + "-node/1", Version: "test", Mode: repository.AgentDaemon,
		WrittenAt: written, Started: job.Add(-time.Hour), Every: 60, Leader: true,
		Schedules: repository.AgentSchedules{Snapshot: "@hourly"},
		Jobs:      map[string]repository.AgentJob{"snapshot": {LastAttempt: &job, LastResult: "success", LastSuccess: &job}}}
	if err := repository.New(st, cluster).PutAgentStatus(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// listLog records the ListObjectsV2 prefixes the proxy forwards (the
// store's own prefix cut off; a listing with a delimiter is "/").
type listLog struct {
	mu       sync.Mutex
	prefixes []string
}

func recordLists(p *s3test.Proxy, storePrefix string) *listLog {
	l := &listLog{}
	p.SetFault(func(r *http.Request, _ int) s3test.Fault {
		if s3test.Op(r) == "ListObjectsV2" {
			q := r.URL.Query()
			prefix := strings.TrimPrefix(q.Get("prefix"), storePrefix)
			if q.Get("delimiter") != "" {
				prefix = "/"
			}
			l.mu.Lock()
			l.prefixes = append(l.prefixes, prefix)
			l.mu.Unlock()
		}
		return s3test.None
	})
	return l
}

// take returns the prefixes listed since the last take, sorted.
func (l *listLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.prefixes
	l.prefixes = nil
	sort.Strings(out)
	return out
}

func byName(cs []Cluster) map[string]Cluster {
	m := map[string]Cluster{}
	for _, c := range cs {
		m[c.Name] = c
	}
	return m
}

// TestRefreshSignal: Reader.Refresh in versitygw, the requests counted.
// Nothing changed: no GET, and of the clusters with an agent only their
// agents/ area is listed (one request each); a cluster without a status
// document is listed in full. An agent's status document with no job
// done since: one GET, its row's agent updated, the cluster not listed.
// A backup by the agent (its document after it): that cluster alone
// listed in full, the backup shown. A manifest deleted behind the
// agent's back: not seen by Refresh (the row kept, as documented), seen
// by the next Read. A cluster the hub wrote to (Touch) and a new
// cluster: listed in full at the next Refresh.
func TestRefreshSignal(t *testing.T) {
	fs := newFleetStores(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	agents := []string{"a1", "a2", "a3"}
	for _, name := range agents {
		synthetic(t, fs.s3, name, "aa01", now.Add(-3*time.Hour), now.Add(-2*time.Hour), now.Add(-time.Hour))
		agentDone(t, fs.s3, name, now.Add(-time.Hour+time.Second), now.Add(-time.Hour))
	}
	synthetic(t, fs.s3, "old", "aa02", now.Add(-2*time.Hour), now.Add(-time.Hour)) // no status document
	r := NewReader()
	src := []Source{{Name: "bucket", Store: fs.s3}}
	read := func(f func() ([]Cluster, error)) map[string]Cluster {
		t.Helper()
		cs, err := f()
		if err != nil {
			t.Fatal(err)
		}
		return byName(cs)
	}
	full := func() ([]Cluster, error) { return r.Read(t.Context(), src, nil) }
	refresh := func() ([]Cluster, error) { return r.Refresh(t.Context(), src, nil) }
	want := read(full)
	lists := recordLists(fs.proxy, "fleet/")
	check := func(step string, wantGets int, wantLists ...string) {
		t.Helper()
		sort.Strings(wantLists)
		if got := lists.take(); !slices.Equal(got, wantLists) {
			t.Errorf("%s: listed %q, want %q", step, got, wantLists)
		}
		if n := fs.proxy.Count("GetObject"); n != wantGets {
			t.Errorf("%s: %d GETs, want %d", step, n, wantGets)
		}
		fs.proxy.ResetCounts()
	}
	signals := []string{"/", "a1/agents/", "a2/agents/", "a3/agents/", "old/"}

	got := read(refresh)
	check("nothing changed", 0, signals...)
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(Cluster{})); diff != "" {
		t.Errorf("nothing changed: the refresh differs from the full read (-read +refresh):\n%s", diff)
	}

	agentDone(t, fs.s3, "a1", now.Add(-time.Minute), now.Add(-time.Hour))
	lists.take()
	fs.proxy.ResetCounts()
	got = read(refresh)
	check("a status document, no job done", 1, signals...)
	if a := got["a1"].Agent; a == nil || !a.WrittenAt.Equal(now.Add(-time.Minute)) {
		t.Errorf("a1's agent after its new document: %+v, want written %s", a, now.Add(-time.Minute))
	}

	synthetic(t, fs.s3, "a2", "aa01", now)
	agentDone(t, fs.s3, "a2", now.Add(time.Second), now)
	lists.take()
	fs.proxy.ResetCounts()
	got = read(refresh)
	check("a backup by the agent", 2, append(signals, "a2/")...) // its document and its new manifest
	if c := got["a2"]; c.Backups != 4 || c.Newest == nil || !c.Newest.CreatedAt.Equal(now) {
		t.Errorf("a2 after its agent's backup: %d backups, newest %+v; want 4, the new one", c.Backups, c.Newest)
	}

	gone := repository.New(fs.s3, "a3").ManifestKey(mustNewest(t, fs.s3, "a3"))
	if err := fs.s3.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	lists.take()
	fs.proxy.ResetCounts()
	if c := read(refresh)["a3"]; c.Backups != 3 {
		t.Errorf("a3 after a manifest deleted behind its agent's back, Refresh: %d backups; want the row kept (3) until the next full read", c.Backups)
	}
	check("a delete behind the agent's back", 0, signals...)
	if c := read(full)["a3"]; c.Backups != 2 {
		t.Errorf("a3 after a manifest deleted behind its agent's back, Read: %d backups, want 2", c.Backups)
	}

	putDrill(t, fs.s3, "a1", now.Add(-time.Minute), false)
	r.Touch("bucket", "a1")
	synthetic(t, fs.s3, "new", "aa03", now.Add(-time.Minute))
	lists.take()
	fs.proxy.ResetCounts()
	got = read(refresh)
	check("the hub's drill report and a new cluster", 2, "/", "a1/", "a2/agents/", "a3/agents/", "new/", "old/") // the report and the new manifest
	if c := got["a1"]; c.Drill == nil || c.Drill.State != repository.DrillFailed {
		t.Errorf("a1 after the hub's drill: %+v, want its failed drill", c.Drill)
	}
	if c, ok := got["new"]; !ok || c.Backups != 1 {
		t.Errorf("the new cluster: %+v, want its backup", c)
	}
}

// TestHubFullEvery: the hub lists every store in full at its first
// refresh and then every FullEvery (its clock driven by the test): a
// manifest deleted behind the agent's back stays in the row until then,
// and no longer.
func TestHubFullEvery(t *testing.T) {
	fs := newFleetStores(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	synthetic(t, fs.s3, "a1", "aa01", now.Add(-2*time.Hour), now.Add(-time.Hour))
	agentDone(t, fs.s3, "a1", now.Add(-time.Hour+time.Second), now.Add(-time.Hour))
	clock := now
	h := NewHub(HubConfig{Sources: []Source{{Name: "bucket", Store: fs.s3}}, Interval: time.Minute, FullEvery: 5 * time.Minute,
		Now: func() time.Time { return clock }}, nil)
	backups := func() int {
		t.Helper()
		if err := h.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		return h.Report().Clusters[0].Backups
	}
	if n := backups(); n != 2 {
		t.Fatalf("first refresh: %d backups, want 2", n)
	}
	if err := fs.s3.Delete(t.Context(), repository.New(fs.s3, "a1").ManifestKey(mustNewest(t, fs.s3, "a1"))); err != nil {
		t.Fatal(err)
	}
	for m := 1; m < 5; m++ {
		clock = now.Add(time.Duration(m) * time.Minute)
		if n := backups(); n != 2 {
			t.Errorf("refresh %d min after the full one: %d backups, want the row kept (2)", m, n)
		}
	}
	clock = now.Add(5 * time.Minute)
	if n := backups(); n != 1 {
		t.Errorf("refresh at FullEvery: %d backups, want 1 (the deletion seen)", n)
	}
}

// TestAgentWork: the signal moves with what an agent did (a job
// finished, capture advanced, a document unreadable, an agent more),
// not with what it only says again (a new document of the same work,
// its next run planned).
func TestAgentWork(t *testing.T) {
	at := func(m int) *time.Time { v := time.Date(2026, 12, 4, 20, m, 0, 0, time.UTC); return &v }
	entry := func(agent string, written int, job repository.AgentJob, capture *repository.AgentCapture) repository.AgentStatusEntry {
		return repository.AgentStatusEntry{Key: "c/agents/" + agent + "/20261204T20" + fmt.Sprintf("%02d", written) + "00.000Z.json",
			Status: &repository.AgentStatus{Jobs: map[string]repository.AgentJob{"snapshot": job}, Capture: capture}}
	}
	done := repository.AgentJob{LastAttempt: at(0), LastResult: "success", LastSuccess: at(0), NextRun: at(60)}
	base := agentWork([]repository.AgentStatusEntry{entry("a", 1, done, nil)})
	next := done
	next.NextRun = at(59)
	later := done
	later.LastAttempt, later.LastSuccess = at(5), at(5)
	failed := done
	failed.LastResult = "failure"
	for _, tc := range []struct {
		name string
		es   []repository.AgentStatusEntry
		same bool
	}{
		{"a new document, the same work", []repository.AgentStatusEntry{entry("a", 2, done, nil)}, true},
		{"next run planned again", []repository.AgentStatusEntry{entry("a", 2, next, nil)}, true},
		{"a job finished", []repository.AgentStatusEntry{entry("a", 6, later, nil)}, false},
		{"its result changed", []repository.AgentStatusEntry{entry("a", 2, failed, nil)}, false},
		{"capture advanced", []repository.AgentStatusEntry{entry("a", 2, done, &repository.AgentCapture{Active: true, Revision: 9})}, false},
		{"another agent", []repository.AgentStatusEntry{entry("a", 1, done, nil), entry("b", 1, done, nil)}, false},
		{"unreadable", []repository.AgentStatusEntry{{Key: "c/agents/a/20261204T200200.000Z.json", Err: repository.ErrBadAgentStatus}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentWork(tc.es) == base; got != tc.same {
				t.Errorf("same signal = %v, want %v", got, tc.same)
			}
		})
	}
}

// TestRefreshNameBecomesCluster: a top-level name that held no cluster
// at the last read (on S3 an object outside the cluster areas; in a
// directory store the directory an agent's first upload made, its
// object not yet committed) and then gets a backup is a cluster at the
// next Refresh, not at the next full read 15 minutes later. Found by
// TestFleetAlertInPrometheus in CI: an agent's first backup was under
// way at the hub's first refresh, and its cluster stayed missing.
func TestRefreshNameBecomesCluster(t *testing.T) {
	fs := newFleetStores(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, c := range []struct {
		name  string
		store uploader.Store
		early func(t *testing.T)
	}{
		{"s3", fs.s3, func(t *testing.T) {
			if _, err := fs.s3.Put(t.Context(), "late/notes.txt", strings.NewReader("not a cluster area"), uploader.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"dir", fs.dir, func(t *testing.T) {
			// An upload under way: the directory is there, its object a
			// temporary file that List skips.
			d := filepath.Join(fs.dir.(*uploader.Dir).Root(), "late", "snapshots")
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, ".tmp-x-1"), []byte("partial"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synthetic(t, c.store, "a1", "aa01", now.Add(-time.Hour))
			agentDone(t, c.store, "a1", now.Add(-time.Hour+time.Second), now.Add(-time.Hour))
			c.early(t)
			r := NewReader()
			src := []Source{{Name: "store", Store: c.store}}
			cs, err := r.Read(t.Context(), src, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := byName(cs)["late"]; ok {
				t.Fatalf("the full read lists %q before it holds a cluster: %+v", "late", cs)
			}
			if c.name == "s3" {
				// Before its backup, the name costs one listing of its
				// directories, not of what it holds.
				lists := recordLists(fs.proxy, "fleet/")
				if _, err := r.Refresh(t.Context(), src, nil); err != nil {
					t.Fatal(err)
				}
				if got, want := lists.take(), []string{"/", "/", "a1/agents/"}; !slices.Equal(got, want) {
					t.Errorf("refresh before late's backup listed %q, want %q", got, want)
				}
				fs.proxy.SetFault(nil)
			}
			synthetic(t, c.store, "late", "aa02", now)
			for i := range 2 {
				cs, err := r.Refresh(t.Context(), src, nil)
				if err != nil {
					t.Fatal(err)
				}
				if l, ok := byName(cs)["late"]; !ok || l.Backups != 1 {
					t.Errorf("refresh %d after its first backup: cluster late %+v (present %v), want it with 1 backup", i+1, l, ok)
				}
			}
		})
	}
}
