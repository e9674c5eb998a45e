package fleet

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// fleetStores is a fleet in two real stores: an S3 bucket (versitygw,
// through a proxy that counts requests) and a directory.
type fleetStores struct {
	s3    uploader.Store
	proxy *s3test.Proxy
	dir   uploader.Store
}

func newFleetStores(t *testing.T) fleetStores {
	t.Helper()
	srv := s3test.Start(t)
	_, bucket := jobtest.NewS3Store(t, srv, false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{Bucket: bucket, Prefix: "fleet", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return fleetStores{s3: st, proxy: proxy, dir: dir}
}

// snap takes a real backup of etcd into cluster's place in st
// (backup.Run, as lifeboat snapshot does).
func snap(t *testing.T, ec *etcdtest.Cluster, st uploader.Store, cluster string) *repository.Manifest {
	t.Helper()
	if _, err := ec.Client(t).Put(t.Context(), "/fleet/"+cluster, time.Now().String()); err != nil {
		t.Fatal(err)
	}
	repo := repository.New(st, cluster)
	lg, _ := jobtest.Logger(t)
	m, err := backup.Run(t.Context(), backup.Job{
		Etcd: snapshot.Config{Endpoints: ec.Endpoints()}, SpoolDir: filepath.Join(t.TempDir(), "spool"), Backups: repo,
		Encoding: repository.Encoding{Compression: "zstd"}, Version: "test",
	}, lg)
	if err != nil {
		t.Fatalf("backup of %s: %v", cluster, err)
	}
	return m
}

// synthetic stores backups of cluster at the given times (through
// repository, like an older agent's), of one etcd cluster id.
func synthetic(t *testing.T, st uploader.Store, cluster, etcdID string, times ...time.Time) {
	t.Helper()
	repo := repository.New(st, cluster)
	for _, at := range times {
		m := jobtest.PutObject(t, repo, at, uploader.PutOptions{})
		m.EtcdClusterID = etcdID
		if err := repo.PutManifest(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func status(t testing.TB, st uploader.Store, cluster, schedule string, written time.Time) {
	t.Helper()
	s := &repository.AgentStatus{Cluster: cluster, Agent: cluster + "-node/1", Version: "test", Mode: repository.AgentDaemon,
		WrittenAt: written, Started: written.Add(-time.Hour), Every: 60, Leader: true,
		Schedules: repository.AgentSchedules{Snapshot: schedule}, StaleAfter: repository.SecondsOf(3 * time.Hour)}
	if err := repository.New(st, cluster).PutAgentStatus(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// TestFleetStatus: clusters written by real backups of a real etcd and
// synthetic older ones at chosen times, in a bucket and a directory,
// each judged by its own schedule; a single stale status document is
// only its cluster's problem; reading never writes.
func TestFleetStatus(t *testing.T) {
	fs := newFleetStores(t)
	ec := etcdtest.Start(t, etcdtest.Options{Members: 1})
	now := time.Now().UTC()
	min := func(n int) time.Time { return now.Add(time.Duration(n) * time.Minute) }

	// In the bucket:
	snap(t, ec, fs.s3, "alpha") // every 10 minutes, its agent alive
	status(t, fs.s3, "alpha", "@every 10m", now)
	snap(t, ec, fs.s3, "epsilon") // every 10 minutes, its agent silent for 10 minutes
	status(t, fs.s3, "epsilon", "@every 10m", min(-10))
	// An older agent's clusters (no status document): 10-minute spacing,
	// 2 h quiet; daily spacing, 2 h since the last.
	synthetic(t, fs.s3, "gamma", "aa01", min(-150), min(-140), min(-130), min(-120))
	synthetic(t, fs.s3, "delta", "aa02", min(-120-2*24*60), min(-120-24*60), min(-120))
	// Two etcd clusters' backups under one name.
	synthetic(t, fs.s3, "eta", "aa03", min(-20), min(-10))
	synthetic(t, fs.s3, "eta", "bb03", min(-5))
	// In the directory: a daily cluster 2 h after its backup, and a
	// failed drill of another.
	snap(t, ec, fs.dir, "zeta")
	status(t, fs.dir, "zeta", "@daily", now)
	synthetic(t, fs.dir, "theta", "aa04", min(-30), min(-20), min(-10))
	failed := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: mustNewest(t, fs.dir, "theta"), Cluster: "theta",
		StartedAt: min(-5), FinishedAt: min(-4), Error: "restored etcd did not become healthy"}
	if err := repository.New(fs.dir, "theta").PutDrillReport(t.Context(), failed); err != nil {
		t.Fatal(err)
	}

	fs.proxy.ResetCounts()
	lg, _ := jobtest.Logger(t)
	cs, err := Read(t.Context(), []Source{{Name: "bucket", Store: fs.s3}, {Name: "dir", Store: fs.dir}}, lg)
	if err != nil {
		t.Fatal(err)
	}
	if fs.proxy.Count("ListObjectsV2") == 0 || fs.proxy.Count("GetObject") == 0 {
		t.Errorf("requests seen by the proxy: %v; want the reads to go through it", fs.proxy.Counts())
	}
	for op, n := range fs.proxy.Counts() {
		if op != "GetObject" && op != "ListObjectsV2" && op != "HeadObject" {
			t.Errorf("reading the fleet sent %d %s requests: it must only read", n, op)
		}
	}
	r := NewReport(cs, DefaultPolicy(), now.Add(2*time.Minute))
	got := map[string][]string{}
	for _, s := range r.Clusters {
		kinds := []string{}
		for _, p := range s.Problems {
			kinds = append(kinds, p.Kind)
		}
		got[s.Store+"/"+s.Name] = kinds
	}
	want := map[string][]string{
		"bucket/alpha":   {},
		"bucket/epsilon": {ProblemAgentSilent},
		"bucket/gamma":   {ProblemStale},
		"bucket/delta":   {},
		"bucket/eta":     {ProblemLineages},
		"dir/zeta":       {},
		"dir/theta":      {ProblemDrillFailed},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems by cluster (-want +got):\n%s", diff)
		var b strings.Builder
		r.WriteTable(&b)
		t.Log("\n" + b.String())
	}
	if testing.Verbose() {
		var b strings.Builder
		r.WriteTable(&b)
		t.Log("\n" + b.String())
	}
	if r.Problems() != 4 || len(r.WithProblems().Clusters) != 4 || len(r.Clusters[0].Problems) == 0 {
		t.Errorf("%d clusters with problems, the first row %s: want 4, problem rows first", r.Problems(), r.Clusters[0].Name)
	}
	for _, s := range r.Clusters {
		switch s.Name {
		case "alpha":
			if s.ExpectedBy != "schedule @every 10m" || s.Agent == nil || s.RecoverySource != "backup" || s.Newest == nil {
				t.Errorf("alpha: expected by %q, agent %v, recovery %s", s.ExpectedBy, s.Agent != nil, s.RecoverySource)
			}
		case "gamma":
			if s.ExpectedBy != "spacing 10m" {
				t.Errorf("gamma: expected by %q, want the backups' spacing", s.ExpectedBy)
			}
		case "delta":
			if s.ExpectedBy != "spacing 24h" {
				t.Errorf("delta: expected by %q, want the backups' spacing", s.ExpectedBy)
			}
		case "theta":
			if s.Drill == nil || s.Drill.State != repository.DrillFailed {
				t.Errorf("theta: drill %+v", s.Drill)
			}
		}
	}
}

// TestFleetStoreUnreadable: a store that cannot be listed is a row with
// the problem, never an empty fleet.
func TestFleetStoreUnreadable(t *testing.T) {
	fs := newFleetStores(t)
	synthetic(t, fs.dir, "ok", "aa01", time.Now().Add(-time.Minute))
	fs.proxy.SetFault(func(r *http.Request, n int) s3test.Fault { return s3test.Status(http.StatusForbidden) })
	cs, err := Read(t.Context(), []Source{{Name: "bucket", Store: fs.s3}, {Name: "dir", Store: fs.dir}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReport(cs, DefaultPolicy(), time.Now())
	if len(r.Clusters) != 2 || r.Clusters[0].Store != "bucket" || len(r.Clusters[0].Problems) != 1 || r.Clusters[0].Problems[0].Kind != ProblemUnreadable ||
		!slices.Equal([]string{r.Clusters[1].Store, r.Clusters[1].Name}, []string{"dir", "ok"}) {
		t.Errorf("report: %+v", r.Clusters)
	}
}

func mustNewest(t *testing.T, st uploader.Store, cluster string) string {
	t.Helper()
	ids := jobtest.Manifests(t, repository.New(st, cluster))
	return ids[len(ids)-1]
}

// TestFleetTrust: with trusted keys, a cluster whose store holds a
// manifest and a status document not signed by a trusted key has the
// untrusted problem; a cluster written with the trusted key has none,
// its signed status document read.
func TestFleetTrust(t *testing.T) {
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, tc := range []struct {
		cluster string
		signer  *signing.Key
	}{{"signed", key}, {"planted", nil}} {
		repo := repository.New(st, tc.cluster)
		repo.Signer = tc.signer
		for _, at := range []time.Time{now.Add(-20 * time.Minute), now.Add(-10 * time.Minute)} {
			m := jobtest.PutObject(t, repo, at, uploader.PutOptions{})
			if err := repo.PutManifest(t.Context(), m); err != nil {
				t.Fatal(err)
			}
		}
		s := &repository.AgentStatus{Cluster: tc.cluster, Agent: "a", Mode: repository.AgentDaemon, WrittenAt: now, Every: 60,
			Schedules: repository.AgentSchedules{Snapshot: "@every 10m"}}
		if err := repo.PutAgentStatus(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	trust := &signing.Trust{Keys: []signing.PublicKey{key.Public()}}
	cs, err := Read(t.Context(), []Source{{Name: "dir", Store: st, Trust: trust}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, s := range NewReport(cs, DefaultPolicy(), now).Clusters {
		kinds := []string{}
		for _, p := range s.Problems {
			kinds = append(kinds, p.Kind)
		}
		got[s.Name] = kinds
		if s.Name == "signed" && (s.Agent == nil || s.Backups != 2) {
			t.Errorf("signed: agent %v, %d backups; want its signed document and both backups", s.Agent, s.Backups)
		}
		if s.Name == "planted" && (s.Untrusted != 2 || s.AgentUntrusted != 1 || s.Newest != nil) {
			t.Errorf("planted: %d untrusted manifests, %d untrusted documents, newest %v", s.Untrusted, s.AgentUntrusted, s.Newest)
		}
	}
	want := map[string][]string{"signed": {}, "planted": {ProblemUntrusted, ProblemStale}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
