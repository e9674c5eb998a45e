package drill_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestDrillChecksKit: the drill of a backup with a recovery kit decrypts
// the kit, parses its certificates and keys and pairs them, and reports
// the earliest certificate expiry; a tampered kit object, a kit whose key
// does not match its certificate (TestDrillKitMismatchedKey), or a
// missing kit fail the drill (a verdict). On a directory store and on
// versitygw.
func TestDrillChecksKit(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd and versitygw")
	}
	src := restoretest.StartSource(t, 100)
	srv := s3test.Start(t)
	id := restoretest.NewIdentity(t)
	for _, tc := range []struct {
		name    string
		backups func(t *testing.T) *repository.Repo
	}{
		{"directory", func(t *testing.T) *repository.Repo { return restoretest.DirRepo(t, t.TempDir()) }},
		{"s3", func(t *testing.T) *repository.Repo { return restoretest.S3Repo(t, srv) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			now := time.Now()
			tr := kittest.Kubeadm(t, root, now, now.Add(20*24*time.Hour))
			b := tc.backups(t)
			enc := restoretest.AgeEncoding(id)
			m, err := backup.Run(t.Context(), backup.Job{
				Etcd: snapshot.Config{Endpoints: src.C.Endpoints(), Member: "any"}, SpoolDir: t.TempDir(),
				Backups: b, Encoding: enc, Version: "test",
				Kit: &backup.KitSource{Root: root, Paths: []string{"kubeadm"},
					Encryption: kit.Encryption{Recipients: enc.Recipients, RecipientKeys: enc.RecipientKeys}},
			}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("backup: %v", err)
			}
			drillWith := func(ids ...age.Identity) (*repository.DrillReport, error) {
				return drill.Run(t.Context(), drill.Options{Backups: b, Manifest: m, Identities: ids, ScratchDir: t.TempDir(), Version: "test"})
			}
			rep, err := drillWith(id)
			if err != nil {
				t.Fatalf("Drill: %v", err)
			}
			if rep.Kit == nil || rep.Kit.ID != m.Kit || !rep.Kit.EarliestCertExpiry.Equal(tr.EarliestExpiry) || len(rep.Kit.Pairs) != tr.Pairs {
				t.Fatalf("report's kit: %+v; want kit %s, earliest expiry %v, %d pairs", rep.Kit, m.Kit, tr.EarliestExpiry, tr.Pairs)
			}

			kr := kit.Repo{Store: b.Store, Cluster: b.Cluster}
			km, err := kr.Manifest(t.Context(), m.Kit)
			if err != nil {
				t.Fatal(err)
			}
			obj := storetest.ReadObject(t, b.Store, km.Object)

			// A tampered kit object: a failed check, a verdict.
			putObject(t, b.Store, km.Object, flipByte(obj, len(obj)-5))
			rep, err = drillWith(id)
			if !errors.Is(err, drill.ErrFailed) || !failedCheck(rep, "kit content") {
				t.Errorf("drill of a tampered kit: %v; checks %+v", err, rep.FailedChecks())
			}
			putObject(t, b.Store, km.Object, obj)

			// A kit that is gone: a failed check.
			if err := b.Store.Delete(t.Context(), kr.ManifestKey(m.Kit)); err != nil {
				t.Fatal(err)
			}
			rep, err = drillWith(id)
			if !errors.Is(err, drill.ErrFailed) || !failedCheck(rep, "kit stored") {
				t.Errorf("drill without its kit: %v; checks %+v", err, rep.FailedChecks())
			}
		})
	}
}

// TestDrillKitMismatchedKey: a kit whose certificate and key do not
// belong together fails its drill, naming the pair.
func TestDrillKitMismatchedKey(t *testing.T) {
	src := restoretest.StartSource(t, 50)
	id := restoretest.NewIdentity(t)
	root := t.TempDir()
	now := time.Now()
	kittest.Kubeadm(t, root, now, now.Add(400*24*time.Hour))
	// The front-proxy CA's key in place of the cluster CA's.
	restoretest.CopyFile(t, root+"/etc/kubernetes/pki/front-proxy-ca.key", root+"/etc/kubernetes/pki/ca.key")
	b := restoretest.DirRepo(t, t.TempDir())
	enc := restoretest.AgeEncoding(id)
	m, err := backup.Run(t.Context(), backup.Job{
		Etcd: snapshot.Config{Endpoints: src.C.Endpoints(), Member: "any"}, SpoolDir: t.TempDir(),
		Backups: b, Encoding: enc, Version: "test",
		Kit: &backup.KitSource{Root: root, Paths: []string{"kubeadm"}, Encryption: kit.Encryption{Recipients: enc.Recipients, RecipientKeys: enc.RecipientKeys}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := drill.Run(t.Context(), drill.Options{Backups: b, Manifest: m, Identities: []age.Identity{id}, ScratchDir: t.TempDir()})
	if !errors.Is(err, drill.ErrFailed) || !failedCheck(rep, "kit certificates and keys") || !strings.Contains(err.Error(), "/etc/kubernetes/pki/ca.*") {
		t.Errorf("drill: %v", err)
	}
	// The wrong identity (the kit's recipients are the backup's): an
	// error of the run, no verdict.
	_, err = drill.Run(t.Context(), drill.Options{Backups: b, Manifest: m, Identities: []age.Identity{restoretest.NewIdentity(t)}, ScratchDir: t.TempDir()})
	if err == nil || drill.Verdict(err) {
		t.Errorf("drill with the wrong identity: %v; want an error of the run", err)
	}
}

func failedCheck(rep *repository.DrillReport, name string) bool {
	if rep == nil {
		return false
	}
	for _, c := range rep.FailedChecks() {
		if c.Name == name {
			return true
		}
	}
	return false
}

func putObject(t *testing.T, st uploader.Store, key string, b []byte) {
	t.Helper()
	if err := st.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), key, bytes.NewReader(b), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func flipByte(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}
