package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// Problem kinds: stable names for scripts, metrics and alerts.
const (
	ProblemStale         = "stale"          // no backup by the cluster's own schedule (or none at all)
	ProblemDrillFailed   = "drill_failed"   // the newest drill failed
	ProblemDrillUnknown  = "drill_unknown"  // the newest drill's report cannot be read
	ProblemDrillOverdue  = "drill_overdue"  // no drill by the drill schedule
	ProblemCaptureBehind = "capture_behind" // the change window lags
	ProblemWindowBroken  = "window_broken"  // the newest window ends before its segments or cannot be restored
	ProblemAgentSilent   = "agent_silent"   // no status document for too long
	ProblemJobFailed     = "job_failed"     // the agent's last run of a job failed
	ProblemCopyBehind    = "copy_behind"    // a copy lags the primary or fails
	ProblemCertExpiring  = "cert_expiring"  // a certificate of the recovery kit expires soon
	ProblemUnreadable    = "unreadable"     // objects (or the store) that cannot be read
	ProblemUntrusted     = "untrusted"      // objects not signed by a trusted key
	ProblemLineages      = "lineages"       // backups of two competing etcd cluster lineages
)

// ProblemKinds are every problem kind, in the order Assess reports them.
var ProblemKinds = []string{ProblemUnreadable, ProblemUntrusted, ProblemLineages, ProblemStale, ProblemJobFailed,
	ProblemDrillFailed, ProblemDrillUnknown, ProblemDrillOverdue, ProblemCaptureBehind, ProblemWindowBroken,
	ProblemAgentSilent, ProblemCopyBehind, ProblemCertExpiring}

// Problem is one thing wrong with a cluster, in words.
type Problem struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// Policy holds the thresholds that no cluster states for itself.
type Policy struct {
	// DefaultStaleAfter is the newest backup's age at which a cluster is
	// stale when its schedule is unknown (no agent status document and
	// fewer than two backups to space).
	DefaultStaleAfter time.Duration `json:"default_stale_after"`
	// AgentSilentAfter is the least time without a status document after
	// which a daemon is silent (at least five of its own intervals).
	AgentSilentAfter time.Duration `json:"agent_silent_after"`
	// CaptureBehind is the least lag of the change window after which
	// capture is behind (at least 60 of its intervals).
	CaptureBehind time.Duration `json:"capture_behind"`
	// CopyBehind is how far a copy may lag the primary's newest backup.
	CopyBehind time.Duration `json:"copy_behind"`
	// CertWarning is how long before a kit certificate's expiry it is a
	// problem.
	CertWarning time.Duration `json:"cert_warning"`
	// MinGrace and MaxGrace bound how late a scheduled run may be: half
	// its period, but at least MinGrace and at most MaxGrace (jitter,
	// retries, a slow upload).
	MinGrace time.Duration `json:"min_grace"`
	MaxGrace time.Duration `json:"max_grace"`
}

// DefaultPolicy returns the default thresholds.
func DefaultPolicy() Policy {
	return Policy{
		DefaultStaleAfter: 25 * time.Hour,
		AgentSilentAfter:  5 * time.Minute,
		CaptureBehind:     5 * time.Minute,
		CopyBehind:        time.Hour,
		CertWarning:       30 * 24 * time.Hour,
		MinGrace:          5 * time.Minute,
		MaxGrace:          time.Hour,
	}
}

// Status is a cluster as read and as judged.
type Status struct {
	Cluster
	// ExpectedBy says what the next backup is expected by: "schedule
	// @every 10m", "stale_after 3h", "spacing 10m", or "default 25h".
	ExpectedBy string `json:"expected_by"`
	// NextExpected is when the next backup is due; StaleAt when its
	// absence makes the cluster stale.
	NextExpected *time.Time `json:"next_expected,omitempty"`
	StaleAt      *time.Time `json:"stale_at,omitempty"`
	// RecoveryPoint is the newest time a restore reaches now, from
	// RecoverySource ("capture" or "backup").
	RecoveryPoint  *time.Time `json:"recovery_point,omitempty"`
	RecoverySource string     `json:"recovery_source,omitempty"`
	// DrillDue is when the next drill is due (nil: no drill schedule known).
	DrillDue *time.Time `json:"drill_due,omitempty"`
	Problems []Problem  `json:"problems"`
}

