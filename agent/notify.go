package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// Event kinds a webhook can be sent (NotifyConfig.On).
const (
	EventDrillFailed    = "drill_failed"
	EventSnapshotFailed = "snapshot_failed"
	EventPruneFailed    = "prune_failed"
	EventStale          = "stale"
)

// NotifyConfig says where and when to send webhook notifications.
type NotifyConfig struct {
	// Webhooks receive one JSON POST per event. The URLs are secrets (they
	// often carry a token): they are never logged nor put in errors; logs
	// name a webhook by its position (1-based).
	Webhooks []snapshot.Secret
	// On lists the events to send (Event* constants).
	On []string
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration
	// Attempts is how often a webhook is tried per event (default 4),
	// with Backoff doubling in between (default 1s).
	Attempts int
	Backoff  time.Duration
	// QueueSize bounds the events waiting to be sent (default 64); when it
	// is full, new events are dropped (counted and logged) so that a slow
	// webhook never blocks a job.
	QueueSize int
}

// ValidateWebhook is the one rule for a webhook URL (the configuration
// checks notify.webhooks with it): an http(s) URL with a host. Its error
// never holds the URL, which is a secret.
func ValidateWebhook(w snapshot.Secret) error {
	if u, err := url.Parse(w.Reveal()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("is not an http(s) URL")
	}
	return nil
}

// ValidateEvent reports whether e is an event kind (Event* constants).
func ValidateEvent(e string) error {
	switch e {
	case EventDrillFailed, EventSnapshotFailed, EventStale, EventPruneFailed:
		return nil
	}
	return fmt.Errorf("%q is not %s, %s, %s or %s", e, EventDrillFailed, EventSnapshotFailed, EventPruneFailed, EventStale)
}

// Validate reports the first invalid field of c, naming it. Zero values are
// valid: they mean default. Webhooks are named by position, never by URL.
func (c NotifyConfig) Validate() error {
	for i, w := range c.Webhooks {
		if err := ValidateWebhook(w); err != nil {
			return fmt.Errorf("notify webhooks: entry %d %w", i+1, err)
		}
	}
	for _, e := range c.On {
		if err := ValidateEvent(e); err != nil {
			return fmt.Errorf("notify on: %w", err)
		}
	}
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("notify timeout %s: must not be negative", c.Timeout)
	case c.Attempts < 0:
		return fmt.Errorf("notify attempts %d: must not be negative", c.Attempts)
	case c.Backoff < 0:
		return fmt.Errorf("notify backoff %s: must not be negative", c.Backoff)
	case c.QueueSize < 0:
		return fmt.Errorf("notify queue size %d: must not be negative", c.QueueSize)
	}
	return nil
}

// Notification is the JSON body POSTed to webhooks. It carries the event
// itself, a Slack-compatible "text", and the fields of Alertmanager's
// webhook payload (version 4) so that receivers written for Alertmanager
// (and Alertmanager-to-chat bridges) accept it as one firing alert.
type Notification struct {
	// Event is drill_failed, snapshot_failed, prune_failed or stale.
	Event string `json:"event"`
	// Cluster is the cluster name inside the store.
	Cluster string `json:"cluster"`
	// BackupID is the backup concerned, when there is one.
	BackupID string `json:"backup_id,omitempty"`
	// Error says what went wrong.
	Error string `json:"error,omitempty"`
	// Time is when the event happened (RFC 3339, UTC).
	Time time.Time `json:"time"`
	// Agent identifies the agent that sent it.
	Agent string `json:"agent,omitempty"`
	// Text is a one-line human summary (Slack's incoming webhooks show it).
	Text string `json:"text"`

	// Alertmanager webhook form.
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []Alert           `json:"alerts"`
}

// Alert is one alert in Alertmanager's webhook form.
type Alert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// event is one thing to notify about.
type event struct {
	kind     string
	backupID string
	err      string
	at       time.Time
}

var alertNames = map[string]string{
	EventDrillFailed:    "LifeboatDrillFailed",
	EventSnapshotFailed: "LifeboatSnapshotFailed",
	EventPruneFailed:    "LifeboatPruneFailed",
	EventStale:          "LifeboatBackupStale",
}

