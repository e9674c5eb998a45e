package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// DrillReportFormat is the drill report format version this build writes
// and reads.
const DrillReportFormat = 1

// DrillReport is the record of one restore drill of one backup: what was
// done, how long each phase took, what was checked and the verdict. It is
// stored as JSON at <cluster>/drills/<backup id>/<time>.json and never holds
// secrets.
type DrillReport struct {
	Format   int    `json:"format"`
	BackupID string `json:"backup_id"`
	Cluster  string `json:"cluster"`
	// EtcdClusterID and Lineage are the drilled backup's (its etcd
	// cluster and the lineage it belongs to); empty in reports of older
	// builds.
	EtcdClusterID string `json:"etcd_cluster_id,omitempty"`
	Lineage       string `json:"lineage,omitempty"`
	// StartedAt and FinishedAt bound the drill (UTC).
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Phases are the drill's steps in order with their wall-clock
	// durations; they do not overlap, so their sum is RecoverySeconds.
	Phases []Phase `json:"phases"`
	// Checks are every check made, in order, passed or not.
	Checks []Check `json:"checks"`
	// Passed is the verdict: no error and every check passed.
	Passed bool `json:"passed"`
	// Error says why the drill could not complete (empty when it did;
	// failed checks are in Checks).
	Error string `json:"error,omitempty"`
	// RecoverySeconds is the measured recovery time: the sum of the phases,
	// from the first byte fetched to a restored etcd that passed its checks.
	RecoverySeconds float64 `json:"recovery_seconds"`
	// Etcd says which etcd served the restored data ("embedded v3.7.3" or
	// the binary's path and version).
	Etcd string `json:"etcd,omitempty"`
	// AgentVersion is lifeboat's version.
	AgentVersion string `json:"agent_version"`
	// PointInTime is set for a point-in-time drill: BackupID is then the
	// snapshot the replay started from, and the verdict is on that
	// snapshot and its generation's changes up to the target together.
	// Absent in a plain drill's report (and in reports of older builds).
	PointInTime *PointInTimeDrill `json:"point_in_time,omitempty"`
	// Kit is what the drill found in the backup's recovery kit (absent
	// when the backup names none).
	Kit *KitDrill `json:"kit,omitempty"`
}

// PointInTimeDrill is what a point-in-time drill replayed and compared:
// the target, the snapshot and segments it started from, the replay's
// figures, and HashKV at the target on the live cluster and on the
// restored copy (after compacting the copy to the live compact revision).
type PointInTimeDrill struct {
	// TargetRevision is the revision restored; TargetTime the time it was
	// resolved from, when the target was a time.
	TargetRevision int64      `json:"target_revision"`
	TargetTime     *time.Time `json:"target_time,omitempty"`
	// Generation is the capture generation whose window holds the target.
	Generation string `json:"generation"`
	// SnapshotRevision is the start snapshot's revision (its id is the
	// report's BackupID).
	SnapshotRevision int64 `json:"snapshot_revision"`
	// Segments is how many segments were replayed, FirstSegment and
	// LastSegment their first and last keys.
	Segments     int    `json:"segments"`
	FirstSegment string `json:"first_segment,omitempty"`
	LastSegment  string `json:"last_segment,omitempty"`
	// Revisions, Ops and Leases are what the replay applied (revisions
	// SnapshotRevision+1 through TargetRevision) and the leases it granted.
	Revisions int64 `json:"revisions"`
	Ops       int64 `json:"ops"`
	Leases    int   `json:"leases"`
	// ReplaySeconds is the replay's wall time (reading the segments
	// included), RevisionsPerSecond its rate.
	ReplaySeconds      float64 `json:"replay_seconds"`
	RevisionsPerSecond float64 `json:"revisions_per_second"`
	// LiveHashKV and LiveCompactRevision are the live cluster's HashKV at
	// TargetRevision and the compact revision it was computed over, from
	// LiveMember at LiveEndpoint.
	LiveHashKV          uint32 `json:"live_hash_kv"`
	LiveCompactRevision int64  `json:"live_compact_revision"`
	LiveMember          string `json:"live_member,omitempty"`
	LiveEndpoint        string `json:"live_endpoint,omitempty"`
	// RestoredHashKV and RestoredCompactRevision are the restored copy's,
	// after it was compacted to LiveCompactRevision (0 when the drill did
	// not get that far).
	RestoredHashKV          uint32 `json:"restored_hash_kv"`
	RestoredCompactRevision int64  `json:"restored_compact_revision"`
}

