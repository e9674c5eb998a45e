package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// The agent's status document says what an agent promises and how its
// jobs went, so that a reader of the store alone (lifeboat fleet) can
// judge the cluster by the agent's own schedules:
//
//	<cluster>/agents/<agent>/<time>.json
//
// <agent> is the agent's identity made safe for a key (AgentKeyName),
// <time> the time it was written (UTC, millisecond, fixed width, so that
// names sort by time). Objects in a store are never replaced, so each
// write is a new immutable document, written conditionally; the writer
// then deletes its own older documents (the newest stays) and those of
// other agents of the cluster older than AgentStatusKeep (agents gone
// for good: a CronJob's every run is an agent of its own). A reader
// lists the prefix, takes each agent's newest name and reads that one
// document only. The documents are not locked by Object Lock (a restore
// never needs them, and the writer must be able to delete them). A Repo
// with a Signer signs them like a manifest; with trusted keys a reader
// takes none that is not signed by one.
//
// The document holds no secret: no endpoint, no store URL, no key; the
// errors it carries have any user:password@ part of a URL removed
// (RedactURLs).

// AgentStatusFormat is the status document format this build writes and reads.
const AgentStatusFormat = 1

// AgentStatusKeep is how long the writer keeps the documents of other
// agents of its cluster that stopped writing.
const AgentStatusKeep = 7 * 24 * time.Hour

// Agent modes (AgentStatus.Mode).
const (
	AgentDaemon = "daemon" // lifeboat agent: writes every Every and at each job end
	AgentOnce   = "once"   // lifeboat agent --once: writes at each job end of its cycle
)

// kindAgentStatus is what a status document's signature says it is.
const kindAgentStatus = "agent status"

// AgentStatus is one agent's status document.
type AgentStatus struct {
	Format  int    `json:"format"`
	Cluster string `json:"cluster"`
	// Agent is the agent's identity (host/pid, or what it was given).
	Agent   string `json:"agent"`
	Version string `json:"version"`
	// Mode is AgentDaemon or AgentOnce.
	Mode string `json:"mode"`
	// WrittenAt is when the document was written; Started when the agent
	// (or the --once cycle) started.
	WrittenAt time.Time `json:"written_at"`
	Started   time.Time `json:"started"`
	// Every is how often a daemon writes (0 for --once): a reader calls
	// the agent silent when its newest document is much older.
	Every Seconds `json:"every_seconds,omitempty"`
	// Leader is true when this agent runs the jobs (it holds the lock, or
	// agents do not lock); false: a standby.
	Leader bool `json:"leader"`
	// Schedules are the cron schedules of the jobs ("" disabled).
	Schedules AgentSchedules `json:"schedules"`
	// StaleAfter is the agent's agent.stale_after (0: none).
	StaleAfter Seconds `json:"stale_after_seconds,omitempty"`
	// Capture is continuous capture's state (nil when it is off).
	Capture *AgentCapture `json:"capture,omitempty"`
	// Copies are the copy stores, by name only.
	Copies []AgentCopy `json:"copies,omitempty"`
	// Jobs are the last run and last success of each scheduled job, by
	// name (snapshot, prune, drill).
	Jobs map[string]AgentJob `json:"jobs,omitempty"`
}

// Seconds is a duration stored as seconds (a float) in JSON.
type Seconds float64

// Duration returns s as a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// SecondsOf returns d as Seconds.
func SecondsOf(d time.Duration) Seconds { return Seconds(d.Seconds()) }

// AgentSchedules are an agent's job schedules.
type AgentSchedules struct {
	Snapshot string `json:"snapshot"`
	Prune    string `json:"prune"`
	Drill    string `json:"drill"`
}

// AgentCapture is continuous capture in a status document.
type AgentCapture struct {
	// Interval is capture.interval: how often segments are written.
	Interval Seconds `json:"interval_seconds"`
	// Active is true while this agent captures.
	Active bool `json:"active"`
	// Revision and RecoveryPoint are the durable captured-through
	// revision and its time, as this agent knows them.
	Revision      int64      `json:"revision,omitempty"`
	RecoveryPoint *time.Time `json:"recovery_point,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
}

// AgentCopy is one copy store in a status document.
type AgentCopy struct {
	Name        string     `json:"name"`
	LastRun     *time.Time `json:"last_run,omitempty"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	// RecoveryPoint is what the copy alone restores to.
	RecoveryPoint *time.Time `json:"recovery_point,omitempty"`
}

// AgentJob is one job's last attempt and last success.
type AgentJob struct {
	LastAttempt *time.Time `json:"last_attempt,omitempty"`
	// LastResult is "success" or "failure" of the last attempt.
	LastResult  string     `json:"last_result,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
	NextRun     *time.Time `json:"next_run,omitempty"`
	// LastUnchanged is when the snapshot job last found the cluster
	// unchanged since backup UnchangedSince (same revision, every
	// member's HashKV equal to the backup's) and stored nothing: the
	// cluster's state was backed up as of then.
	LastUnchanged  *time.Time `json:"last_unchanged,omitempty"`
	UnchangedSince string     `json:"unchanged_since,omitempty"`
}

// ErrBadAgentStatus is wrapped when a status document does not parse or
// is inconsistent.
var ErrBadAgentStatus = errors.New("bad agent status document")

// Validate checks the document's fields.
func (s *AgentStatus) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadAgentStatus, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Format != AgentStatusFormat:
		return bad("format %d, this build reads format %d", s.Format, AgentStatusFormat)
	case s.Agent == "":
		return bad("no agent")
	case s.WrittenAt.IsZero():
		return bad("no time written")
	case s.Mode != AgentDaemon && s.Mode != AgentOnce:
		return bad("mode %q is not %s or %s", s.Mode, AgentDaemon, AgentOnce)
	case s.Every < 0 || s.StaleAfter < 0:
		return bad("negative interval")
	}
	return nil
}

// ParseAgentStatus decodes and validates a status document (a signature
// member is ignored here: the Repo checks it).
func ParseAgentStatus(b []byte) (*AgentStatus, error) {
	var s AgentStatus
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAgentStatus, err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// AgentKeyName is an agent identity as it appears in keys: characters
// other than letters, digits, '.', '_' and '-' become '_', at most 100.
func AgentKeyName(agent string) string {
	s := unsafeKeyChars.ReplaceAllString(agent, "_")
	if len(s) > 100 {
		s = s[:100]
	}
	if s == "" || s == "." || s == ".." {
		s = "_"
	}
	return s
}

var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@`)

