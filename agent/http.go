package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Handler serves /metrics, /healthz, /readyz and /status.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		ErrorLog:          promLogger{a.lg},
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", a.serveReady)
	mux.HandleFunc("GET /status", a.serveStatus)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>lifeboat</title></head><body><h1>lifeboat agent</h1><ul>`+
			`<li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li>`+
			`<li><a href="readyz">/readyz</a></li><li><a href="status">/status</a></li></ul></body></html>`)
	})
	return mux
}

// readyKey is a key that never exists: a Stat of it that answers "not
// found" proves the store is reachable and the credentials work.
const readyKey = ".lifeboat-readyz"

// serveReady answers 200 when the agent has started (configuration
// loaded, metrics registered) and the store answers a cheap request.
func (a *Agent) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !a.ready.Load() {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	_, err := a.cfg.Backups.Store.Stat(ctx, a.cfg.Cluster+"/"+readyKey)
	if err != nil && !errors.Is(err, uploader.ErrNotFound) {
		a.m.storeUp.Set(0)
		http.Error(w, "store not reachable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.m.storeUp.Set(1)
	fmt.Fprintln(w, "ok")
}

// Status is the JSON document /status serves.
type Status struct {
	Cluster string    `json:"cluster"`
	Version string    `json:"version"`
	Agent   string    `json:"agent"`
	Started time.Time `json:"started"`
	Now     time.Time `json:"now"`
	Store   string    `json:"store"`
	// StoreError is the last listing's error, when it failed.
	StoreError string                `json:"store_error,omitempty"`
	Leader     LeaderStatus          `json:"leader"`
	Jobs       map[string]*JobStatus `json:"jobs"`
	// Backups counts backups by state (ok, locked, broken) as last listed.
	Backups map[string]int `json:"backups"`
	// ListedAt is when the store was last listed.
	ListedAt           *time.Time     `json:"listed_at,omitempty"`
	NewestBackup       *BackupSummary `json:"newest_backup"`
	NewestProvenBackup *BackupSummary `json:"newest_proven_backup"`
	// DrillUnknown lists the backups whose last drill's verdict cannot be
	// read (its report is unreadable): not proven, whatever older reports
	// say.
	DrillUnknown []DrillProblem `json:"drill_unknown,omitempty"`
	// Untrusted counts the objects not signed by a trusted key by kind
	// (backup, drill_report, progress_marker), as last listed: anything
	// above 0 means someone without this cluster's signing key wrote to
	// the store (lifeboat_untrusted_objects).
	Untrusted map[string]int `json:"untrusted,omitempty"`
	// Lineages are the etcd cluster lineages of the store's trusted
	// backups, as last listed, the newest backup's first
	// (lifeboat_lineages).
	Lineages []LineageStatus `json:"lineages,omitempty"`
	Stale    bool            `json:"stale"`
	// Capture is the capture job's state (absent when capture is off).
	Capture *CaptureStatus `json:"capture,omitempty"`
	// Copies are the copy stores' states (absent without copies).
	Copies []CopyStatus `json:"copies,omitempty"`
}

// DrillProblem is a backup whose last drill report cannot be read.
type DrillProblem struct {
	BackupID string `json:"backup_id"`
	Error    string `json:"error"`
}

// LineageStatus is one lineage of the store in /status.
type LineageStatus struct {
	// ID is the founding etcd cluster's ID.
	ID string `json:"id"`
	// EtcdClusterIDs are the etcd clusters whose backups it holds.
	EtcdClusterIDs []string `json:"etcd_cluster_ids"`
	// Backups counts its trusted backups; NewestBackup is the newest.
	Backups      int    `json:"backups"`
	NewestBackup string `json:"newest_backup"`
	// Supersedes are the lineages it took the name over from on purpose
	// (lineage.adopt_cluster).
	Supersedes []string `json:"supersedes,omitempty"`
}

// LeaderStatus says who runs the jobs.
type LeaderStatus struct {
	// Lock is the lock's key in etcd ("" when agents do not lock).
	Lock string `json:"lock,omitempty"`
	// IsLeader is true when this agent runs the jobs.
	IsLeader bool `json:"is_leader"`
	// Holder is the identity of the agent holding the lock.
	Holder string `json:"holder,omitempty"`
	// Error is set when etcd could not be asked.
	Error string `json:"error,omitempty"`
}

// JobStatus is one job's state.
type JobStatus struct {
	Schedule    string     `json:"schedule"`
	Running     bool       `json:"running"`
	NextRun     *time.Time `json:"next_run"`
	LastRun     *RunRecord `json:"last_run"`
	LastSuccess *time.Time `json:"last_success"`
}

// BackupSummary describes one backup in /status.
type BackupSummary struct {
	ID          string    `json:"id"`
	CreatedAt   time.Time `json:"created_at"`
	Revision    int64     `json:"revision"`
	DBSize      int64     `json:"db_size"`
	ObjectSize  int64     `json:"object_size"`
	AgeSeconds  float64   `json:"age_seconds"`
	Compression string    `json:"compression"`
	Encryption  string    `json:"encryption"`
}

// Status returns the agent's state as /status shows it.
func (a *Agent) Status(ctx context.Context) Status {
	now := a.clock.Now()
	st := Status{
		Cluster: a.cfg.Cluster, Version: a.cfg.Version, Agent: a.cfg.Identity, Started: a.start, Now: now,
		Store: a.cfg.Backups.Store.String(), Jobs: map[string]*JobStatus{},
	}
	for _, j := range a.jobs {
		j.mu.Lock()
		js := &JobStatus{Schedule: j.spec, Running: j.running.Load(), LastRun: j.last}
		if !j.next.IsZero() {
			t := j.next
			js.NextRun = &t
		}
		if !j.success.IsZero() {
			t := j.success
			js.LastSuccess = &t
		}
		j.mu.Unlock()
		st.Jobs[j.name] = js
	}
	a.mu.Lock()
	bs := a.state
	st.Stale = a.stale
	a.mu.Unlock()
	if bs.listed {
		t := bs.at
		st.ListedAt = &t
		st.Backups = map[string]int{stateOK: bs.ok, stateLocked: bs.locked, stateBroken: bs.broken}
	}
	st.StoreError = bs.err
	st.NewestBackup = summary(bs.newest, now)
	st.NewestProvenBackup = summary(bs.newestProven, now)
	st.DrillUnknown = bs.drillUnknown
	st.Untrusted = bs.untrusted
	for _, g := range bs.lineages {
		st.Lineages = append(st.Lineages, LineageStatus{
			ID: g.ID, EtcdClusterIDs: g.ClusterIDs, Backups: len(g.Backups), NewestBackup: g.Newest().ID, Supersedes: g.Supersedes,
		})
	}
	st.Capture = a.captureStatus(now)
	st.Copies = a.copyStatus()

	st.Leader.IsLeader = a.leaderCtx(ctx, 0) != nil
	if a.lock != nil {
		st.Leader.Lock = a.lock.key
		if st.Leader.IsLeader {
			st.Leader.Holder = a.lock.cfg.Identity
		} else {
			hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			h, err := a.lock.holder(hctx)
			cancel()
			st.Leader.Holder = h
			if err != nil {
				st.Leader.Error = err.Error()
			}
		}
	} else {
		st.Leader.Holder = a.cfg.Identity
	}
	return st
}

func summary(m *repository.Manifest, now time.Time) *BackupSummary {
	if m == nil {
		return nil
	}
	return &BackupSummary{
		ID: m.ID, CreatedAt: m.CreatedAt, Revision: m.Revision, DBSize: m.DBSize, ObjectSize: m.ObjectSize,
		AgeSeconds: now.Sub(m.CreatedAt).Seconds(), Compression: m.Compression, Encryption: m.Encryption,
	}
}

func (a *Agent) serveStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(a.Status(r.Context()))
}

// promLogger passes promhttp's errors to slog.
type promLogger struct{ lg *slog.Logger }

func (p promLogger) Println(v ...any) {
	p.lg.Error("serving metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}

// slogErrorLog sends net/http's server errors to slog.
func slogErrorLog(lg *slog.Logger) *log.Logger {
	return slog.NewLogLogger(lg.Handler(), slog.LevelWarn)
}
