package prune

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestPruneKits: a recovery kit goes with the last backup that names it
// (manifest first, then object), stays while a kept backup names it,
// stays while younger than the grace period (a backup in flight may name
// it), and a kit object without a manifest is an orphan.
func TestPruneKits(t *testing.T) {
	realNow := time.Now().UTC()
	later := realNow.Add(48 * time.Hour) // every object is older than the grace by then
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	enc := kit.Encryption{Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
	for _, ts := range testStores(t) {
		t.Run(ts.name, func(t *testing.T) {
			st := ts.open(t)
			b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
			kr := kit.Repo{Store: st, Cluster: jobtest.Cluster}
			putKit := func(content string) string {
				t.Helper()
				root := t.TempDir()
				if err := os.MkdirAll(filepath.Join(root, "etc"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, "etc/token"), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				k, err := kit.Collect(root, []string{"/etc/token"})
				if err != nil {
					t.Fatal(err)
				}
				res, err := kr.Put(t.Context(), k, enc, []string{"/etc/token"}, realNow, "test")
				if err != nil {
					t.Fatal(err)
				}
				return res.Manifest.ID
			}
			kitA, kitB, kitC := putKit("a"), putKit("b"), putKit("c")
			backup := func(at time.Time, kitID string) string {
				t.Helper()
				m := jobtest.PutObject(t, b, at, uploader.PutOptions{})
				m.Kit = kitID
				if err := b.PutManifest(t.Context(), m); err != nil {
					t.Fatal(err)
				}
				return m.ID
			}
			old := later.Add(-10 * 24 * time.Hour)
			backup(old, kitA)                  // deleted: A goes with it
			backup(old.Add(time.Hour), kitB)   // deleted, but B stays: the newest names it
			backup(old.Add(2*time.Hour), kitB) // kept by last 1
			orphan := kr.Dir() + strings.Repeat("d", 64) + "-00000000.tar.zst.age"
			if _, err := st.Put(t.Context(), orphan, strings.NewReader("unfinished"), uploader.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			job := Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: 24 * time.Hour, Now: fixedClock(later)}

			dry := job
			dry.DryRun = true
			res, err := Run(t.Context(), dry, nil)
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			got := map[string]Action{}
			for _, pk := range res.Plan.Kits {
				got[pk.Manifest.ID] = pk.Action
			}
			want := map[string]Action{kitA: ActionDelete, kitB: ActionKeep, kitC: ActionDelete}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("kit plan (-got +want):\n%s", diff)
			}
			if !slices.ContainsFunc(res.Plan.Orphans, func(o uploader.ObjectInfo) bool { return o.Key == orphan }) {
				t.Errorf("the kit object without a manifest is not an orphan: %v", res.Plan.Orphans)
			}

			res, err = Run(t.Context(), job, nil)
			if err != nil {
				t.Fatalf("prune: %v", err)
			}
			slices.Sort(res.KitsDeleted)
			wantDeleted := []string{kitA, kitC}
			slices.Sort(wantDeleted)
			if diff := cmp.Diff(res.KitsDeleted, wantDeleted); diff != "" {
				t.Errorf("kits deleted (-got +want):\n%s", diff)
			}
			l, err := kr.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Kits) != 1 || l.Kits[0].ID != kitB || len(l.Orphans) != 0 {
				t.Errorf("after prune: kits %v, orphans %v; want only kit B and no orphan", l.Kits, l.Orphans)
			}
			if _, err := kr.Load(t.Context(), l.Kits[0], []age.Identity{id}); err != nil {
				t.Errorf("the kept kit does not load: %v", err)
			}

			// A new kit that no backup names yet: kept while young.
			kitD := putKit("d")
			young := job
			young.Now = fixedClock(realNow.Add(time.Minute))
			res, err = Run(t.Context(), young, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, pk := range res.Plan.Kits {
				if pk.Manifest.ID == kitD && (pk.Action != ActionKeep || !strings.Contains(pk.Reason, "younger")) {
					t.Errorf("a young kit planned %s (%s)", pk.Action, pk.Reason)
				}
			}
			if slices.Contains(res.KitsDeleted, kitD) {
				t.Error("a young kit was deleted")
			}
		})
	}
}

// TestPruneKitsAfterRecipientChange: the same files encrypted to a new
// recipient set are a kit of their own (issue 28, section 4, defect 1);
// the kit for the old recipients goes with the last backup that names
// it, the new one stays with the backups that name it, and still
// decrypts with the new identity only.
func TestPruneKitsAfterRecipientChange(t *testing.T) {
	realNow := time.Now().UTC()
	later := realNow.Add(48 * time.Hour)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
	kr := kit.Repo{Store: st, Cluster: jobtest.Cluster}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := kit.Collect(root, []string{"/etc/token"})
	if err != nil {
		t.Fatal(err)
	}
	var kits []string
	var ids []*age.X25519Identity
	for range 2 {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		enc := kit.Encryption{Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
		res, err := kr.Put(t.Context(), k, enc, []string{"/etc/token"}, realNow, "test")
		if err != nil {
			t.Fatal(err)
		}
		kits, ids = append(kits, res.Manifest.ID), append(ids, id)
	}
	if kits[0] == kits[1] {
		t.Fatalf("one kit %s for two recipient sets", kits[0])
	}
	old := later.Add(-10 * 24 * time.Hour)
	for i, kitID := range kits {
		m := jobtest.PutObject(t, b, old.Add(time.Duration(i)*time.Hour), uploader.PutOptions{})
		m.Kit = kitID
		if err := b.PutManifest(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: 24 * time.Hour, Now: fixedClock(later)}, nil)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if diff := cmp.Diff(res.KitsDeleted, kits[:1]); diff != "" {
		t.Errorf("kits deleted (-got +want):\n%s", diff)
	}
	l, err := kr.List(t.Context())
	if err != nil || len(l.Kits) != 1 || l.Kits[0].ID != kits[1] {
		t.Fatalf("after prune: %v, %v; want only the new recipients' kit", l, err)
	}
	if _, err := kr.Load(t.Context(), l.Kits[0], []age.Identity{ids[0]}); !errors.Is(err, kit.ErrDecrypt) {
		t.Errorf("the kept kit with the old identity: %v, want ErrDecrypt", err)
	}
	if _, err := kr.Load(t.Context(), l.Kits[0], []age.Identity{ids[1]}); err != nil {
		t.Errorf("the kept kit with the new identity: %v", err)
	}
}