// cronParser reads schedules as the agent does (five fields with
// optional seconds, descriptors, CRON_TZ=).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// grace is how late a run may be: half its period, between MinGrace
// and MaxGrace.
func (p Policy) grace(period time.Duration) time.Duration {
	return min(max(period/2, p.MinGrace), p.MaxGrace)
}

// due is when a job is expected after last by a schedule, and when it
// is late.
type due struct {
	next, late time.Time
	how        string
}

// bySchedule is due by a cron schedule: its next run after last, late
// by grace of the schedule's period there.
func (p Policy) bySchedule(spec string, last time.Time) (due, bool) {
	s, err := cronParser.Parse(spec)
	if err != nil {
		return due{}, false
	}
	next := s.Next(last)
	if next.IsZero() {
		return due{}, false
	}
	period := s.Next(next).Sub(next)
	return due{next: next, late: next.Add(p.grace(period)), how: "schedule " + spec}, true
}

// bySpacing is due by the median spacing of times (newest first).
func (p Policy) bySpacing(times []time.Time) (due, bool) {
	if len(times) < 2 {
		return due{}, false
	}
	gaps := make([]time.Duration, 0, len(times)-1)
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i-1].Sub(times[i]))
	}
	slices.Sort(gaps)
	period := gaps[len(gaps)/2]
	if period <= 0 {
		return due{}, false
	}
	next := times[0].Add(period)
	return due{next: next, late: next.Add(p.grace(period)), how: "spacing " + human(period)}, true
}

// Assess judges c at now: what is expected when, the recovery point,
// and the problems in words. It is a pure function of its arguments.
func Assess(c Cluster, p Policy, now time.Time) Status {
	s := Status{Cluster: c, Problems: []Problem{}}
	add := func(kind, format string, a ...any) {
		s.Problems = append(s.Problems, Problem{Kind: kind, Text: fmt.Sprintf(format, a...)})
	}
	if c.ReadError != "" {
		add(ProblemUnreadable, "cannot be read: %s", c.ReadError)
		return s
	}
	assessObjects(c, add)
	s.assessBackups(p, now, add)
	s.assessAgent(p, now, add)
	s.assessDrills(p, now, add)
	s.assessCapture(p, now, add)
	s.assessCopies(p, now, add)
	if k := c.Kit; k != nil && k.Error == "" && !k.CertExpiry.IsZero() && !now.Add(p.CertWarning).Before(k.CertExpiry) {
		if now.Before(k.CertExpiry) {
			add(ProblemCertExpiring, "certificate %s in the recovery kit expires in %s (%s)", k.CertPath, human(k.CertExpiry.Sub(now)), k.CertExpiry.Format(time.DateOnly))
		} else {
			add(ProblemCertExpiring, "certificate %s in the recovery kit expired %s ago (%s)", k.CertPath, human(now.Sub(k.CertExpiry)), k.CertExpiry.Format(time.DateOnly))
		}
	}
	slices.SortStableFunc(s.Problems, func(a, b Problem) int {
		return slices.Index(ProblemKinds, a.Kind) - slices.Index(ProblemKinds, b.Kind)
	})
	return s
}

// assessObjects reports unreadable and untrusted objects and competing
// lineages.
func assessObjects(c Cluster, add func(kind, format string, a ...any)) {
	var unreadable []string
	if c.Unreadable > 0 {
		unreadable = append(unreadable, fmt.Sprintf("%d manifest(s) do not parse", c.Unreadable))
	}
	if c.Broken > 0 {
		unreadable = append(unreadable, fmt.Sprintf("%d backup(s) broken (data object missing or of the wrong size)", c.Broken))
	}
	if n := len(c.AgentErrors) - c.AgentUntrusted; n > 0 {
		unreadable = append(unreadable, fmt.Sprintf("%d agent status document(s) unreadable", n))
	}
	if c.Kit != nil && c.Kit.Error != "" && !c.Kit.Untrusted {
		unreadable = append(unreadable, "the recovery kit's manifest: "+c.Kit.Error)
	}
	if len(unreadable) > 0 {
		add(ProblemUnreadable, "unreadable: %s", strings.Join(unreadable, "; "))
	}
	var untrusted []string
	for _, u := range []struct {
		n    int
		what string
	}{{c.Untrusted, "backup manifest(s)"}, {c.DrillUntrusted, "newest drill report(s)"}, {c.AgentUntrusted, "agent status document(s)"}} {
		if u.n > 0 {
			untrusted = append(untrusted, fmt.Sprintf("%d %s", u.n, u.what))
		}
	}
	if c.Kit != nil && c.Kit.Untrusted {
		untrusted = append(untrusted, "the recovery kit's manifest")
	}
	if len(untrusted) > 0 {
		add(ProblemUntrusted, "not signed by a trusted key: %s (someone without this cluster's signing key wrote to its store)", strings.Join(untrusted, ", "))
	}
	if c.LineageError != "" {
		add(ProblemLineages, "backups of %d etcd cluster lineages (%s), none superseding the others: a restore of latest is ambiguous", len(c.Lineages), strings.Join(c.Lineages, ", "))
	}
}

