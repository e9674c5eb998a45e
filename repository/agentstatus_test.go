package repository

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func newDirRepo(t *testing.T) *Repo {
	t.Helper()
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return New(st, "prod")
}

func statusAt(agent string, at time.Time) *AgentStatus {
	return &AgentStatus{Cluster: "prod", Agent: agent, Version: "test", Mode: AgentDaemon, WrittenAt: at, Started: at.Add(-time.Hour),
		Every: 60, Leader: true, Schedules: AgentSchedules{Snapshot: "@every 10m", Drill: "@daily"}}
}

// TestAgentStatusNewestPerAgent: each write is a new document; the
// writer deletes its own older ones and other agents' older than
// AgentStatusKeep; readers get each agent's newest.
func TestAgentStatusNewestPerAgent(t *testing.T) {
	b := newDirRepo(t)
	ctx := t.Context()
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []*AgentStatus{
		statusAt("gone/1", t0.Add(-8*24*time.Hour)),  // older than AgentStatusKeep at the last write
		statusAt("standby/2", t0.Add(-24*time.Hour)), // kept: another agent, within AgentStatusKeep
		statusAt("node-a/7", t0),                     // superseded by the next
		statusAt("node-a/7", t0.Add(time.Minute)),    // the newest
	} {
		if err := b.PutAgentStatus(ctx, s); err != nil {
			t.Fatalf("PutAgentStatus %s at %s: %v", s.Agent, s.WrittenAt, err)
		}
	}
	got, err := b.AgentStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got {
		if e.Err != nil {
			t.Fatalf("%s: %v", e.Key, e.Err)
		}
		keys = append(keys, e.Key)
	}
	want := []string{"prod/agents/node-a_7/20261101T120100.000Z.json", "prod/agents/standby_2/20261031T120000.000Z.json"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("newest documents (-want +got):\n%s", diff)
	}
	if got[0].Status.Agent != "node-a/7" || got[0].Status.Schedules.Snapshot != "@every 10m" || !got[0].Status.WrittenAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("document read back: %+v", got[0].Status)
	}
	var all []string
	b.Store.List(ctx, "prod/agents/", func(o uploader.ObjectInfo) error { all = append(all, o.Key); return nil })
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("stored documents after the sweep (-want +got):\n%s", diff)
	}
	if err := b.PutAgentStatus(ctx, statusAt("node-a/7", t0.Add(time.Minute))); !errors.Is(err, uploader.ErrExists) {
		t.Errorf("second write of the same millisecond: %v, want ErrExists", err)
	}
}

// TestAgentStatusTrust: a signed document is read by a reader trusting
// the key; one signed by another key, or unsigned, is an entry with an
// error wrapping ErrUntrusted, never a status.
func TestAgentStatusTrust(t *testing.T) {
	ours, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := signing.Generate()
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		signer    *signing.Key
		untrusted bool
	}{
		{"signed by a trusted key", ours, false},
		{"signed by another key", theirs, true},
		{"unsigned", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newDirRepo(t)
			w.Signer = tc.signer
			if err := w.PutAgentStatus(t.Context(), statusAt("a", t0)); err != nil {
				t.Fatal(err)
			}
			r := New(w.Store, "prod")
			r.Trust = &signing.Trust{Keys: []signing.PublicKey{ours.Public()}}
			got, err := r.AgentStatuses(t.Context())
			if err != nil || len(got) != 1 {
				t.Fatalf("AgentStatuses: %v, %d entries", err, len(got))
			}
			if gotU := errors.Is(got[0].Err, ErrUntrusted); gotU != tc.untrusted || (got[0].Status != nil) == tc.untrusted {
				t.Errorf("untrusted %v (err %v, status %v), want untrusted %v", gotU, got[0].Err, got[0].Status != nil, tc.untrusted)
			}
		})
	}
}

func TestRedactURLs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"dial https://root:s3cret@10.0.0.1:2379: refused", "dial https://10.0.0.1:2379: refused"},
		{"post http://user@hook.example/x and s3://k:v@bucket/p", "post http://hook.example/x and s3://bucket/p"},
		{"no url here: a@b", "no url here: a@b"},
	} {
		if got := RedactURLs(tc.in); got != tc.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAgentKeyName(t *testing.T) {
	for in, want := range map[string]string{"host/123": "host_123", "..": "_", "": "_", "a.b-c_d": "a.b-c_d", strings.Repeat("x", 150): strings.Repeat("x", 100)} {
		if got := AgentKeyName(in); got != want {
			t.Errorf("AgentKeyName(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseAgentStatus(f *testing.F) {
	f.Add([]byte(`{"format":1,"agent":"a","mode":"daemon","written_at":"2026-11-01T12:00:00Z"}`))
	f.Add([]byte(`{"format":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseAgentStatus(b)
		if err == nil && s.Validate() != nil {
			t.Errorf("parsed a document that does not validate")
		}
		if err != nil && !errors.Is(err, ErrBadAgentStatus) {
			t.Errorf("error %v does not wrap ErrBadAgentStatus", err)
		}
	})
}
