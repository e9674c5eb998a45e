package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestNotifierErrorsHideTheURL (item 14): net/http's errors quote the
// request URL (url.Error), which for a webhook is its token. A broken
// connection, a refused one and a timeout are logged without it.
func TestNotifierErrorsHideTheURL(t *testing.T) {
	lg, logs := testLogger(t)
	m, err := newMetrics(NewRegistry(), nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(reset.Close)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()

	const token = "Xy9-webhook-T0KEN"
	var hooks []snapshot.Secret
	for _, u := range []string{reset.URL, refused, slow.URL} {
		hooks = append(hooks, snapshot.Secret(strings.Replace(u, "http://", "http://u:"+token+"@", 1)+"/services/"+token+"?token="+token))
	}
	n := newNotifier(NotifyConfig{Webhooks: hooks, On: []string{EventSnapshotFailed}, Attempts: 2, Backoff: time.Millisecond, Timeout: 200 * time.Millisecond},
		testCluster, "a", RealClock{}, m, lg)
	done := make(chan struct{})
	go func() { defer close(done); n.run(context.Background()) }()
	n.notify(event{kind: EventSnapshotFailed, err: "etcd unreachable", at: time.Now()})
	n.close()
	<-done
	out := logs.String()
	if got := strings.Count(out, "notification failed"); got != 3 {
		t.Errorf("%d failures logged, want 3:\n%s", got, out)
	}
	if leak := containsAny(out, token, reset.URL, refused, slow.URL, strings.TrimPrefix(reset.URL, "http://")); leak != "" {
		t.Errorf("a webhook URL (%q) appears in the log:\n%s", leak, out)
	}
}