// assessBackups sets what the next backup is expected by and the
// recovery point, and reports staleness. The deadline is the earliest
// of the agent's schedule and its stale_after; without an agent status
// document, the spacing of the recent backups; without that, the
// policy's default.
func (s *Status) assessBackups(p Policy, now time.Time, add func(kind, format string, a ...any)) {
	c := s.Cluster
	if c.Newest == nil {
		s.ExpectedBy = "no backup yet"
		add(ProblemStale, "no intact backup in the store")
		return
	}
	last, checked := c.Newest.CreatedAt, ""
	if t := unchangedAt(&c); t.After(last) {
		// The agent found the cluster unchanged since the newest backup
		// then: its state was backed up as of that check.
		last, checked = t, fmt.Sprintf(", checked unchanged at %s", t.UTC().Format(time.RFC3339))
	}
	var d due
	var ok bool
	if a := c.Agent; a != nil {
		if a.Schedules.Snapshot != "" {
			d, ok = p.bySchedule(a.Schedules.Snapshot, last)
		}
		if sa := a.StaleAfter.Duration(); sa > 0 && (!ok || last.Add(sa).Before(d.late)) {
			if ok { // the schedule says when the next is due, stale_after when it is late
				d.how += ", stale_after " + human(sa)
			} else {
				d.next, d.how = last.Add(sa), "stale_after "+human(sa)
			}
			d.late, ok = last.Add(sa), true
		}
	}
	if !ok {
		d, ok = p.bySpacing(c.Recent)
	}
	if !ok {
		d = due{next: last.Add(p.DefaultStaleAfter), late: last.Add(p.DefaultStaleAfter), how: "default " + human(p.DefaultStaleAfter)}
	}
	s.ExpectedBy, s.NextExpected, s.StaleAt = d.how, &d.next, &d.late
	if now.After(d.late) {
		add(ProblemStale, "stale: the newest backup %s%s is %s old; by %s one was due at %s",
			c.Newest.ID, checked, human(now.Sub(last)), d.how, d.next.UTC().Format(time.RFC3339))
	}
	rp, src := c.Newest.RevisionTime, "backup"
	if w := c.Window; w != nil && w.Recoverable && w.ThroughTime.After(rp) {
		rp, src = w.ThroughTime, "capture"
	}
	s.RecoveryPoint, s.RecoverySource = &rp, src
}

// unchangedAt is when the agent's snapshot job last found the cluster
// unchanged since its newest backup (zero when it did not).
func unchangedAt(c *Cluster) time.Time {
	if c.Agent == nil {
		return time.Time{}
	}
	j, ok := c.Agent.Jobs["snapshot"]
	if !ok || j.LastUnchanged == nil || j.UnchangedSince != c.Newest.ID {
		return time.Time{}
	}
	return *j.LastUnchanged
}

// assessAgent reports a silent agent and failed job runs.
func (s *Status) assessAgent(p Policy, now time.Time, add func(kind, format string, a ...any)) {
	a := s.Agent
	if a == nil {
		return
	}
	silentAt := a.WrittenAt.Add(max(p.AgentSilentAfter, 5*a.Every.Duration()))
	how := fmt.Sprintf("it writes every %s", human(a.Every.Duration()))
	if a.Mode == repository.AgentOnce {
		// A CronJob run: silent once its next run is late.
		if d, ok := p.bySchedule(a.Schedules.Snapshot, a.WrittenAt); ok {
			silentAt, how = d.late, "a run per "+d.how
		} else {
			silentAt, how = a.WrittenAt.Add(p.DefaultStaleAfter), "no schedule: default "+human(p.DefaultStaleAfter)
		}
	}
	if now.After(silentAt) {
		add(ProblemAgentSilent, "agent silent: the last status document (agent %s) is %s old; %s", a.Agent, human(now.Sub(a.WrittenAt)), how)
	}
	for _, name := range []string{"snapshot", "prune", "drill"} {
		j, ok := a.Jobs[name]
		if ok && j.LastResult == "failure" && j.LastAttempt != nil {
			add(ProblemJobFailed, "the agent's last %s run (%s ago) failed: %s", name, human(now.Sub(*j.LastAttempt)), j.LastError)
		}
	}
}

