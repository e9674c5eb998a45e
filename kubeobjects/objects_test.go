package kubeobjects

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRecoverabilityObject: the status object says what a restore can
// reach (intact backups, recoverable windows), names the newest intact
// backup and the last drill with a verdict, and lists the problems, a
// failed last drill among them; nothing recoverable is said in capitals.
func TestRecoverabilityObject(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := &Client{cfg: Config{Namespace: "lifeboat", Cluster: "prod"}}
	tests := []struct {
		name string
		st   Status
		want map[string]any
	}{
		{
			name: "nothing",
			st:   Status{At: t0},
			want: map[string]any{"cluster": "prod", "namespace": "lifeboat", "backups": int64(0), "syncedAt": "2026-12-04T12:00:00Z",
				"windows": []any{}, "recoverable": "NOTHING RECOVERABLE", "problems": []any{}},
		},
		{
			name: "backups, a window, a failed drill",
			st: Status{At: t0, Problems: []string{"backup b0 is broken: data object missing"},
				Backups: []Backup{
					{ID: "b2", CreatedAt: t0.Add(-time.Hour), Revision: 20, State: "ok", Drill: Drill{Verdict: "failed", FinishedAt: t0.Add(-30 * time.Minute), Error: "check failed"}},
					{ID: "b1", CreatedAt: t0.Add(-2 * time.Hour), Revision: 10, State: "ok", Drill: Drill{Verdict: "passed", FinishedAt: t0.Add(-90 * time.Minute), Seconds: 1.23}},
					{ID: "b0", CreatedAt: t0.Add(-3 * time.Hour), Revision: 5, State: "broken", Drill: Drill{Verdict: "never"}},
				},
				Windows: []Window{{Generation: "b1", FromRevision: 10, ThroughRevision: 30, From: t0.Add(-2 * time.Hour), Through: t0, Recoverable: true}},
			},
			want: map[string]any{"cluster": "prod", "namespace": "lifeboat", "backups": int64(3), "syncedAt": "2026-12-04T12:00:00Z",
				"windows": []any{map[string]any{"generation": "b1", "recoverable": true, "sealed": false, "fromRevision": int64(10), "throughRevision": int64(30),
					"from": "2026-12-04T10:00:00Z", "through": "2026-12-04T12:00:00Z"}},
				"recoverable":  "2 intact backup(s); point in time: r10-r30 (2026-12-04T10:00:00Z to 2026-12-04T12:00:00Z)",
				"newestBackup": map[string]any{"id": "b2", "createdAt": "2026-12-04T11:00:00Z", "revision": int64(20)},
				"lastDrill":    map[string]any{"backupID": "b2", "verdict": "failed", "finishedAt": "2026-12-04T11:30:00Z", "recoverySeconds": float64(0), "error": "check failed"},
				"problems":     []any{"backup b0 is broken: data object missing", "the last drill (of backup b2) failed: check failed"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.recoverabilityObject(tt.st)["status"]
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
