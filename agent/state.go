package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
)

// backupState is what the last listing of the store showed.
type backupState struct {
	listed       bool
	at           time.Time
	err          string
	ok, broken   int
	locked       int
	newest       *repository.Manifest
	newestProven *repository.Manifest
	// drillUnknown are the listed backups whose last drill's verdict
	// cannot be read.
	drillUnknown []DrillProblem
	// untrusted counts the objects not signed by a trusted key, by kind
	// (untrustedKinds); a kind that was not read is absent.
	untrusted map[string]int
	// lineages are the store's lineages (trusted backups only).
	lineages []*repository.Lineage
}

// refreshLoop refreshes the backup gauges every RefreshInterval.
func (a *Agent) refreshLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.RefreshInterval):
			a.refresh(ctx)
		}
	}
}

// refresh lists the store and updates the backup gauges, the last-success
// times it can learn from the store, and the stale state.
func (a *Agent) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	now := a.clock.Now()
	l, err := a.cfg.Backups.List(ctx)
	if err != nil {
		a.listFailed(ctx, err)
		return
	}
	a.m.storeUp.Set(1)
	markers, werr := a.refreshWindows(ctx, l)
	drills, derr := a.drillRecords(ctx)
	if derr != nil && ctx.Err() != nil {
		return // cut short: an unread drill history is not "nothing proven"
	}
	if derr != nil {
		a.lg.Warn("cannot read the drill history; proven backups unknown", "err", derr)
	}
	st := listedState(l, drills, now)
	if derr == nil {
		st.untrusted[untrustedDrill] = untrustedDrills(drills)
	}
	if werr == nil && a.cfg.Capture != nil {
		st.untrusted[untrustedProgress] = markers
	}
	a.setBackupGauges(st)
	newestDrill := a.learnSuccesses(st, drills)
	a.setState(st, newestDrill)
	a.checkStale(now, st)
	a.learnScrubs(ctx)
}

// listFailed records that the store could not be listed: the store is
// down, and status says why. A listing cut short (shutdown) learnt
// nothing and changes nothing.
func (a *Agent) listFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	a.m.storeUp.Set(0)
	a.mu.Lock()
	a.state.err = err.Error()
	a.mu.Unlock()
	a.lg.Warn("cannot list backups", "err", err)
}

// listedState counts the listed backups by state and finds the newest, the
// newest proven and those whose last drill's verdict cannot be read.
func listedState(l *repository.Listing, drills map[string]drill.Record, now time.Time) backupState {
	st := backupState{listed: true, at: now, broken: len(l.Unreadable),
		untrusted: map[string]int{untrustedBackup: l.Untrusted()}, lineages: l.Lineages()}
	for _, e := range l.Backups {
		if e.State == repository.StateUntrusted {
			continue // not broken: planted or altered (lifeboat_untrusted_objects)
		}
		if e.State != repository.StateOK {
			st.broken++
			continue
		}
		if prune.Locked(e.Manifest, now) {
			st.locked++
		} else {
			st.ok++
		}
		if st.newest == nil {
			st.newest = e.Manifest
		}
		r := drills[e.Manifest.ID]
		if st.newestProven == nil && r.Passed && !r.Unknown {
			st.newestProven = e.Manifest
		}
		if r.Unknown {
			st.drillUnknown = append(st.drillUnknown, DrillProblem{BackupID: e.Manifest.ID, Error: r.Err})
		}
	}
	return st
}

// untrustedDrills counts the backups whose newest drill report is not
// signed by a trusted key.
func untrustedDrills(drills map[string]drill.Record) int {
	n := 0
	for _, r := range drills {
		if r.Untrusted {
			n++
		}
	}
	return n
}

// setBackupGauges exports the counts and the newest backups of st, the
// untrusted objects of each kind that was read and the lineages.
func (a *Agent) setBackupGauges(st backupState) {
	for k, n := range st.untrusted {
		a.m.untrusted.WithLabelValues(k).Set(float64(n))
	}
	a.m.lineages.Set(float64(len(st.lineages)))
	a.m.backups.WithLabelValues(stateOK).Set(float64(st.ok))
	a.m.backups.WithLabelValues(stateLocked).Set(float64(st.locked))
	a.m.backups.WithLabelValues(stateBroken).Set(float64(st.broken))
	a.m.newest.Set(unixOrZero(st.newest))
	a.m.newestProven.Set(a.provenAt(st))
}

