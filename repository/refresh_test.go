package repository_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// refreshBackups is the repository size TestRefreshRequests measures.
const refreshBackups = 1000

// refresh does what the agent does every five minutes: list the backups
// and read the last drill of each.
func refresh(t *testing.T, b *repository.Repo) (*repository.Listing, map[string]*repository.LastDrill) {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	d, err := b.LastDrills(t.Context())
	if err != nil {
		t.Fatalf("LastDrills: %v", err)
	}
	return l, d
}

// testManifest is a manifest of backup i with its (empty) data object's key.
func testManifest(b *repository.Repo, i int) *repository.Manifest {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add(time.Duration(i) * 15 * time.Minute)
	id := repository.NewID(at, int64(1000+i))
	return &repository.Manifest{
		Format: repository.ManifestFormat, ID: id, Cluster: b.Cluster, CreatedAt: at, Revision: int64(1000 + i),
		Object: b.ObjectKey(id, repository.Encoding{Compression: "none"}), ObjectSHA256: strings.Repeat("a", 64), SnapshotSHA256: strings.Repeat("b", 64),
		Compression: "none", Encryption: "none", AgentVersion: "test",
	}
}

// putBackupAndReport stores backup i (empty data object, manifest) and a
// passed drill report of it, written straight through the store: what
// List and LastDrills read, without taking snapshots.
func putBackupAndReport(ctx context.Context, b *repository.Repo, i int) error {
	m := testManifest(b, i)
	if _, err := b.Store.Put(ctx, m.Object, strings.NewReader(""), uploader.PutOptions{}); err != nil {
		return err
	}
	if err := b.PutManifest(ctx, m); err != nil {
		return err
	}
	return b.PutDrillReport(ctx, &repository.DrillReport{
		Format: repository.DrillReportFormat, BackupID: m.ID, Cluster: b.Cluster,
		StartedAt: m.CreatedAt.Add(time.Hour), FinishedAt: m.CreatedAt.Add(time.Hour + 10*time.Second), Passed: true, AgentVersion: "test",
	})
}

// TestRefreshRequests (issue 12, move 2): against a real S3 server with
// 1 000 backups, each with a drill report, a refresh of a cached
// repository costs its LIST requests only once it has read every object;
// one new backup and one new report cost exactly those two GETs. An
// uncached Repo (as before the cache) reads every manifest and report on
// every refresh. The figures go to docs/benchmarks.md ("Requests per
// refresh"); rerun with -v to print them.
func TestRefreshRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 3 000 objects to versitygw")
	}
	env := newFaultEnv(t)
	b := repository.New(env.store, "prod")
	ctx := t.Context()

	next := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := putBackupAndReport(ctx, b, i); err != nil {
					failed.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for i := range refreshBackups {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("store backup: %v", err)
	}

	counted := func(name string, f func()) map[string]int {
		t.Helper()
		env.proxy.ResetCounts()
		f()
		c := env.proxy.Counts()
		ops := slices.Sorted(maps.Keys(c))
		var parts []string
		for _, op := range ops {
			parts = append(parts, fmt.Sprintf("%s %d", op, c[op]))
		}
		t.Logf("%s: %s", name, strings.Join(parts, ", "))
		return c
	}
	onlyListsAndGets := func(name string, c map[string]int) {
		t.Helper()
		for op, n := range c {
			if op != "ListObjectsV2" && op != "GetObject" {
				t.Errorf("%s: %d %s requests; a refresh only lists and reads", name, n, op)
			}
		}
	}

	var l1, l2 *repository.Listing
	var d1, d2 map[string]*repository.LastDrill
	uncached := &repository.Repo{Store: b.Store, Cluster: b.Cluster}
	before := counted("uncached refresh", func() { refresh(t, uncached) })
	first := counted("first refresh", func() { l1, d1 = refresh(t, b) })
	second := counted("second refresh, nothing new", func() { l2, d2 = refresh(t, b) })
	if len(l1.Backups) != refreshBackups || len(d1) != refreshBackups {
		t.Fatalf("first refresh: %d backups, %d drilled; want %d of each", len(l1.Backups), len(d1), refreshBackups)
	}
	// A manifest's trust verdict is unexported: compared through its
	// accessors (the cache keeps it with the manifest).
	if diff := cmp.Diff(l1, l2, cmpopts.IgnoreUnexported(repository.Manifest{})); diff != "" {
		t.Errorf("cached listing differs (-first +second):\n%s", diff)
	}
	for i := range l1.Backups {
		m1, m2 := l1.Backups[i].Manifest, l2.Backups[i].Manifest
		if m1.Untrusted() != m2.Untrusted() || m1.Unsigned() != m2.Unsigned() {
			t.Errorf("cached %s: trust %v/%v, first read %v/%v", m2.ID, m2.Untrusted(), m2.Unsigned(), m1.Untrusted(), m1.Unsigned())
		}
	}
	if diff := cmp.Diff(d1, d2); diff != "" {
		t.Errorf("cached drills differ (-first +second):\n%s", diff)
	}
	for name, c := range map[string]map[string]int{"uncached refresh": before, "first refresh": first, "second refresh": second} {
		onlyListsAndGets(name, c)
	}
	if got, want := before["GetObject"], 2*refreshBackups; got != want {
		t.Errorf("uncached refresh: %d GETs; want %d (every manifest and report)", got, want)
	}
	if got, want := first["GetObject"], 2*refreshBackups; got != want {
		t.Errorf("first refresh: %d GETs; want %d (every manifest and report)", got, want)
	}
	if got := second["GetObject"]; got != 0 {
		t.Errorf("second refresh: %d GETs; want none (nothing new)", got)
	}
	if second["ListObjectsV2"] != first["ListObjectsV2"] || first["ListObjectsV2"] < 3 {
		t.Errorf("LIST requests: first refresh %d, second %d; want the same, at least 3 (2 000 snapshot objects, 1 000 reports, 1 000 per page)", first["ListObjectsV2"], second["ListObjectsV2"])
	}

	if err := putBackupAndReport(ctx, b, refreshBackups); err != nil {
		t.Fatal(err)
	}
	third := counted("refresh after one new backup and report", func() { l1, d1 = refresh(t, b) })
	onlyListsAndGets("third refresh", third)
	if got := third["GetObject"]; got != 2 {
		t.Errorf("refresh after one new backup and one new report: %d GETs; want 2", got)
	}
	if newest := testManifest(b, refreshBackups).ID; len(l1.Backups) != refreshBackups+1 || l1.Backups[0].Manifest.ID != newest || d1[newest].State() != repository.DrillPassed {
		t.Errorf("after one new backup: %d backups, newest %s; want %d, %s with a passed drill", len(l1.Backups), l1.Backups[0].Manifest.ID, refreshBackups+1, newest)
	}
}