// notification builds the payload of ev.
func notification(ev event, cluster, agent string) Notification {
	var text string
	switch ev.kind {
	case EventDrillFailed:
		text = fmt.Sprintf("lifeboat: restore drill of backup %s of cluster %s FAILED: %s", orNone(ev.backupID), cluster, ev.err)
	case EventSnapshotFailed:
		text = fmt.Sprintf("lifeboat: backup of cluster %s FAILED: %s", cluster, ev.err)
	case EventPruneFailed:
		text = fmt.Sprintf("lifeboat: prune of cluster %s FAILED: %s", cluster, ev.err)
	case EventStale:
		text = fmt.Sprintf("lifeboat: backups of cluster %s are stale: %s", cluster, ev.err)
	default:
		text = fmt.Sprintf("lifeboat: %s on cluster %s: %s", ev.kind, cluster, ev.err)
	}
	labels := map[string]string{"alertname": alertNames[ev.kind], "cluster": cluster, "event": ev.kind, "severity": "critical"}
	if ev.kind == EventPruneFailed {
		labels["severity"] = "warning"
	}
	ann := map[string]string{"summary": text, "description": ev.err}
	if ev.backupID != "" {
		ann["backup_id"] = ev.backupID
	}
	at := ev.at.UTC()
	return Notification{
		Event: ev.kind, Cluster: cluster, BackupID: ev.backupID, Error: ev.err, Time: at, Agent: agent, Text: text,
		Version: "4", GroupKey: "{}:{cluster=\"" + cluster + "\", event=\"" + ev.kind + "\"}", Status: "firing", Receiver: "lifeboat",
		GroupLabels: map[string]string{"cluster": cluster, "event": ev.kind}, CommonLabels: labels, CommonAnnotations: ann,
		Alerts: []Alert{{Status: "firing", Labels: labels, Annotations: ann, StartsAt: at, Fingerprint: fmt.Sprintf("%016x", fnv64(cluster+"/"+ev.kind))}},
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// notifier sends events to webhooks from its own goroutine, so that jobs
// never wait for a webhook.
type notifier struct {
	cfg     NotifyConfig
	on      map[string]bool
	q       chan event
	client  *http.Client
	cluster string
	agent   string
	clock   Clock
	m       *metrics
	lg      *slog.Logger

	mu     sync.Mutex
	closed bool
}

func newNotifier(cfg NotifyConfig, cluster, agent string, clock Clock, m *metrics, lg *slog.Logger) *notifier {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 64
	}
	n := &notifier{
		cfg: cfg, on: map[string]bool{}, q: make(chan event, cfg.QueueSize),
		// Its own transport, so that Run can close its idle connections.
		client:  &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: cfg.Timeout},
		cluster: cluster, agent: agent, clock: clock, m: m, lg: lg,
	}
	for _, e := range cfg.On {
		n.on[e] = true
	}
	return n
}

// enabled reports whether events of kind are sent anywhere.
func (n *notifier) enabled(kind string) bool { return len(n.cfg.Webhooks) > 0 && n.on[kind] }

// notify queues ev without blocking; when the queue is full the event is
// dropped, counted and logged.
func (n *notifier) notify(ev event) {
	if !n.enabled(ev.kind) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		n.m.notifies.WithLabelValues("dropped").Inc()
		n.lg.Warn("notification dropped: shutting down", "event", ev.kind, "backup_id", ev.backupID)
		return
	}
	select {
	case n.q <- ev:
	default:
		n.m.notifies.WithLabelValues("dropped").Inc()
		n.lg.Warn("notification dropped: queue full", "event", ev.kind, "backup_id", ev.backupID)
	}
}

// close ends the queue: run returns once it has sent what is queued.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		close(n.q)
	}
}

// run sends queued events until the queue is closed and drained. ctx
// bounds the sending: once it ends, what is left is dropped.
func (n *notifier) run(ctx context.Context) {
	defer n.client.CloseIdleConnections()
	for ev := range n.q {
		if ctx.Err() != nil {
			n.m.notifies.WithLabelValues("dropped").Inc()
			n.lg.Warn("notification dropped: shutting down", "event", ev.kind, "backup_id", ev.backupID)
			continue
		}
		n.deliver(ctx, ev)
	}
}

// deliver posts ev to every webhook, with retries.
func (n *notifier) deliver(ctx context.Context, ev event) {
	body, err := json.Marshal(notification(ev, n.cluster, n.agent))
	if err != nil {
		n.lg.Error("notification not sent", "event", ev.kind, "err", err)
		return
	}
	for i, w := range n.cfg.Webhooks {
		err := n.post(ctx, w, body)
		if err != nil {
			n.m.notifies.WithLabelValues("failed").Inc()
			n.lg.Error("notification failed", "event", ev.kind, "webhook", i+1, "attempts", n.cfg.Attempts, "err", err)
			continue
		}
		n.m.notifies.WithLabelValues("sent").Inc()
		n.lg.Info("notification sent", "event", ev.kind, "webhook", i+1, "backup_id", ev.backupID)
	}
}

// post tries one webhook up to Attempts times. Its errors never contain
// the URL.
func (n *notifier) post(ctx context.Context, w snapshot.Secret, body []byte) error {
	delay := n.cfg.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		err = n.postOnce(ctx, w, body)
		if err == nil || attempt >= n.cfg.Attempts {
			return err
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (then: %v)", err, ctx.Err())
		case <-n.clock.After(delay):
		}
		delay *= 2
	}
}

// permanentError is a webhook answer that retrying does not change (4xx
// other than 408 and 429).
type permanentError struct{ error }

func (n *notifier) postOnce(ctx context.Context, w snapshot.Secret, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Reveal(), bytes.NewReader(body))
	if err != nil {
		return errors.New("bad webhook URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lifeboat")
	resp, err := n.client.Do(req)
	if err != nil {
		return stripURL(err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return permanentError{fmt.Errorf("webhook answered %s", resp.Status)}
	default:
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
}

// stripURL removes the URL (a secret) that net/http puts into its errors.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("%s: timeout: %w", ue.Op, ue.Err)
		}
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
