package agent

import (
	"context"
	"errors"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// The status document (repository.AgentStatus) is what this agent
// promises, written into its cluster's place in the store for readers
// of the store alone (lifeboat fleet): a daemon writes one when it
// starts, every StatusEvery and at every job end; agent --once at every
// job end and at the end of its cycle. A failure to write is logged and
// changes nothing else: the jobs never wait on it.

// statusTimeout bounds one write of the status document.
const statusTimeout = 30 * time.Second

// statusLoop writes the status document now, then every StatusEvery and
// whenever a job ended, until ctx ends.
func (a *Agent) statusLoop(ctx context.Context) {
	a.writeStatus(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.statusKick:
		case <-a.clock.After(a.cfg.StatusEvery):
		}
		a.writeStatus(ctx)
	}
}

// The index (repository.Index) is the cluster's backups and drill
// reports as this agent lists them after a job, for the fleet's cold
// reads: written after every job's end, before the status document
// that says the job ended (the fleet's change signal), so a reader that
// sees the signal finds the index of that job. A failure to write is
// logged and changes nothing else: readers then list in full.

// jobEnded has the index and the status document written: at once
// under agent --once, by the status loop under the daemon.
func (a *Agent) jobEnded(ctx context.Context) {
	a.indexDue.Store(true)
	if a.once {
		a.writeStatus(ctx)
		return
	}
	select {
	case a.statusKick <- struct{}{}:
	default: // a write is pending already
	}
}

// writeStatus stores the status document; a failure is logged.
func (a *Agent) writeStatus(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if a.indexDue.Swap(false) {
		a.writeIndex(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	s := a.statusDocument(ctx)
	var err error
	for range 5 {
		// Two writes in one millisecond: the next millisecond.
		if err = a.cfg.Backups.PutAgentStatus(ctx, s); !errors.Is(err, uploader.ErrExists) {
			break
		}
		s.WrittenAt = s.WrittenAt.Add(time.Millisecond)
	}
	if err != nil && ctx.Err() == nil {
		a.lg.Warn("cannot write the agent status document; the fleet may call this agent silent", "err", err)
	}
}

// indexTimeout bounds one write of the index.
const indexTimeout = 2 * time.Minute

// writeIndex stores the cluster's index; a failure is logged.
func (a *Agent) writeIndex(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, indexTimeout)
	defer cancel()
	if a.indexer == nil {
		a.indexer = &repository.Indexer{Repo: a.cfg.Backups, Writer: a.cfg.Identity}
	}
	key, err := a.indexer.Write(ctx, a.clock.Now())
	switch {
	case err == nil || ctx.Err() != nil:
	case key != "":
		a.lg.Warn("cannot delete the cluster's superseded backup indexes (a bucket default retention?); they stay until a later write can", "index", key, "err", err)
	default:
		a.lg.Warn("cannot write the cluster's backup index; the fleet lists this cluster in full until the next one", "err", err)
	}
}

// statusDocument is the agent's status document as of now. It names no
// endpoint, store or key, and errors lose any credentials in URLs.
func (a *Agent) statusDocument(ctx context.Context) *repository.AgentStatus {
	now := a.clock.Now().UTC()
	s := &repository.AgentStatus{
		Format: repository.AgentStatusFormat, Cluster: a.cfg.Cluster, Agent: a.cfg.Identity, Version: a.cfg.Version,
		Mode: repository.AgentDaemon, WrittenAt: now, Started: a.start.UTC(),
		Every: repository.SecondsOf(a.cfg.StatusEvery), Leader: a.leaderCtx(ctx, 0) != nil,
		Schedules:  repository.AgentSchedules{Snapshot: a.cfg.Schedules.Snapshot, Prune: a.cfg.Schedules.Prune, Drill: a.cfg.Schedules.Drill},
		StaleAfter: repository.SecondsOf(a.cfg.StaleAfter),
		Jobs:       map[string]repository.AgentJob{},
	}
	if s.Agent == "" {
		s.Agent = "unnamed"
	}
	if a.once {
		s.Mode, s.Every = repository.AgentOnce, 0
	}
	for _, j := range a.jobs {
		j.mu.Lock()
		var js repository.AgentJob
		if r := j.last; r != nil {
			js.LastAttempt, js.LastResult, js.LastError = timePtr(r.Start), r.Result, repository.RedactURLs(r.Error)
		}
		js.LastSuccess, js.NextRun = timePtr(j.success), timePtr(j.next)
		if u := a.unchangedSince.Load(); j.name == JobSnapshot && u != nil && j.last != nil && j.last.Result == ResultSuccess && j.last.BackupID == u.id {
			js.LastUnchanged, js.UnchangedSince = timePtr(j.last.End), u.id
		}
		j.mu.Unlock()
		s.Jobs[j.name] = js
	}
	if c := a.captureStatus(now); c != nil {
		s.Capture = &repository.AgentCapture{
			Interval: repository.SecondsOf(a.cfg.CaptureInterval), Active: c.Active,
			Revision: c.Revision, RecoveryPoint: c.RecoveryPoint, LastError: repository.RedactURLs(c.LastError),
		}
	}
	for _, c := range a.copyStatus() {
		s.Copies = append(s.Copies, repository.AgentCopy{
			Name: c.Name, LastRun: c.LastRun, LastSuccess: c.LastSuccess,
			LastError: repository.RedactURLs(c.LastError), RecoveryPoint: c.RecoveryPoint,
		})
	}
	return s
}

// timePtr is t in UTC, nil when zero.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
