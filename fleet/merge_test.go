package fleet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestMergeAgents: the Helm chart's two CronJobs each state one job's
// schedule; together (within mergeWithin) they are the cluster's
// promises, the newest document's identity kept.
func TestMergeAgents(t *testing.T) {
	backupRun := &repository.AgentStatus{Agent: "backup-pod", Mode: repository.AgentOnce, WrittenAt: at(time.Hour), StaleAfter: 3 * 3600,
		Schedules: repository.AgentSchedules{Snapshot: "@hourly", Prune: "@hourly"},
		Jobs:      map[string]repository.AgentJob{"snapshot": {LastResult: "success"}}}
	drillRun := &repository.AgentStatus{Agent: "drill-pod", Mode: repository.AgentOnce, WrittenAt: t0,
		Schedules: repository.AgentSchedules{Drill: "@daily"},
		Jobs:      map[string]repository.AgentJob{"drill": {LastResult: "failure", LastError: "boom"}, "snapshot": {LastResult: "failure"}}}
	oldDaemon := &repository.AgentStatus{Agent: "old", Mode: repository.AgentDaemon, WrittenAt: at(-72 * time.Hour),
		Schedules: repository.AgentSchedules{Drill: "@weekly"}, Capture: &repository.AgentCapture{Interval: 1}}
	for _, tc := range []struct {
		name string
		docs []*repository.AgentStatus
		want *repository.AgentStatus
	}{
		{"none", nil, nil},
		{"one", []*repository.AgentStatus{drillRun}, drillRun},
		{"the two CronJobs", []*repository.AgentStatus{backupRun, drillRun}, &repository.AgentStatus{
			Agent: "backup-pod", Mode: repository.AgentOnce, WrittenAt: at(time.Hour), StaleAfter: 3 * 3600,
			Schedules: repository.AgentSchedules{Snapshot: "@hourly", Prune: "@hourly", Drill: "@daily"},
			Jobs:      map[string]repository.AgentJob{"snapshot": {LastResult: "success"}, "drill": {LastResult: "failure", LastError: "boom"}}}},
		{"older than mergeWithin fills nothing", []*repository.AgentStatus{backupRun, oldDaemon}, backupRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeAgents(tc.docs)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
		})
	}
	if backupRun.Schedules.Drill != "" || len(backupRun.Jobs) != 1 {
		t.Errorf("mergeAgents changed its input: %+v", backupRun)
	}
}
