package kubetest_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/kubetest"
)

// TestClientRetriesTooManyRequests: a 429 with Retry-After (what
// kube-apiserver answers while a resource's watch cache initializes) is
// sent again; a 429 without it, and other errors, are returned at once as
// a StatusError.
func TestClientRetriesTooManyRequests(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/api/v1/namespaces/busy" && n < 3:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"kind":"Status","message":"storage is (re)initializing"}`))
		case r.URL.Path == "/api/v1/namespaces/throttled":
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			_, _ = w.Write([]byte(`{"metadata":{"name":"busy"}}`))
		}
	}))
	defer srv.Close()
	c := &kubetest.Client{URL: srv.URL, Token: "tok", HTTP: srv.Client()}
	got, err := c.Get(t.Context(), kubetest.Namespaces, "", "busy")
	if err != nil || kubetest.Name(got) != "busy" || calls.Load() != 3 {
		t.Fatalf("get after two 429s: %v %v, %d calls, want the object after 3", got, err, calls.Load())
	}
	calls.Store(0)
	_, err = c.Get(t.Context(), kubetest.Namespaces, "", "throttled")
	var se *kubetest.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusTooManyRequests || calls.Load() != 1 {
		t.Fatalf("429 without Retry-After: %v after %d calls, want a StatusError after 1", err, calls.Load())
	}
}