// RedactURLs removes the user:password@ part of every URL in s.
func RedactURLs(s string) string { return urlUserinfo.ReplaceAllString(s, "${1}") }

func (b *Repo) agentsDir() string { return path.Join(b.Cluster, "agents") + "/" }

// AgentStatusKey returns the key of agent's status document written at t.
func (b *Repo) AgentStatusKey(agent string, t time.Time) string {
	return b.agentsDir() + AgentKeyName(agent) + "/" + t.UTC().Format(drillTimeFormat) + ".json"
}

// PutAgentStatus stores s as a new document and then deletes the
// documents it supersedes: this agent's older ones, and other agents'
// older than AgentStatusKeep before s.WrittenAt. A document of the same
// agent and millisecond stored already is an error wrapping
// uploader.ErrExists. A failed deletion is returned (joined) after the
// write succeeded: the new document stands either way.
func (b *Repo) PutAgentStatus(ctx context.Context, s *AgentStatus) error {
	s.Format = AgentStatusFormat
	if err := s.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	key := b.AgentStatusKey(s.Agent, s.WrittenAt)
	if data, err = b.sign(kindAgentStatus, key, append(data, '\n')); err != nil {
		return err
	}
	// No Object Lock: nothing restores from it and its writer deletes it.
	if _, err := b.Store.Put(ctx, key, bytes.NewReader(data), uploader.PutOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("write agent status %s: %w", key, err)
	}
	return b.sweepAgentStatus(ctx, key, s.WrittenAt)
}

// sweepAgentStatus deletes what the document at keep supersedes.
func (b *Repo) sweepAgentStatus(ctx context.Context, keep string, now time.Time) error {
	own := path.Dir(keep) + "/"
	var del []string
	err := b.Store.List(ctx, b.agentsDir(), func(o uploader.ObjectInfo) error {
		switch {
		case o.Key == keep:
		case strings.HasPrefix(o.Key, own):
			if o.Key < keep {
				del = append(del, o.Key)
			}
		default:
			if t := reportTime(o.Key); !t.IsZero() && now.Sub(t) > AgentStatusKeep {
				del = append(del, o.Key)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list agent status documents: %w", err)
	}
	var errs []error
	for _, k := range del {
		if err := b.Store.Delete(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("delete superseded agent status %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// AgentStatusEntry is one agent's newest status document as listed.
type AgentStatusEntry struct {
	// Key is the document's key; Written the time its name gives.
	Key     string
	Written time.Time
	// Status is the document, nil exactly when Err is set.
	Status *AgentStatus
	// Err says why it could not be read or parsed, or why it is
	// untrusted (wrapping ErrUntrusted).
	Err error
}

// AgentStatuses returns the newest status document of every agent of
// the cluster, the most recently written first: one listing of the
// agents area, then one read per agent. A document that cannot be read
// is an entry with Err set; only a failed listing or the end of ctx
// fails the call.
func (b *Repo) AgentStatuses(ctx context.Context) ([]AgentStatusEntry, error) {
	out, err := b.agentStatuses(ctx)
	for _, e := range out {
		if errors.Is(e.Err, uploader.ErrNotFound) {
			// Its writer replaced it between the listing and the read:
			// list again (once), which names the newer one.
			return b.agentStatuses(ctx)
		}
	}
	return out, err
}

func (b *Repo) agentStatuses(ctx context.Context) ([]AgentStatusEntry, error) {
	dir := b.agentsDir()
	newest := map[string]uploader.ObjectInfo{}
	err := b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		agent, name, ok := strings.Cut(strings.TrimPrefix(o.Key, dir), "/")
		if !ok || strings.Contains(name, "/") || !strings.HasSuffix(name, ".json") || reportTime(o.Key).IsZero() {
			return nil
		}
		if cur, ok := newest[agent]; !ok || o.Key > cur.Key {
			newest[agent] = o
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list agent status documents: %w", err)
	}
	out := make([]AgentStatusEntry, 0, len(newest))
	for _, o := range newest {
		e := AgentStatusEntry{Key: o.Key, Written: reportTime(o.Key)}
		e.Status, e.Err = readDocument(ctx, b.Store, o.Key, "agent status", func(data []byte) (*AgentStatus, error) {
			if _, err := b.check(kindAgentStatus, o.Key, data); err != nil {
				return nil, err
			}
			return ParseAgentStatus(data)
		})
		if e.Err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("read agent status documents: %w", ctx.Err())
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Written.Equal(out[j].Written) {
			return out[i].Written.After(out[j].Written)
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}