// countingStore counts the Gets of a real store.
type countingStore struct {
	uploader.Store
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

// TestCacheFollowsListing: the listing decides what exists. A cached
// manifest whose object was deleted is no longer listed; a manifest
// deleted and written again with other content is read again; a manifest
// that cannot be parsed stays unreadable, read on every listing, and so
// does a drill report; a new report of a backup replaces the cached one.
func TestCacheFollowsListing(t *testing.T) {
	d := dirBackups(t, t.TempDir())
	st := &countingStore{Store: d.Store}
	b := repository.New(st, "test")
	ctx := t.Context()
	ids := make([]string, 3)
	for i := range ids {
		if err := putBackupAndReport(ctx, b, i); err != nil {
			t.Fatal(err)
		}
		ids[i] = testManifest(b, i).ID
	}
	// A manifest and the newest report of ids[1] that cannot be parsed.
	bad := repository.NewID(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 5)
	if _, err := st.Put(ctx, b.ManifestKey(bad), strings.NewReader("{not json"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, b.DrillReportKey(ids[1], time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)), strings.NewReader("{"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	type view struct {
		IDs        []string
		Revisions  []int64
		Unreadable int
		Drills     map[string]string
	}
	look := func() (view, int64) {
		t.Helper()
		st.gets.Store(0)
		l, dr := refresh(t, b)
		v := view{Unreadable: len(l.Unreadable), Drills: map[string]string{}}
		for _, e := range l.Backups {
			v.IDs = append(v.IDs, e.Manifest.ID)
			v.Revisions = append(v.Revisions, e.Manifest.Revision)
		}
		for id, ld := range dr {
			v.Drills[id] = ld.State()
		}
		return v, st.gets.Load()
	}
	check := func(name string, wantGets int64, want view) {
		t.Helper()
		got, gets := look()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: refresh mismatch (-want +got):\n%s", name, diff)
		}
		if gets != wantGets {
			t.Errorf("%s: %d reads; want %d", name, gets, wantGets)
		}
	}
	drills := map[string]string{ids[0]: repository.DrillPassed, ids[1]: repository.DrillUnknown, ids[2]: repository.DrillPassed}
	all := view{IDs: []string{ids[2], ids[1], ids[0]}, Revisions: []int64{1002, 1001, 1000}, Unreadable: 1, Drills: drills}
	check("first", 3+1+3, all)    // 4 manifests, 3 newest reports
	check("cached", 1+1, all)     // the unreadable manifest and report again
	check("cached again", 2, all) // still unknown, still read

	// Deleted: gone from the listing, though cached.
	if err := st.Delete(ctx, b.ManifestKey(ids[0])); err != nil {
		t.Fatal(err)
	}
	check("deleted", 2, view{IDs: []string{ids[2], ids[1]}, Revisions: []int64{1002, 1001}, Unreadable: 1, Drills: drills})

	// Written again (delete first: stores never replace) with another
	// revision: read anew.
	m := testManifest(b, 2)
	m.Revision = 123456
	if err := st.Delete(ctx, b.ManifestKey(m.ID)); err != nil {
		t.Fatal(err)
	}
	if err := b.PutManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	check("rewritten", 3, view{IDs: []string{ids[2], ids[1]}, Revisions: []int64{123456, 1001}, Unreadable: 1, Drills: drills})

	// A newer, failed report of ids[2]: its verdict changes, one read.
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	if err := b.PutDrillReport(ctx, &repository.DrillReport{
		Format: repository.DrillReportFormat, BackupID: ids[2], Cluster: b.Cluster,
		StartedAt: at, FinishedAt: at, Error: "boot failed", AgentVersion: "test",
	}); err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{ids[0]: repository.DrillPassed, ids[1]: repository.DrillUnknown, ids[2]: repository.DrillFailed}
	check("new report", 3, view{IDs: []string{ids[2], ids[1]}, Revisions: []int64{123456, 1001}, Unreadable: 1, Drills: failed})
}

// TestCacheCopies: what a refresh returns is the caller's to edit; the
// next refresh still gives the stored values.
func TestCacheCopies(t *testing.T) {
	b := dirBackups(t, t.TempDir())
	if err := putBackupAndReport(t.Context(), b, 0); err != nil {
		t.Fatal(err)
	}
	l, d := refresh(t, b)
	id := l.Backups[0].Manifest.ID
	l.Backups[0].Manifest.Revision = -1
	d[id].Passed = false
	l, d = refresh(t, b)
	if l.Backups[0].Manifest.Revision != 1000 || !d[id].Passed {
		t.Errorf("after editing the first refresh's values: revision %d, passed %v; want 1000, true", l.Backups[0].Manifest.Revision, d[id].Passed)
	}
}
