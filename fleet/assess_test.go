package fleet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/repository"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ptr[T any](v T) *T { return &v }

// healthy is a cluster whose agent backs up every 10 minutes, drills
// daily, and wrote its status document just now; its newest backup and
// drill are fresh.
func healthy() Cluster {
	return Cluster{
		Store: "s3://b/p", Name: "prod", Backups: 5,
		Newest: &Backup{ID: "20261130T120000Z-r100", CreatedAt: t0, Revision: 100, RevisionTime: t0},
		Recent: []time.Time{t0, at(-10 * time.Minute), at(-20 * time.Minute)},
		Drill:  &Drill{BackupID: "20261130T120000Z-r100", State: repository.DrillPassed, Started: t0, Finished: at(time.Minute), RTO: 9},
		Agent: &repository.AgentStatus{Agent: "node-a/1", Mode: repository.AgentDaemon, WrittenAt: t0, Started: at(-48 * time.Hour),
			Every: 60, Leader: true, Schedules: repository.AgentSchedules{Snapshot: "@every 10m", Drill: "@daily"}},
		Agents: 1, Leaders: 1,
	}
}

func TestAssess(t *testing.T) {
	p := DefaultPolicy()
	for _, tc := range []struct {
		name string
		edit func(c *Cluster)
		now  time.Time
		want []string // problem kinds
	}{
		{"healthy", nil, at(2 * time.Minute), nil},
		{"10-minute schedule at 12 min is not stale", nil, at(12 * time.Minute), nil},
		{"10-minute schedule at 25 min is stale", func(c *Cluster) { c.Agent.WrittenAt = at(24 * time.Minute) }, at(25 * time.Minute), []string{ProblemStale}},
		{"daily schedule at 2 h is not stale", func(c *Cluster) {
			c.Agent.Schedules.Snapshot, c.Agent.WrittenAt = "@daily", at(2*time.Hour)
		}, at(2 * time.Hour), nil},
		{"daily schedule with stale_after 3h at 2 h is not stale", func(c *Cluster) {
			c.Agent.Schedules.Snapshot, c.Agent.WrittenAt, c.Agent.StaleAfter = "@daily", at(2*time.Hour), repository.SecondsOf(3*time.Hour)
		}, at(2 * time.Hour), nil},
		{"daily schedule at 26 h is stale", func(c *Cluster) {
			c.Agent.Schedules.Snapshot, c.Agent.WrittenAt, c.Drill.Started = "@daily", at(26*time.Hour), at(25*time.Hour)
		}, at(26 * time.Hour), []string{ProblemStale}},
		{"stale_after earlier than the schedule decides", func(c *Cluster) {
			c.Agent.Schedules.Snapshot, c.Agent.StaleAfter, c.Agent.WrittenAt = "@every 1h", repository.SecondsOf(30*time.Minute), at(45*time.Minute)
		}, at(45 * time.Minute), []string{ProblemStale}},
		{"idle cluster checked unchanged at 20 min is not stale at 25 min", func(c *Cluster) {
			c.Agent.WrittenAt = at(24 * time.Minute)
			c.Agent.Jobs = map[string]repository.AgentJob{"snapshot": {LastAttempt: ptr(at(20 * time.Minute)), LastResult: "success",
				LastSuccess: ptr(at(20 * time.Minute)), LastUnchanged: ptr(at(20 * time.Minute)), UnchangedSince: c.Newest.ID}}
		}, at(25 * time.Minute), nil},
		{"unchanged since another backup than the newest is stale", func(c *Cluster) {
			c.Agent.WrittenAt = at(24 * time.Minute)
			c.Agent.Jobs = map[string]repository.AgentJob{"snapshot": {LastAttempt: ptr(at(20 * time.Minute)), LastResult: "success",
				LastSuccess: ptr(at(20 * time.Minute)), LastUnchanged: ptr(at(20 * time.Minute)), UnchangedSince: "20261130T110000Z-r90"}}
		}, at(25 * time.Minute), []string{ProblemStale}},
		{"no agent: 10-minute spacing at 14 min is not stale", func(c *Cluster) { c.Agent = nil }, at(14 * time.Minute), nil},
		{"no agent: 10-minute spacing at 25 min is stale", func(c *Cluster) { c.Agent = nil }, at(25 * time.Minute), []string{ProblemStale}},
		{"no agent, one backup: default 25h", func(c *Cluster) { c.Agent, c.Recent = nil, c.Recent[:1] }, at(24 * time.Hour), nil},
		{"no agent, one backup, 26h", func(c *Cluster) { c.Agent, c.Recent, c.Drill = nil, c.Recent[:1], nil }, at(26 * time.Hour), []string{ProblemStale}},
		{"no backup at all", func(c *Cluster) { c.Newest, c.Recent, c.Backups = nil, nil, 0 }, at(time.Minute), []string{ProblemStale}},
		{"drill failed", func(c *Cluster) { c.Drill.State, c.Drill.Error = repository.DrillFailed, "hash_kv mismatch" }, at(time.Minute), []string{ProblemDrillFailed}},
		{"drill report unreadable", func(c *Cluster) { c.Drill.State = repository.DrillUnknown }, at(time.Minute), []string{ProblemDrillUnknown}},
		{"daily drill overdue at 26 h", func(c *Cluster) {
			c.Newest.CreatedAt, c.Recent[0], c.Agent.WrittenAt = at(26*time.Hour), at(26*time.Hour), at(26*time.Hour)
		}, at(26 * time.Hour), []string{ProblemDrillOverdue}},
		{"never drilled, daily schedule, agent up two days", func(c *Cluster) { c.Drill = nil }, at(time.Minute), []string{ProblemDrillOverdue}},
		{"no drill schedule: no drill expected", func(c *Cluster) { c.Drill, c.Agent.Schedules.Drill = nil, "" }, at(time.Minute), nil},
		{"no agent: drill spacing overdue", func(c *Cluster) {
			c.Agent, c.DrillStarts = nil, []time.Time{at(-2 * time.Hour), at(-3 * time.Hour), at(-4 * time.Hour)}
			c.Drill.Started = at(-2 * time.Hour)
		}, at(time.Minute), []string{ProblemDrillOverdue}},
		{"daemon agent silent after 5 of its minutes", func(c *Cluster) { c.Agent.WrittenAt = at(-6 * time.Minute) }, at(time.Minute), []string{ProblemAgentSilent}},
		{"daemon agent written 4 min ago is not silent", func(c *Cluster) { c.Agent.WrittenAt = at(-3 * time.Minute) }, at(time.Minute), nil},
		{"--once agent silent when its next run is late", func(c *Cluster) {
			c.Agent.Mode, c.Agent.Every, c.Agent.Schedules.Snapshot, c.Agent.WrittenAt = repository.AgentOnce, 0, "@hourly", at(-3*time.Hour)
			c.Newest.CreatedAt, c.Recent[0] = at(-time.Minute), at(-time.Minute)
		}, at(time.Minute), []string{ProblemAgentSilent}},
		{"last snapshot run failed", func(c *Cluster) {
			c.Agent.Jobs = map[string]repository.AgentJob{"snapshot": {LastAttempt: ptr(at(time.Minute)), LastResult: "failure", LastError: "etcd unreachable"}}
		}, at(2 * time.Minute), []string{ProblemJobFailed}},
		{"capture behind", func(c *Cluster) {
			c.Agent.Capture = &repository.AgentCapture{Interval: 1, Active: true}
			c.Window = &Window{Generation: c.Newest.ID, From: 100, Through: 500, FromTime: t0, ThroughTime: at(time.Minute), Recoverable: true}
		}, at(7 * time.Minute), []string{ProblemCaptureBehind}},
		{"capture current", func(c *Cluster) {
			c.Agent.Capture = &repository.AgentCapture{Interval: 1, Active: true}
			c.Window = &Window{Generation: c.Newest.ID, From: 100, Through: 500, FromTime: t0, ThroughTime: at(6 * time.Minute), Recoverable: true}
		}, at(7 * time.Minute), nil},
		{"capture on, no window", func(c *Cluster) { c.Agent.Capture = &repository.AgentCapture{Interval: 1} }, at(time.Minute), []string{ProblemCaptureBehind}},
		{"no agent: an open window from the newest backup that stopped", func(c *Cluster) {
			c.Agent = nil
			c.Window = &Window{Generation: c.Newest.ID, From: 100, Through: 500, FromTime: t0, ThroughTime: at(time.Minute), Recoverable: true, AnchorNewest: true}
		}, at(8 * time.Minute), []string{ProblemCaptureBehind}},
		{"window broken", func(c *Cluster) {
			c.Window = &Window{Generation: c.Newest.ID, From: 100, Through: 300, FromTime: t0, ThroughTime: at(time.Minute), Recoverable: true, Sealed: true, Problem: "gap after r300"}
		}, at(2 * time.Minute), []string{ProblemWindowBroken}},
		{"certificate expires in 10 days", func(c *Cluster) {
			c.Kit = &Kit{ID: "k", CertExpiry: at(10 * 24 * time.Hour), CertPath: "/etc/kubernetes/pki/apiserver.crt"}
		}, at(time.Minute), []string{ProblemCertExpiring}},
		{"certificate expires in 60 days", func(c *Cluster) { c.Kit = &Kit{ID: "k", CertExpiry: at(60 * 24 * time.Hour)} }, at(time.Minute), nil},
		{"certificate expired", func(c *Cluster) { c.Kit = &Kit{ID: "k", CertExpiry: at(-time.Hour)} }, at(time.Minute), []string{ProblemCertExpiring}},
		{"unreadable manifest and broken backup", func(c *Cluster) { c.Unreadable, c.Broken = 1, 2 }, at(time.Minute), []string{ProblemUnreadable}},
		{"untrusted objects", func(c *Cluster) { c.Untrusted, c.DrillUntrusted = 1, 1 }, at(time.Minute), []string{ProblemUntrusted}},
		{"untrusted agent document", func(c *Cluster) { c.AgentErrors, c.AgentUntrusted = []string{"x is untrusted"}, 1 }, at(time.Minute), []string{ProblemUntrusted}},
		{"two lineages", func(c *Cluster) {
			c.Lineages, c.LineageError = []string{"aaaa", "bbbb"}, "ambiguous"
		}, at(time.Minute), []string{ProblemLineages}},
		{"copy failing", func(c *Cluster) {
			c.Agent.Copies = []repository.AgentCopy{{Name: "dr", LastError: "access denied"}}
		}, at(time.Minute), []string{ProblemCopyBehind}},
		{"copy behind", func(c *Cluster) {
			c.Agent.Copies = []repository.AgentCopy{{Name: "dr", RecoveryPoint: ptr(at(-2 * time.Hour))}}
		}, at(time.Minute), []string{ProblemCopyBehind}},
		{"copy caught up", func(c *Cluster) { c.Agent.Copies = []repository.AgentCopy{{Name: "dr", RecoveryPoint: ptr(t0)}} }, at(time.Minute), nil},
		{"store unreadable", func(c *Cluster) { *c = Cluster{Store: "s3://b", Name: "*", ReadError: "access denied"} }, at(time.Minute), []string{ProblemUnreadable}},
		{"several, in kind order", func(c *Cluster) {
			c.Drill.State, c.Untrusted, c.Agent.WrittenAt = repository.DrillFailed, 1, t0
		}, at(25 * time.Minute), []string{ProblemUntrusted, ProblemStale, ProblemDrillFailed, ProblemAgentSilent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthy()
			c.Agent.WrittenAt = tc.now.Add(-30 * time.Second) // a live agent, unless the case says otherwise
			if tc.edit != nil {
				tc.edit(&c)
			}
			s := Assess(c, p, tc.now)
			var got []string
			for _, pr := range s.Problems {
				got = append(got, pr.Kind)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%+v", diff, s.Problems)
			}
		})
	}
}