// assessDrills reports a failed, unreadable or overdue drill. The
// schedule is the agent's (none when its drill schedule is empty), or
// the spacing of recent drills without a status document.
func (s *Status) assessDrills(p Policy, now time.Time, add func(kind, format string, a ...any)) {
	c := s.Cluster
	if d := c.Drill; d != nil {
		switch d.State {
		case repository.DrillFailed:
			add(ProblemDrillFailed, "the last drill (backup %s, %s ago) failed: %s", d.BackupID, human(now.Sub(d.Started)), orDefault(d.Error, "a check did not pass"))
		case repository.DrillUnknown:
			add(ProblemDrillUnknown, "the last drill's report (%s ago) cannot be read: no verdict: %s", human(now.Sub(d.Started)), d.Error)
		}
	}
	var dd due
	var ok bool
	switch {
	case c.Agent != nil && c.Agent.Schedules.Drill == "":
		return // this cluster's agent runs no drills
	case c.Agent != nil:
		from := c.Agent.Started
		if c.Drill != nil {
			from = c.Drill.Started
		}
		dd, ok = p.bySchedule(c.Agent.Schedules.Drill, from)
	default:
		dd, ok = p.bySpacing(c.DrillStarts)
	}
	if !ok {
		return
	}
	s.DrillDue = &dd.next
	if now.After(dd.late) {
		if c.Drill == nil {
			add(ProblemDrillOverdue, "never drilled; by %s a drill was due at %s", dd.how, dd.next.UTC().Format(time.RFC3339))
		} else {
			add(ProblemDrillOverdue, "drill overdue: the last drill is %s old; by %s one was due at %s", human(now.Sub(c.Drill.Started)), dd.how, dd.next.UTC().Format(time.RFC3339))
		}
	}
}

// assessCapture reports a window that lags or is broken, where capture
// runs: the agent says so, or (without a status document) the newest
// window is open and starts at the newest backup.
func (s *Status) assessCapture(p Policy, now time.Time, add func(kind, format string, a ...any)) {
	c := s.Cluster
	w := c.Window
	if w != nil && w.Problem != "" {
		add(ProblemWindowBroken, "change window broken: generation %s (revisions %d-%d): %s", w.Generation, w.From, w.Through, w.Problem)
	}
	on := c.Agent != nil && c.Agent.Capture != nil
	limit := p.CaptureBehind
	switch {
	case on:
		limit = max(limit, 60*c.Agent.Capture.Interval.Duration())
	case c.Agent == nil && w != nil && !w.Sealed && w.AnchorNewest:
		on = true
	}
	if !on {
		return
	}
	if w == nil || !w.Recoverable {
		add(ProblemCaptureBehind, "capture is on but the store holds no recoverable change window")
		return
	}
	if lag := now.Sub(w.ThroughTime); lag > limit {
		add(ProblemCaptureBehind, "capture behind: the change window reaches %s (%s ago, allowed %s)", w.ThroughTime.UTC().Format(time.RFC3339), human(lag), human(limit))
	}
}

// assessCopies reports copies that fail or lag the primary's newest
// backup by more than CopyBehind, as the agent's status document says.
func (s *Status) assessCopies(p Policy, now time.Time, add func(kind, format string, a ...any)) {
	if s.Agent == nil || s.Newest == nil {
		return
	}
	for _, cp := range s.Agent.Copies {
		switch {
		case cp.LastError != "":
			add(ProblemCopyBehind, "copy %s: the last run failed: %s", cp.Name, cp.LastError)
		case cp.RecoveryPoint == nil:
			if now.Sub(s.Newest.CreatedAt) > p.CopyBehind {
				add(ProblemCopyBehind, "copy %s holds no backup", cp.Name)
			}
		case s.Newest.RevisionTime.Sub(*cp.RecoveryPoint) > p.CopyBehind:
			add(ProblemCopyBehind, "copy %s reaches %s, %s behind the primary", cp.Name, cp.RecoveryPoint.UTC().Format(time.RFC3339), human(s.Newest.RevisionTime.Sub(*cp.RecoveryPoint)))
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// human renders a duration shortly: 45s, 25m, 2h5m, 3d4h.
func human(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + human(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d.Hours())/24, int(d.Hours())%24
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}
