package fleet

import (
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// writeIndex writes cluster's index as its agent does after a job.
func writeIndex(t testing.TB, st uploader.Store, cluster string, signer *signing.Key, at time.Time) {
	t.Helper()
	repo := repository.New(st, cluster)
	repo.Signer = signer
	if _, err := (&repository.Indexer{Repo: repo, Writer: cluster + "-node/1"}).Write(t.Context(), at); err != nil {
		t.Fatal(err)
	}
}

// TestReadThroughIndex: the first read of a store reads a cluster with
// an index from it (in versitygw, the requests counted): its rows are
// those of a read that lists every object, a backup stored after the
// index included, for one GET of the index and one of that new
// manifest instead of one per document; the rows say they were read
// through the index. A data object deleted behind the agent's back
// after its index is not seen by that read and is by the next (a full
// listing), which no longer says "indexed". An index that is not signed
// by a trusted key is not used. NoIndex reads every object.
func TestReadThroughIndex(t *testing.T) {
	fs := newFleetStores(t)
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	trust := &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, name := range []string{"indexed", "forged", "plain"} {
		repo := repository.New(fs.s3, name)
		repo.Signer = key
		for h := 6; h >= 2; h-- {
			m := putSigned(t, repo, now.Add(-time.Duration(h)*time.Hour))
			if h == 2 {
				r := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: m.ID, Cluster: name,
					StartedAt: now.Add(-90 * time.Minute), FinishedAt: now.Add(-89 * time.Minute), Passed: true, RecoverySeconds: 9}
				if err := repo.PutDrillReport(t.Context(), r); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := repo.PutAgentStatus(t.Context(), &repository.AgentStatus{Cluster: name, Agent: name + "-node/1", Version: "test",
			Mode: repository.AgentDaemon, WrittenAt: now, Started: now.Add(-7 * time.Hour), Every: 60, Leader: true,
			Schedules: repository.AgentSchedules{Snapshot: "@hourly"}}); err != nil {
			t.Fatal(err)
		}
	}
	writeIndex(t, fs.s3, "indexed", key, now.Add(-time.Hour))
	writeIndex(t, fs.s3, "forged", nil, now.Add(-time.Hour)) // no signature: not used
	signed := repository.New(fs.s3, "indexed")
	signed.Signer = key
	putSigned(t, signed, now.Add(-time.Minute)) // after the index

	src := []Source{{Name: "bucket", Store: fs.s3, Trust: trust}}
	read := func(r *Reader) map[string]Cluster {
		t.Helper()
		fs.proxy.ResetCounts()
		cs, err := r.Read(t.Context(), src, nil)
		if err != nil {
			t.Fatal(err)
		}
		return byName(cs)
	}
	full := NewReader()
	full.NoIndex = true
	want := read(full)
	fullGets := fs.proxy.Count("GetObject")
	for name, c := range want {
		if !c.IndexedAt.IsZero() {
			t.Errorf("NoIndex: %s says it was read through an index", name)
		}
	}
	if c := want["indexed"]; c.Backups != 6 || c.Untrusted != 0 || c.Drill == nil {
		t.Fatalf("the full read of the indexed cluster: %+v", c)
	}

	r := NewReader()
	got := read(r)
	// The full read's GETs, less the indexed cluster's 5 indexed
	// manifests and its report, plus its index and the forged one (read,
	// refused).
	if n, want := fs.proxy.Count("GetObject"), fullGets-6+2; n != want {
		t.Errorf("read through the index: %d GETs, want %d (the full read's %d)", n, want, fullGets)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(Cluster{}), cmpopts.IgnoreFields(Cluster{}, "IndexedAt")); diff != "" {
		t.Errorf("read through the index differs from the full read (-full +indexed):\n%s", diff)
	}
	if at := got["indexed"].IndexedAt; !at.Equal(now.Add(-time.Hour)) {
		t.Errorf("indexed cluster: IndexedAt %s, want its index's time %s", at, now.Add(-time.Hour))
	}
	for _, name := range []string{"forged", "plain"} {
		if !got[name].IndexedAt.IsZero() {
			t.Errorf("%s (no usable index) says it was read through one", name)
		}
	}

	// Damage behind the agent's back after its index: not seen by a read
	// through it (as its row says), seen by the next read.
	l, err := repository.New(fs.s3, "indexed").List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.s3.Delete(t.Context(), l.Backups[len(l.Backups)-1].Manifest.Object); err != nil {
		t.Fatal(err)
	}
	if c := read(NewReader())["indexed"]; c.Broken != 0 || c.IndexedAt.IsZero() {
		t.Errorf("a new Reader after a data object was deleted: broken %d, indexed at %s; want 0 and the index's time (it cannot see it)", c.Broken, c.IndexedAt)
	}
	if c := read(r)["indexed"]; c.Broken != 1 || c.Backups != 5 || !c.IndexedAt.IsZero() {
		t.Errorf("the next read: broken %d, %d backups, indexed at %s; want 1 broken, 5 backups, every object listed", c.Broken, c.Backups, c.IndexedAt)
	}
	if c := read(r)["plain"]; !c.IndexedAt.IsZero() {
		t.Error("plain: indexed")
	}

	// A single read (fleet status) keeps no cluster's documents after it.
	once := NewReader()
	once.ForgetDocs = true
	if c := read(once)["indexed"]; c.Broken != 0 || c.IndexedAt.IsZero() {
		t.Errorf("ForgetDocs: %+v", c)
	}
	if n := len(once.docs["bucket"].clusters); n != 0 {
		t.Errorf("ForgetDocs: %d clusters' documents kept after the read", n)
	}
}

// putSigned stores a backup at at with repo's signer.
func putSigned(t *testing.T, repo *repository.Repo, at time.Time) *repository.Manifest {
	t.Helper()
	m := jobtest.PutObject(t, repo, at, uploader.PutOptions{})
	if err := repo.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReadThroughIndexCapture: a cluster with a week of capture (seven
// sealed generations and a live one) read through its index: the same
// row and windows as a read that lists every object, with the sealed
// generations' change objects taken from the index, the live
// generation's listed only after the newest segment the index lists (a
// segment stored since is seen), and every progress marker served from
// it (two GETs: the index and the agent's document).
func TestReadThroughIndexCapture(t *testing.T) {
	srv := s3test.Start(t)
	_, bucket := jobtest.NewS3Store(t, srv, false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{Bucket: bucket, Prefix: "fleet", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	repo := repository.New(st, "captured")
	live := jobtest.SevenDaysOfCapture(t, repo, now.Add(-7*24*time.Hour-13*time.Hour))
	status(t, st, "captured", "@daily", now)
	writeIndex(t, st, "captured", nil, now)
	// A segment of the live generation stored after the index (its name
	// sorts after the rest: a higher revision): both reads must see it.
	after := repo.SegmentKey(live, 1<<40, 1<<40, repository.Encoding{Compression: "zstd"})
	if _, err := st.Put(t.Context(), after, strings.NewReader("not read by a listing"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	src := []Source{{Name: "bucket", Store: st}}
	full := NewReader()
	full.NoIndex = true
	want, err := full.Read(t.Context(), src, nil)
	if err != nil || len(want) != 1 {
		t.Fatalf("full read: %v %+v", err, want)
	}
	if w := want[0].Windows; len(w) != 8 || want[0].Window == nil || want[0].Window.Generation != live {
		t.Fatalf("full read: %d windows, newest %+v; want 8, the live generation %s", len(w), want[0].Window, live)
	}
	var mu sync.Mutex
	var changes []string // the change listings: prefix and start-after
	proxy.SetFault(func(r *http.Request, _ int) s3test.Fault {
		if q := r.URL.Query(); s3test.Op(r) == "ListObjectsV2" && strings.HasPrefix(q.Get("prefix"), "fleet/captured/changes/") && q.Get("delimiter") == "" {
			mu.Lock()
			changes = append(changes, strings.TrimPrefix(q.Get("prefix"), "fleet/")+" after "+path.Base(q.Get("start-after")))
			mu.Unlock()
		}
		return s3test.None
	})
	proxy.ResetCounts()
	got, err := NewReader().Read(t.Context(), src, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("read through the index: %v %+v", err, got)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(Cluster{}), cmpopts.IgnoreFields(Cluster{}, "IndexedAt")); diff != "" {
		t.Errorf("read through the index differs from the full read (-full +indexed):\n%s", diff)
	}
	if got[0].IndexedAt.IsZero() {
		t.Error("the row does not say it was read through the index")
	}
	if n := proxy.Count("GetObject"); n != 2 {
		t.Errorf("%d GETs, want 2 (the index and the agent's document)", n)
	}
	if len(changes) != 1 || !strings.HasPrefix(changes[0], "captured/changes/"+live+"/ after ") || strings.HasSuffix(changes[0], " after .") {
		t.Errorf("change directories listed: %v, want only the live generation's, after the newest segment its index lists", changes)
	}
	// The segment after the index leaves a gap the full read reports; the
	// read through the index (equal, above) saw it too.
	if w := want[0].Window; w == nil || w.Problem == "" {
		t.Errorf("the full read's window %+v: want the gap before the segment stored after the index", w)
	}
}