// provenAt is when the cluster's state was last proven restorable: the
// newest proven backup's creation, or the last check that found the
// cluster unchanged since that backup when it is the newest (the state
// then was the one the drill restored).
func (a *Agent) provenAt(st backupState) float64 {
	at := unixOrZero(st.newestProven)
	u := a.unchangedSince.Load()
	if u == nil || st.newestProven == nil || st.newest == nil || st.newest.ID != st.newestProven.ID || u.id != st.newestProven.ID {
		return at
	}
	return max(at, unixSeconds(u.at))
}

// learnSuccesses takes what the store proves about the last successes
// (another agent's, or before a restart), never moving a gauge backwards,
// and returns the newest drill record.
func (a *Agent) learnSuccesses(st backupState, drills map[string]drill.Record) drill.Record {
	if j := a.byName[JobSnapshot]; j != nil && st.newest != nil {
		a.learnSuccess(j, st.newest.CreatedAt.Add(time.Duration(st.newest.DurationSeconds*float64(time.Second))))
	}
	var newestDrill drill.Record
	var newestPass time.Time
	for _, r := range drills {
		if r.At.After(newestDrill.At) {
			newestDrill = r
		}
		if r.Passed && r.At.After(newestPass) {
			newestPass = r.At
		}
	}
	if j := a.byName[JobDrill]; j != nil && !newestPass.IsZero() {
		a.learnSuccess(j, newestPass)
	}
	return newestDrill
}

// setState keeps st for status and exports the newest drill when it is
// newer than the last one known.
func (a *Agent) setState(st backupState, newestDrill drill.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state = st
	if newestDrill.At.After(a.lastDrill) {
		a.lastDrill = newestDrill.At
		a.m.drillTime.Set(unixSeconds(newestDrill.At))
		if newestDrill.Unknown {
			// No verdict is known: never an older one instead.
			a.m.drillResult.Unset()
		} else {
			a.m.drillResult.Set(b2f(newestDrill.Passed))
		}
	}
}

func (a *Agent) learnSuccess(j *job, t time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if t.After(j.success) {
		j.success = t
		a.m.lastSuccess.WithLabelValues(j.name).Set(unixSeconds(t))
	}
}

// checkStale sends the stale event when the newest backup is older than
// StaleAfter (or there is none and the agent has been up that long): once,
// until a fresh backup appears. Only the leader sends it.
func (a *Agent) checkStale(now time.Time, st backupState) {
	if a.cfg.StaleAfter <= 0 || a.leaderCtx(context.Background(), 0) == nil {
		return
	}
	var stale bool
	var msg, id string
	if st.newest == nil {
		stale = now.Sub(a.start) >= a.cfg.StaleAfter
		msg = fmt.Sprintf("no backup in the store after %s", a.cfg.StaleAfter)
	} else {
		age := now.Sub(a.backedUpAt(st.newest))
		stale = age > a.cfg.StaleAfter
		id = st.newest.ID
		msg = fmt.Sprintf("the newest backup %s is %s old (stale after %s)", id, now.Sub(st.newest.CreatedAt).Truncate(time.Second), a.cfg.StaleAfter)
		if age < now.Sub(st.newest.CreatedAt) {
			msg += fmt.Sprintf(", last found unchanged %s ago", age.Truncate(time.Second))
		}
	}
	a.mu.Lock()
	send := stale && !a.stale
	a.stale = stale
	a.mu.Unlock()
	if send {
		a.lg.Warn("backups are stale", "backup_id", id, "err", msg)
		a.notif.notify(event{kind: EventStale, backupID: id, err: msg, at: now})
	}
}

// backedUpAt is when the cluster's state was last known to be in backup
// newest: its creation, or the last check that found the cluster
// unchanged since it.
func (a *Agent) backedUpAt(newest *repository.Manifest) time.Time {
	if u := a.unchangedSince.Load(); u != nil && u.id == newest.ID && u.at.After(newest.CreatedAt) {
		return u.at
	}
	return newest.CreatedAt
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func unixOrZero(m *repository.Manifest) float64 {
	if m == nil {
		return 0
	}
	return unixSeconds(m.CreatedAt)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
