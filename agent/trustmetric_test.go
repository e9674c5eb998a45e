package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestUntrustedObjectsAndLineages: with trusted keys configured, the
// agent's listing counts what someone without the cluster's signing key
// wrote to the store in lifeboat_untrusted_objects, by kind, and the
// lineages under the cluster name in lifeboat_lineages. The store holds a
// real backup of a real etcd signed by the trusted key; then a backup of
// the same etcd signed by another key, an unsigned drill report of the
// real backup, an unsigned progress marker vouching for its generation
// and a trusted backup of another etcd cluster are planted. Each kind
// counts 1, the planted backup is not counted broken, lineages goes to 2,
// and /status shows the same.
func TestUntrustedObjectsAndLineages(t *testing.T) {
	lg, _ := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st, 20)
	own, rogue := newSigningKey(t), newSigningKey(t)
	trusted := repository.New(st, testCluster)
	trusted.Signer = own
	trusted.Trust = &signing.Trust{Keys: []signing.PublicKey{own.Public()}}
	snap := func(b *repository.Repo) *repository.Manifest {
		t.Helper()
		m, err := backup.Run(t.Context(), backup.Job{
			Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: b,
			Encoding: repository.Encoding{Compression: "zstd"}, Version: "test",
		}, lg)
		if err != nil {
			t.Fatalf("backup: %v", err)
		}
		return m
	}
	real := snap(trusted)

	clock := newFakeClock(real.CreatedAt.Add(time.Hour))
	a := start(t, Config{
		Cluster: testCluster, Backups: trusted, Snapshot: &backup.Job{Backups: trusted}, Capture: newFakeCapture().run,
		Listen: "127.0.0.1:0", Clock: clock, Registry: NewRegistry(), Version: "test",
		RefreshInterval: time.Minute,
	}, lg)
	next := func() {
		t.Helper()
		waitFor(t, "the next refresh", 10*time.Second, func() bool { return clock.hasWaiter(clock.Now().Add(time.Minute)) })
		clock.Advance(time.Minute)
	}
	want := func(backups, drills, markers, lineages int) string {
		return fmt.Sprintf(`# HELP lifeboat_lineages %s
# TYPE lifeboat_lineages gauge
lifeboat_lineages %d
# HELP lifeboat_untrusted_objects %s
# TYPE lifeboat_untrusted_objects gauge
lifeboat_untrusted_objects{kind="backup"} %d
lifeboat_untrusted_objects{kind="drill_report"} %d
lifeboat_untrusted_objects{kind="progress_marker"} %d
`, helpOf(t, "lifeboat_lineages"), lineages, helpOf(t, "lifeboat_untrusted_objects"), backups, drills, markers)
	}
	next()
	waitForMetrics(t, a, want(0, 0, 0, 1))
	_, body := scrape(t, a.url)
	promtoolCheck(t, body)

	// The planted objects.
	if _, err := f.etcd.Client(t).Put(t.Context(), "/registry/planted", "x"); err != nil {
		t.Fatal(err)
	}
	planted := snap(&repository.Repo{Store: st, Cluster: testCluster, Signer: rogue})
	unsigned := &repository.Repo{Store: st, Cluster: testCluster}
	started := real.CreatedAt.Add(10 * time.Minute)
	if err := unsigned.PutDrillReport(t.Context(), &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: real.ID,
		Cluster: testCluster, StartedAt: started, FinishedAt: started.Add(time.Second), Passed: true, AgentVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := unsigned.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: real.ID,
		ClusterID: real.EtcdClusterID, SnapshotID: real.ID, SnapshotRevision: real.Revision, Through: real.Revision,
		At: real.CreatedAt.Add(20 * time.Minute), Token: 1}); err != nil {
		t.Fatal(err)
	}
	other := jobtest.PutObject(t, trusted, real.CreatedAt.Add(-time.Hour), uploader.PutOptions{})
	other.EtcdClusterID = "1c2d3e4f5a6b7c8d"
	if err := trusted.PutManifest(t.Context(), other); err != nil {
		t.Fatal(err)
	}

	next()
	waitForMetrics(t, a, want(1, 1, 1, 2))
	mfs, body := scrape(t, a.url)
	promtoolCheck(t, body)
	if got := must(t, mfs, "lifeboat_backups", "state", "broken"); got != 0 {
		t.Errorf("lifeboat_backups{state=\"broken\"} = %v; want 0: the planted backup %s is untrusted, not broken", got, planted.ID)
	}
	if got := must(t, mfs, "lifeboat_backups", "state", "ok"); got != 2 {
		t.Errorf("lifeboat_backups{state=\"ok\"} = %v; want 2 (%s and the other lineage's %s)", got, real.ID, other.ID)
	}
	s := getStatus(t, a.url)
	if got := s.Untrusted; got[untrustedBackup] != 1 || got[untrustedDrill] != 1 || got[untrustedProgress] != 1 {
		t.Errorf("/status untrusted = %v; want 1 of each kind", got)
	}
	if len(s.Lineages) != 2 || s.Lineages[0].NewestBackup != real.ID || s.Lineages[1].NewestBackup != other.ID ||
		s.Lineages[1].ID != other.EtcdClusterID {
		t.Errorf("/status lineages = %+v; want %s's lineage, then %s's (%s)", s.Lineages, real.ID, other.ID, other.EtcdClusterID)
	}
	if s.NewestBackup == nil || s.NewestBackup.ID != real.ID {
		t.Errorf("/status newest_backup = %+v; want %s, not the planted %s", s.NewestBackup, real.ID, planted.ID)
	}

	// Gone again (deleted by the operator): back to 0 and 1.
	for _, key := range []string{trusted.ManifestKey(planted.ID), trusted.ManifestKey(other.ID)} {
		if err := st.Delete(t.Context(), key); err != nil {
			t.Fatal(err)
		}
	}
	next()
	waitForMetrics(t, a, want(0, 1, 1, 1))
}

// waitForMetrics waits until the agent's untrusted and lineage gauges
// read as want (text exposition format).
func waitForMetrics(t *testing.T, a *running, want string) {
	t.Helper()
	var diff string
	defer func() {
		if t.Failed() {
			t.Logf("last scrape (-got +want):\n%s", diff)
		}
	}()
	waitFor(t, "lifeboat_untrusted_objects and lifeboat_lineages", 10*time.Second, func() bool {
		diff = cmp.Diff(metricsText(t, a, "lifeboat_lineages", "lifeboat_untrusted_objects"), want)
		return diff == ""
	})
}

// metricsText is the text exposition of the named metrics, in order.
func metricsText(t *testing.T, a *running, names ...string) string {
	t.Helper()
	mfs := gather(t, a.reg)
	var b strings.Builder
	for _, n := range names {
		if mf := mfs[n]; mf != nil {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

func helpOf(t *testing.T, name string) string {
	t.Helper()
	for _, d := range agentMetrics {
		if d.name == name {
			return d.help
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}

func newSigningKey(t *testing.T) *signing.Key {
	t.Helper()
	k, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
