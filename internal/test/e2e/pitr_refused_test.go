package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestPointInTimeRefused runs `lifeboat restore` (the built binary) to
// targets it must refuse, against a store holding one capture window: a
// revision before the first snapshot, one after the captured-through
// point, a time before the window and a time in an unknown format. Each
// exits with the code of its kind (1: outside the windows, 2: usage),
// says why (the windows named when the target is outside them) and
// writes nothing: the data dir's parent and the spool dir stay empty.
func TestPointInTimeRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd and the lifeboat binary")
	}
	lb := newLifeboat(t)
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.Options{})
	cli := src.Client(t)
	for i := range 5 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/before/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	capt := lb.capture(t, src.Endpoints())
	capt.waitCaptured(t, currentRevision(t, cli))
	for i := range 5 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/after/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	capt.waitCaptured(t, currentRevision(t, cli))
	capt.stop(t)
	ws := lb.windows(t)
	if len(ws) != 1 || ws[0].FromRevision <= 1 {
		t.Fatalf("windows %+v, want one starting after revision 1", ws)
	}
	w := ws[0]
	names := []string{fmt.Sprintf("revisions %d-%d", w.FromRevision, w.Through), w.Generation}

	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		say   []string
	}{
		{"revision before the first snapshot", []string{"--to-revision", fmt.Sprint(w.FromRevision - 1)}, 1, append([]string{"before the first snapshot"}, names...)},
		{"revision after captured-through", []string{"--to-revision", fmt.Sprint(w.Through + 1)}, 1, append([]string{"after the captured-through point"}, names...)},
		{"time before the first snapshot", []string{"--to-time", w.FromTime.Add(-time.Hour).Format(time.RFC3339)}, 1, append([]string{"before the first snapshot"}, names...)},
		{"time in an unknown format", []string{"--to-time", "14:05"}, 2, []string{`--to-time "14:05"`, "RFC 3339"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			args := restoreArgs(t, filepath.Join(root, "restored"), append(tc.flags, "--bump-revision", fmt.Sprint(bump), "--mark-compacted")...)
			code, out, errOut := lb.runCode(t, args...)
			if code != tc.code {
				t.Fatalf("lifeboat %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, tc.code, out, errOut)
			}
			for _, s := range tc.say {
				if !strings.Contains(errOut, s) {
					t.Errorf("the error lacks %q:\n%s", s, errOut)
				}
			}
			if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
				t.Errorf("a refused restore wrote %v (%v)", entries, err)
			}
			if spool, _ := os.ReadDir(lb.spool); len(spool) != 0 {
				t.Errorf("a refused restore left %v in the spool dir", spool)
			}
		})
	}
}