// TestAssessRecoveryPoint: the recovery point is the capture window's
// end when it is recoverable and newer than the newest backup.
func TestAssessRecoveryPoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		window  *Window
		want    time.Time
		wantSrc string
	}{
		{"backup only", nil, t0, "backup"},
		{"capture ahead", &Window{Generation: "g", ThroughTime: at(5 * time.Minute), Recoverable: true}, at(5 * time.Minute), "capture"},
		{"unrecoverable window", &Window{Generation: "g", ThroughTime: at(5 * time.Minute)}, t0, "backup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthy()
			c.Window = tc.window
			s := Assess(c, DefaultPolicy(), at(6*time.Minute))
			if s.RecoveryPoint == nil || !s.RecoveryPoint.Equal(tc.want) || s.RecoverySource != tc.wantSrc {
				t.Errorf("recovery point %v (%s), want %v (%s)", s.RecoveryPoint, s.RecoverySource, tc.want, tc.wantSrc)
			}
		})
	}
}

// TestAssessNextExpected: the next backup is due by the agent's own
// schedule (cron arithmetic), or by the backups' spacing.
func TestAssessNextExpected(t *testing.T) {
	c := healthy()
	c.Agent.Schedules.Snapshot = "0 3 * * *"
	s := Assess(c, DefaultPolicy(), at(time.Minute))
	if want := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC); s.NextExpected == nil || !s.NextExpected.Equal(want) || s.ExpectedBy != "schedule 0 3 * * *" {
		t.Errorf("next expected %v by %q, want %v by the schedule", s.NextExpected, s.ExpectedBy, want)
	}
	c.Agent = nil
	s = Assess(c, DefaultPolicy(), at(time.Minute))
	if want := at(10 * time.Minute); s.NextExpected == nil || !s.NextExpected.Equal(want) || s.ExpectedBy != "spacing 10m" {
		t.Errorf("next expected %v by %q, want %v by spacing 10m", s.NextExpected, s.ExpectedBy, want)
	}
}
