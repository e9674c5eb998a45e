package backup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRunStoresKit: a backup with a kit source stores the kit once (a
// second backup of the same files names the same kit, a changed file a
// new one), its manifest names it, and a kit that cannot be collected
// fails the backup before anything is stored.
func TestRunStoresKit(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	if _, err := cli.Put(t.Context(), "/registry/namespaces/default", "v"); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	now := time.Now()
	tr := kittest.Kubeadm(t, root, now, now.Add(365*24*time.Hour))
	id, _ := kittest.Identity(t, t.TempDir())
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: "c"}
	enc := kit.Encryption{Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
	clock := now
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Member: "any"},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  b,
		Encoding: repository.Encoding{Compression: "zstd"},
		Kit:      &KitSource{Root: root, Paths: []string{"kubeadm"}, Encryption: enc},
		Now:      func() time.Time { return clock },
	}
	lg, _ := jobtest.Logger(t)
	backupNow := func() *repository.Manifest {
		t.Helper()
		clock = clock.Add(2 * time.Second) // a new id each time
		m, err := Run(t.Context(), job, lg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		return m
	}
	m1 := backupNow()
	m2 := backupNow()
	if !kit.ValidID(m1.Kit) || m2.Kit != m1.Kit {
		t.Fatalf("kits named: %q then %q; want one kit twice", m1.Kit, m2.Kit)
	}
	kr := kit.Repo{Store: st, Cluster: "c"}
	km, err := kr.Manifest(t.Context(), m1.Kit)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kr.Load(t.Context(), km, []age.Identity{id})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(k.Files()); got < len(tr.Files) {
		t.Errorf("kit holds %d entries, the tree %d files", got, len(tr.Files))
	}
	if err := os.WriteFile(filepath.Join(root, tr.Files[0]), []byte("renewed"), 0o644); err != nil {
		t.Fatal(err)
	}
	m3 := backupNow()
	if m3.Kit == m1.Kit || !kit.ValidID(m3.Kit) {
		t.Errorf("after a file changed the backup names kit %s, before %s", m3.Kit, m1.Kit)
	}
	l, err := kr.List(t.Context())
	if err != nil || len(l.Kits) != 2 {
		t.Errorf("kits stored: %v, %v; want 2", l, err)
	}

	// A missing file: no backup, nothing new stored.
	if err := os.Remove(filepath.Join(root, kittest.EncryptionConfig)); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Second)
	_, err = Run(t.Context(), job, lg)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "recovery kit") || !strings.Contains(err.Error(), "encryption-config.yaml") {
		t.Errorf("Run with a missing kit file: %v", err)
	}
	bl, err := b.List(t.Context())
	if err != nil || len(bl.Backups) != 3 || len(bl.Orphans) != 0 {
		t.Errorf("after the failed backup: %d backups, orphans %v, %v; want 3 and none", len(bl.Backups), bl.Orphans, err)
	}
}

// TestRunKitFollowsRecipients: with the kit's files unchanged, a change
// of recipients makes the next backup name a kit encrypted to the new
// recipient set: the new identity decrypts it, the old one alone does
// not (issue 28, section 4, defect 1). Changing back names the first kit
// again.
func TestRunKitFollowsRecipients(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	if _, err := c.Client(t).Put(t.Context(), "/registry/namespaces/default", "v"); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	now := time.Now()
	kittest.Kubeadm(t, root, now, now.Add(365*24*time.Hour))
	oldID, _ := kittest.Identity(t, t.TempDir())
	newID, _ := kittest.Identity(t, t.TempDir())
	enc := func(ids ...*age.X25519Identity) kit.Encryption {
		var e kit.Encryption
		for _, id := range ids {
			e.Recipients = append(e.Recipients, id.Recipient())
			e.RecipientKeys = append(e.RecipientKeys, id.Recipient().String())
		}
		return e
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: "c"}
	clock := now
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Member: "any"},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  b,
		Encoding: repository.Encoding{Compression: "zstd"},
		Now:      func() time.Time { return clock },
	}
	lg, _ := jobtest.Logger(t)
	kr := kit.Repo{Store: st, Cluster: "c"}
	backupTo := func(e kit.Encryption) *kit.Manifest {
		t.Helper()
		clock = clock.Add(2 * time.Second) // a new id each time
		job.Kit = &KitSource{Root: root, Paths: []string{"kubeadm"}, Encryption: e}
		m, err := Run(t.Context(), job, lg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		km, err := kr.Manifest(t.Context(), m.Kit)
		if err != nil {
			t.Fatalf("kit %s: %v", m.Kit, err)
		}
		return km
	}
	decrypts := func(km *kit.Manifest, id *age.X25519Identity) bool {
		t.Helper()
		_, err := kr.Load(t.Context(), km, []age.Identity{id})
		if err != nil && !errors.Is(err, kit.ErrDecrypt) {
			t.Fatalf("Load kit %s: %v", km.ID, err)
		}
		return err == nil
	}

	first := backupTo(enc(oldID))
	second := backupTo(enc(newID))
	if second.ID == first.ID {
		t.Errorf("after the recipient changed the backup names the same kit %s", first.ID)
	}
	if !decrypts(second, newID) {
		t.Errorf("the new identity does not decrypt the kit named after the recipient change")
	}
	if decrypts(second, oldID) {
		t.Errorf("the old identity alone still decrypts the kit named after the recipient change")
	}
	if diff := cmp.Diff(second.Recipients, []string{newID.Recipient().String()}); diff != "" {
		t.Errorf("recipients (-got +want):\n%s", diff)
	}
	// Both recipients, in either order, are one recipient set.
	both := backupTo(enc(oldID, newID))
	bothAgain := backupTo(enc(newID, oldID))
	if both.ID == first.ID || both.ID == second.ID || bothAgain.ID != both.ID {
		t.Errorf("kits named: old %s, new %s, both %s, both reordered %s", first.ID, second.ID, both.ID, bothAgain.ID)
	}
	if !decrypts(both, oldID) || !decrypts(both, newID) {
		t.Errorf("the kit for both recipients does not decrypt with each")
	}
	// Back to the first recipient: its kit, stored once.
	if back := backupTo(enc(oldID)); back.ID != first.ID {
		t.Errorf("back to the first recipient: kit %s, want %s", back.ID, first.ID)
	}
	if l, err := kr.List(t.Context()); err != nil || len(l.Kits) != 3 {
		t.Errorf("kits stored: %v, %v; want 3", l, err)
	}
}