// Phase is one step of a drill and its wall-clock duration.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Check is one comparison a drill made.
type Check struct {
	Name     string `json:"name"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	Passed   bool   `json:"passed"`
}

// FailedChecks returns the checks that did not pass.
func (r *DrillReport) FailedChecks() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, c)
		}
	}
	return out
}

// ErrBadDrillReport is wrapped by drill report decoding errors.
var ErrBadDrillReport = errors.New("bad drill report")

// ParseDrillReport decodes and validates a drill report. Unknown fields
// are tolerated; a wrong format or a missing backup id or time is an error
// wrapping ErrBadDrillReport.
func ParseDrillReport(b []byte) (*DrillReport, error) {
	var r DrillReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadDrillReport, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks the report's fields for consistency.
func (r *DrillReport) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadDrillReport, fmt.Sprintf(format, a...))
	}
	switch {
	case r.Format != DrillReportFormat:
		return bad("format %d, this build reads format %d", r.Format, DrillReportFormat)
	case !ValidID(r.BackupID):
		return bad("backup id %q", r.BackupID)
	case r.StartedAt.IsZero():
		return bad("no start time")
	case r.FinishedAt.Before(r.StartedAt):
		return bad("finished before it started")
	case r.Passed && r.Error != "":
		return bad("passed with an error")
	}
	for _, c := range r.Checks {
		if r.Passed && !c.Passed {
			return bad("passed with failed check %q", c.Name)
		}
	}
	return nil
}

// Marshal encodes the report as indented JSON.
func (r *DrillReport) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// drillTimeFormat names report objects: fixed width, so keys sort by time.
const drillTimeFormat = "20060102T150405.000Z"

func (b *Repo) drillDir() string { return path.Join(b.Cluster, "drills") + "/" }

// DrillReportKey returns the key of the report of a drill of backup id
// started at t.
func (b *Repo) DrillReportKey(id string, t time.Time) string {
	return b.drillDir() + id + "/" + t.UTC().Format(drillTimeFormat) + ".json"
}

// PutDrillReport stores r beside its backup. Reports are never replaced:
// when a report of a drill that started in the same millisecond is stored
// already (two agents), this one goes under the same time with a suffix
// (<time>-2.json, ...).
func (b *Repo) PutDrillReport(ctx context.Context, r *DrillReport) error {
	if err := r.Validate(); err != nil {
		return err
	}
	data, err := r.Marshal()
	if err != nil {
		return err
	}
	base := b.DrillReportKey(r.BackupID, r.StartedAt)
	key := base
	for n := 2; ; n++ {
		signed, err := b.sign(kindDrill, key, data) // the key is signed too
		if err != nil {
			return err
		}
		_, err = b.Store.Put(ctx, key, bytes.NewReader(signed), b.Lock.Options("application/json"))
		if err == nil {
			return nil
		}
		if !errors.Is(err, uploader.ErrExists) || n > maxReportSuffix {
			return fmt.Errorf("write drill report %s: %w", key, err)
		}
		key = strings.TrimSuffix(base, ".json") + "-" + strconv.Itoa(n) + ".json"
	}
}

// maxReportSuffix bounds the names tried for reports of one start time.
const maxReportSuffix = 20

// readDrillReport reads the report at key; an untrusted one is an error
// (wrapping ErrUntrusted): its verdict is unknown, never taken.
func (b *Repo) readDrillReport(ctx context.Context, key string) (*DrillReport, error) {
	return readDocument(ctx, b.Store, key, "drill report", func(data []byte) (*DrillReport, error) {
		if _, err := b.check(kindDrill, key, data); err != nil {
			return nil, err
		}
		return ParseDrillReport(data)
	})
}

// Drill states of a backup, as LastDrill.State reports them.
const (
	DrillNever   = "never"   // no drill report
	DrillPassed  = "passed"  // the newest report says passed
	DrillFailed  = "failed"  // the newest report says failed
	DrillUnknown = "unknown" // the newest report cannot be read: no verdict
)

// LastDrill is what the store says about the newest drill of one backup.
// The embedded report is nil exactly when Err is set: check State (or Err)
// before reading its fields.
type LastDrill struct {
	*DrillReport
	// Key is the newest report's key.
	Key string
	// Started is when that drill started, from its key: known even when
	// the report cannot be read.
	Started time.Time
	// Err says why the newest report could not be read (a store error)
	// or parsed. The verdict is then unknown: an older report never
	// stands in for it, since the newest drill may have failed.
	Err error
}

// State is DrillPassed, DrillFailed, DrillUnknown, or DrillNever for a nil
// LastDrill.
func (l *LastDrill) State() string {
	switch {
	case l == nil:
		return DrillNever
	case l.Err != nil || l.DrillReport == nil:
		return DrillUnknown
	case l.Passed:
		return DrillPassed
	}
	return DrillFailed
}

// drillReaders bounds the reports read at once, as manifestReaders does.
const drillReaders = 8

// LastDrills returns the newest drill of every backup that has a report,
// by backup id: one listing of the drills area, then one read per backup,
// of its newest report only and only when not cached (see New), up to
// drillReaders at once. A newest report
// that cannot be read gives a LastDrill with Err set (state unknown); only
// a failed listing or the end of ctx fails the call.
func (b *Repo) LastDrills(ctx context.Context) (map[string]*LastDrill, error) {
	newest, err := b.listNewestReports(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*LastDrill, len(newest))
	ids := make([]string, 0, len(newest))
	objs := make([]uploader.ObjectInfo, 0, len(newest))
	for id, o := range newest {
		out[id] = &LastDrill{Key: o.Key, Started: reportTime(o.Key)}
		ids = append(ids, id)
		objs = append(objs, o)
	}
	reports, errs := readDocuments(ctx, objs, drillReaders, b.cache.report, b.readDrillReport)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read drill reports: %w", err)
	}
	b.cache.keepReports(objs, reports, errs)
	for i, id := range ids {
		if errs[i] != nil {
			out[id].Err = errs[i]
			continue
		}
		r := *reports[i] // callers may edit theirs; the cached one stays as read
		out[id].DrillReport = &r
	}
	return out, nil
}

// listNewestReports lists the drills area and returns each backup's
// newest report, by backup id.
func (b *Repo) listNewestReports(ctx context.Context) (map[string]uploader.ObjectInfo, error) {
	newest := map[string]uploader.ObjectInfo{}
	dir := b.drillDir()
	err := b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		rest := strings.TrimPrefix(o.Key, dir)
		id, name, ok := strings.Cut(rest, "/")
		if !ok || !ValidID(id) || strings.Contains(name, "/") || !strings.HasSuffix(name, ".json") {
			return nil
		}
		if cur, ok := newest[id]; !ok || reportAfter(o.Key, cur.Key) {
			newest[id] = o
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list drill reports: %w", err)
	}
	return newest, nil
}

// reportAfter reports whether report key a is newer than b: by the start
// time their names give, then by the suffix a same-millisecond report
// gets (<time>.json, <time>-2.json, <time>-3.json, … in the order they
// were stored). Plain key order would put <time>-2.json first ('-' sorts
// before '.').
func reportAfter(a, b string) bool {
	ta, na := reportOrder(a)
	tb, nb := reportOrder(b)
	if ta != tb {
		return ta > tb
	}
	return na > nb
}

// reportOrder splits a report's name into its time part and suffix
// number (1 for none).
func reportOrder(key string) (string, int) {
	name := strings.TrimSuffix(path.Base(key), ".json")
	if len(name) <= len(drillTimeFormat) || name[len(drillTimeFormat)] != '-' {
		return name, 1
	}
	n, err := strconv.Atoi(name[len(drillTimeFormat)+1:])
	if err != nil {
		return name, 1
	}
	return name[:len(drillTimeFormat)], n
}

// reportTime is the start time a report's key names (zero if none).
func reportTime(key string) time.Time {
	name := path.Base(key)
	if len(name) < len(drillTimeFormat) {
		return time.Time{}
	}
	t, err := time.Parse(drillTimeFormat, name[:len(drillTimeFormat)])
	if err != nil {
		return time.Time{}
	}
	return t
}
