package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// A refresh that lists only what can have changed. The invariant: a row
// is served without listing its cluster in full only when
//
//   - it was read clean (no read error, no unknown) at the last read,
//   - the cluster has agents writing status documents, and its agents/
//     area lists as then, or its agents' documents say the same work
//     (agentWork: each agent's jobs' last attempt, result, success and
//     its capture state are those of the last read),
//   - and this process has not written to it since (Touch).
//
// An agent writes its status document at every job end, after what the
// job stored (manifests, kits, drill reports, damage records, deletions
// by prune), so every change by an agent's hand moves the signal by the
// refresh after the job's end. Capture moves it with its revision and
// recovery point. What an agent does not write — a copy into another
// store (that store's clusters have no status document there and are
// listed in full), `lifeboat snapshot` without an agent, a manual
// delete, bit rot — is seen by the next full Read, which the hub runs
// every fleet.full_every. A row kept keeps its problems; what depends
// on the clock alone (stale by schedule, agent silent, drill overdue,
// certificate expiring) is judged again by Assess at every refresh.

// signals bounds the agents/ listings of a refresh at once.
const signals = 16

// Refresh reads every source again, listing in full only what can
// have changed (above); a source without a full Read by this Reader
// yet, or that cannot name its top-level directories, is read in full.
// Rows are those of Read: sorted by store, then cluster; only the end
// of ctx fails the call.
func (r *Reader) Refresh(ctx context.Context, sources []Source, lg *slog.Logger) ([]Cluster, error) {
	return r.read(ctx, sources, lg, r.refreshSource)
}

// refreshSource is one store's refresh: its top-level names, then each
// by refreshCluster, signals at a time.
func (r *Reader) refreshSource(ctx context.Context, src Source, lg *slog.Logger) ([]Cluster, error) {
	tl, ok := src.Store.(topLister)
	others, listed := r.othersOf(src.Name)
	if !ok || !listed {
		return r.readSource(ctx, src, lg)
	}
	touched := r.takeTouched(src.Name)
	docs := r.docCache(src.Name)
	return r.readTops(ctx, src, lg, tl, signals, func(top string) *Cluster {
		return r.refreshCluster(ctx, src, tl, docs, top, touched[top], others[top])
	})
}

// refreshCluster is the row of the top-level name top: the last one
// when its signal says nothing changed, else top listed and read in
// full (nil when it holds no cluster). A name that held no cluster at
// the last read (other) is listed in full only once a cluster area is
// under it: a cluster's first backup may have been under way then, and
// other objects under a name the store shares cost one request a
// refresh, whatever they hold.
func (r *Reader) refreshCluster(ctx context.Context, src Source, tl topLister, docs *docCache, top string, touched, other bool) *Cluster {
	if other {
		if dirs, err := tl.Dirs(ctx, top+"/"); err == nil && !slices.ContainsFunc(dirs, isClusterArea) {
			return nil
		}
		return r.relist(ctx, src, docs, top, nil) // an error: it says what cannot be read
	}
	k := [2]string{src.Name, top}
	cr, ok := r.cached(k)
	if !ok || touched || cr.row.Agents == 0 {
		return r.relist(ctx, src, docs, top, nil)
	}
	agents, err := listPrefix(ctx, src.Store, docs, agentsPrefix(top))
	if err != nil {
		return r.relist(ctx, src, docs, top, nil) // it says what cannot be read
	}
	fp := agents.fingerprint(agentsPrefix(top))
	if fp == cr.agentsFP {
		return &cr.row
	}
	row := cr.row
	row.resetAgents()
	if err := row.readAgents(ctx, r.newRepo(agents, src, top)); err != nil || !row.clean() || row.work != cr.row.work {
		return r.relist(ctx, src, docs, top, nil)
	}
	docs.pruneUnder(agents, agentsPrefix(top))
	// The cluster's own fingerprint is that of the last full listing:
	// the next one sees its agents/ area moved and reads it again.
	r.keepRow(k, cachedRow{fp: cr.fp, agentsFP: fp, row: row})
	return &row
}

// relist lists top in full and reads it as Read would; nil when it
// holds no cluster. With idx (the store's first read) a cluster with
// an index is listed through it instead (listIndexed).
func (r *Reader) relist(ctx context.Context, src Source, docs *docCache, top string, idx topLister) *Cluster {
	var ls *listedStore
	var indexed time.Time
	if idx != nil {
		ls, indexed = r.listIndexed(ctx, src, docs, idx, top)
	}
	if ls == nil {
		var err error
		if ls, err = listPrefix(ctx, src.Store, docs, top+"/"); err != nil {
			r.dropRow([2]string{src.Name, top})
			return &Cluster{Store: src.Name, Name: top, ReadError: err.Error()}
		}
	}
	if len(ls.clusters()) == 0 {
		return nil
	}
	row := r.readListed(ctx, ls, src, top, indexed)
	if ctx.Err() == nil {
		docs.pruneUnder(ls, top+"/")
	}
	docs.release(top)
	return &row
}

// othersOf returns the source's names that held no cluster at its last
// read, and whether its names were listed then (false: never read in
// full, or its last listing failed).
func (r *Reader) othersOf(source string) (map[string]bool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.others[source]
	return o, ok
}

// resetAgents clears what readAgents fills.
func (c *Cluster) resetAgents() {
	c.Agent, c.Agents, c.Leaders, c.AgentErrors, c.AgentUntrusted, c.work = nil, 0, 0, nil, 0, [32]byte{}
}

// agentWork is the fingerprint of what the agents' newest documents say
// they did: per agent, each job's last attempt, result, success and
// unchanged check, and capture's state. Equal fingerprints: no agent
// finished a job or captured since (see the invariant above). A
// document that cannot be read counts by its key.
func agentWork(es []repository.AgentStatusEntry) [32]byte {
	type work struct {
		Agent   string                         `json:"a"`
		Err     string                         `json:"e,omitempty"`
		Jobs    map[string]repository.AgentJob `json:"j,omitempty"`
		Capture *repository.AgentCapture       `json:"c,omitempty"`
	}
	ws := make([]work, 0, len(es))
	for _, e := range es {
		w := work{Agent: agentOfKey(e.Key)}
		if e.Err != nil {
			w.Err = e.Key
		} else {
			w.Jobs, w.Capture = jobsWork(e.Status.Jobs), e.Status.Capture
		}
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Agent < ws[j].Agent })
	b, _ := json.Marshal(ws) // plain data: cannot fail
	return sha256.Sum256(b)
}

// jobsWork is each job without its next run (a plan, not a change).
func jobsWork(jobs map[string]repository.AgentJob) map[string]repository.AgentJob {
	out := make(map[string]repository.AgentJob, len(jobs))
	for name, j := range jobs {
		j.NextRun = nil
		out[name] = j
	}
	return out
}

// agentOfKey is the agent's part of a status document's key
// (<cluster>/agents/<agent>/<time>.json).
func agentOfKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

// DefaultFullEvery is how often the hub lists every store in full when
// fleet.full_every is not set.
const DefaultFullEvery = 15 * time.Minute
