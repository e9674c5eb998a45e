package kubeobjects

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/units"
)

// Status is what the store holds for one cluster, as the caller listed it:
// what Sync mirrors.
type Status struct {
	// Backups are the retained backups, newest first.
	Backups []Backup
	// Windows are the capture windows, oldest first (none without capture).
	Windows []Window
	// Problems are what is wrong with the store as the caller sees it
	// (broken or untrusted backups, unreadable drill reports, window
	// problems), one sentence each.
	Problems []string
	// At is when the store was listed.
	At time.Time
}

// Backup is one retained backup.
type Backup struct {
	ID        string
	CreatedAt time.Time
	Revision  int64
	// Keys is the number of keys in the snapshot.
	Keys int64
	// DBSize is the snapshot's size; StoredSize the stored object's.
	DBSize, StoredSize int64
	// State is the store's: ok, broken or untrusted; Problem says why it
	// is not ok.
	State, Problem string
	// HashKV is how the snapshot's HashKV compared with the live member's
	// when it was taken (the manifest's hash_kv_status).
	HashKV string
	// Drill is its newest drill.
	Drill Drill
}

// Drill is the newest drill of a backup.
type Drill struct {
	// Verdict is passed, failed, never, or unknown (the newest report
	// cannot be read: Error says why).
	Verdict    string
	FinishedAt time.Time // zero when never or unknown
	// Seconds is the drill's recovery time.
	Seconds float64
	// PointInTime is the revision a point-in-time drill replayed to (0:
	// the snapshot alone).
	PointInTime int64
	Error       string
}

// Window is one capture generation's recoverable window.
type Window struct {
	Generation                    string
	FromRevision, ThroughRevision int64
	From, Through                 time.Time
	Recoverable, Sealed           bool
	Problem                       string
}

// verified is an EtcdBackup's VERIFIED column: yes for an intact backup
// (every stored backup was verified before upload and its data object is
// present and of its size), otherwise the state in capitals.
func (b Backup) verified() string {
	switch b.State {
	case "ok":
		return "yes"
	case "":
		return "UNKNOWN"
	}
	return strings.ToUpper(b.State)
}

// backupObject is b's EtcdBackup, without resourceVersion.
func (c *Client) backupObject(b Backup) map[string]any {
	status := map[string]any{
		"state":     b.State,
		"verified":  b.verified(),
		"lastDrill": drillFields(b.Drill),
	}
	if b.Problem != "" {
		status["problem"] = b.Problem
	}
	if b.HashKV != "" {
		status["hashKV"] = b.HashKV
	}
	return map[string]any{
		"apiVersion": apiVersion, "kind": kindBackup,
		"metadata": map[string]any{
			"name": BackupName(c.cfg.Cluster, b.ID), "namespace": c.cfg.Namespace, "labels": c.labels(),
		},
		"spec": map[string]any{
			"cluster": c.cfg.Cluster, "backupID": b.ID, "createdAt": timeString(b.CreatedAt),
			"revision": b.Revision, "keys": b.Keys, "size": units.Bytes(b.StoredSize),
			"storedBytes": b.StoredSize, "dbBytes": b.DBSize,
		},
		"status": status,
	}
}

func drillFields(d Drill) map[string]any {
	m := map[string]any{"verdict": d.Verdict}
	if setTime(m, "finishedAt", d.FinishedAt) {
		m["recoverySeconds"] = math.Round(d.Seconds*10) / 10
	}
	if d.PointInTime > 0 {
		m["pointInTimeRevision"] = d.PointInTime
	}
	if d.Error != "" {
		m["error"] = d.Error
	}
	return m
}

// recoverabilityObject is the cluster's EtcdRecoverability, without
// resourceVersion.
func (c *Client) recoverabilityObject(st Status) map[string]any {
	status := map[string]any{
		"cluster": c.cfg.Cluster, "namespace": c.cfg.Namespace, "backups": int64(len(st.Backups)),
		"syncedAt": timeString(st.At), "windows": windowList(st.Windows),
		"recoverable": recoverableSummary(st),
	}
	problems := st.Problems
	if n := newest(st.Backups); n != nil {
		status["newestBackup"] = map[string]any{"id": n.ID, "createdAt": timeString(n.CreatedAt), "revision": n.Revision}
	}
	if id, d := lastDrill(st.Backups); id != "" {
		f := drillFields(d)
		f["backupID"] = id
		status["lastDrill"] = f
		if d.Verdict != "passed" {
			problems = append(problems, fmt.Sprintf("the last drill (of backup %s) %s: %s", id, d.Verdict, d.Error))
		}
	}
	status["problems"] = stringList(problems)
	return map[string]any{
		"apiVersion": apiVersion, "kind": kindRecoverable,
		"metadata": map[string]any{"name": ObjectName(c.cfg.Cluster), "labels": c.labels()},
		"status":   status,
	}
}

// newest is the newest intact backup, nil when there is none.
func newest(bs []Backup) *Backup {
	for i := range bs {
		if bs[i].State == "ok" {
			return &bs[i]
		}
	}
	return nil
}

// lastDrill is the most recent drill that reached a verdict, and its
// backup's id ("" when none did).
func lastDrill(bs []Backup) (string, Drill) {
	var id string
	var last Drill
	for _, b := range bs {
		if b.Drill.FinishedAt.IsZero() || !b.Drill.FinishedAt.After(last.FinishedAt) {
			continue
		}
		id, last = b.ID, b.Drill
	}
	return id, last
}

// recoverableSummary is one line: what a restore can reach now.
func recoverableSummary(st Status) string {
	var parts []string
	for _, w := range st.Windows {
		if w.Recoverable {
			parts = append(parts, fmt.Sprintf("r%d-r%d (%s to %s)", w.FromRevision, w.ThroughRevision, timeString(w.From), timeString(w.Through)))
		}
	}
	n := 0
	for _, b := range st.Backups {
		if b.State == "ok" {
			n++
		}
	}
	s := fmt.Sprintf("%d intact backup(s)", n)
	if len(parts) > 0 {
		s += "; point in time: " + strings.Join(parts, ", ")
	}
	if n == 0 && len(parts) == 0 {
		return "NOTHING RECOVERABLE"
	}
	return s
}

func windowList(ws []Window) []any {
	out := []any{}
	for _, w := range ws {
		m := map[string]any{
			"generation": w.Generation, "recoverable": w.Recoverable, "sealed": w.Sealed,
			"fromRevision": w.FromRevision, "throughRevision": w.ThroughRevision,
		}
		setTime(m, "from", w.From)
		setTime(m, "through", w.Through)
		if w.Problem != "" {
			m["problem"] = w.Problem
		}
		out = append(out, m)
	}
	return out
}

func stringList(ss []string) []any {
	out := []any{}
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}

// setTime sets m[key] to t unless t is zero (a date-time field holds no
// empty string) and says whether it did.
func setTime(m map[string]any, key string, t time.Time) bool {
	if t.IsZero() {
		return false
	}
	m[key] = timeString(t)
	return true
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (c *Client) labels() map[string]any {
	return map[string]any{LabelManagedBy: ManagedBy, LabelCluster: LabelValue(c.cfg.Cluster)}
}
