package fleet

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// BenchmarkHubDrill: the same backup (zstd and age, in versitygw)
// drilled by the hub (Drills.one: the drill view, the cluster's
// identities, its scratch subdirectory) and by an agent (drill.RunJob on
// the repository, as cmd/lifeboat's agent wires it), alternated within
// each iteration so that both see the same load; reported as each one's
// seconds per drill and the ratio hub / agent (issue 30's target: ≤ 1.05).
// FLEET_DRILL_OBJECTS sets the source's size (default 20 000
// Kubernetes-like objects).
func BenchmarkHubDrill(b *testing.B) {
	objects := envInt("FLEET_DRILL_OBJECTS", 20000)
	src := restoretest.StartSource(b, objects)
	srv := s3test.Start(b)
	repo := restoretest.S3Repo(b, srv)
	id := restoretest.NewIdentity(b)
	m := src.Backup(b, repo, restoretest.AgeEncoding(id))
	b.Logf("backup %s: %d keys, %.1f MiB database, %.1f MiB stored", m.ID, m.TotalKeys, float64(m.DBSize)/(1<<20), float64(m.ObjectSize)/(1<<20))
	scratch := b.TempDir()
	lg := slog.New(slog.DiscardHandler)
	agent := drill.Job{Backups: repo, Target: "latest", Options: drill.Options{
		Identities: []age.Identity{id}, ScratchDir: filepath.Join(scratch, "agent"), Version: "bench",
	}}
	hub, err := NewDrills(DrillConfig{Schedule: "@daily", Concurrency: 1, ScratchDir: filepath.Join(scratch, "hub"), Version: "bench",
		Identities: func(string) ([]age.Identity, error) { return []age.Identity{id}, nil }}, DefaultPolicy(), lg)
	if err != nil {
		b.Fatal(err)
	}
	source := Source{Name: "bucket", Store: repo.Store}
	var hubT, agentT time.Duration
	phases := map[string]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		runs := []func() (*drill.Outcome, error){
			func() (*drill.Outcome, error) { return drill.RunJob(b.Context(), agent, lg) },
			func() (*drill.Outcome, error) { return hub.one(b.Context(), source, repo.Cluster) },
		}
		took := make([]time.Duration, 2)
		for k := range 2 {
			j := (i + k) % 2 // alternate which goes first
			start := time.Now()
			out, err := runs[j]()
			if err != nil || out == nil || !out.Passed {
				b.Fatalf("drill %d: %+v, %v", j, out, err)
			}
			took[j] = time.Since(start)
			for name, d := range out.Phases {
				phases[[]string{"agent", "hub"}[j]+"-"+name] += d
			}
		}
		agentT += took[0]
		hubT += took[1]
	}
	b.ReportMetric(agentT.Seconds()/float64(b.N), "agent-s/op")
	b.ReportMetric(hubT.Seconds()/float64(b.N), "hub-s/op")
	b.ReportMetric(hubT.Seconds()/agentT.Seconds(), "hub/agent")
	for name, d := range phases {
		b.ReportMetric(d.Seconds()/float64(b.N), name+"-s/op")
	}
}
