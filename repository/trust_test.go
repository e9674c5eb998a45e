package repository

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func signingKey(t *testing.T) *signing.Key {
	t.Helper()
	k, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writer returns a Repo over b's store that signs with k (nil: unsigned).
func writer(b *Repo, k *signing.Key) *Repo {
	return &Repo{Store: b.Store, Cluster: b.Cluster, Signer: k}
}

// reader returns a fresh Repo over b's store trusting keys.
func reader(b *Repo, allowUnsigned bool, keys ...*signing.Key) *Repo {
	r := New(b.Store, b.Cluster)
	tr := &signing.Trust{AllowUnsigned: allowUnsigned}
	for _, k := range keys {
		tr.Keys = append(tr.Keys, k.Public())
	}
	r.Trust = tr
	return r
}

func putBackupOf(t *testing.T, b *Repo, id, clusterID string) *Manifest {
	t.Helper()
	m := putBackupWith(t, b, id, func(m *Manifest) { m.EtcdClusterID = clusterID })
	return m
}

// putBackupWith stores a small backup, edits its manifest with edit and
// commits it.
func putBackupWith(t *testing.T, b *Repo, id string, edit func(*Manifest)) *Manifest {
	t.Helper()
	w := *b
	w.Signer = nil
	signer := b.Signer
	// The data object first (unsigned: objects are bound by the manifest).
	m := putBackupNoCommit(t, &w, id)
	edit(m)
	w.Signer = signer
	if err := w.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func putBackupNoCommit(t *testing.T, b *Repo, id string) *Manifest {
	t.Helper()
	enc := Encoding{Compression: "zstd"}
	raw := rawSnapshot(t, 4096)
	var buf bytes.Buffer
	w, err := NewEncoder(&buf, enc)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	key := b.ObjectKey(id, enc)
	obj, err := b.Store.Put(t.Context(), key, &buf, uploader.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &Manifest{
		Format: ManifestFormat, ID: id, Cluster: b.Cluster, CreatedAt: time.Date(2026, 11, 30, 11, 38, 0, 0, time.UTC),
		EtcdClusterID: "aaaa", Revision: 42, TotalKeys: 1, DBSize: int64(len(raw)), SnapshotSHA256: strings.Repeat("ab", 32),
		Object: key, ObjectSize: obj.Size, ObjectSHA256: obj.SHA256, Compression: "zstd", Encryption: "none",
	}
}

func readRaw(t *testing.T, st uploader.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func replaceRaw(t *testing.T, st uploader.Store, key string, data []byte) {
	t.Helper()
	if err := st.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), key, bytes.NewReader(data), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func states(t *testing.T, b *Repo) map[string]string {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range l.Backups {
		out[e.Manifest.ID] = e.State
	}
	return out
}

// TestUntrustedBackups: with trusted keys configured, a backup planted
// by someone with the store's credentials but not the signing key (here
// unsigned, or signed by another key), or a signed manifest altered
// afterwards, is listed untrusted, skipped by latest and refused by id;
// the newest trusted backup is what latest resolves to.
func TestUntrustedBackups(t *testing.T) {
	ctx := t.Context()
	base := newDirBackups(t)
	key, attacker := signingKey(t), signingKey(t)
	good := putBackupWith(t, writer(base, key), "20261130T100000Z-r42", func(*Manifest) {})
	putBackupWith(t, writer(base, nil), "20261130T110000Z-r43", func(*Manifest) {})
	putBackupWith(t, writer(base, attacker), "20261130T120000Z-r44", func(*Manifest) {})
	altered := putBackupWith(t, writer(base, key), "20261130T130000Z-r45", func(*Manifest) {})
	mk := base.ManifestKey(altered.ID)
	replaceRaw(t, base.Store, mk, bytes.Replace(readRaw(t, base.Store, mk), []byte(`"revision": 42`), []byte(`"revision": 4242`), 1))

	r := reader(base, false, key)
	got := states(t, r)
	want := map[string]string{good.ID: StateOK, "20261130T110000Z-r43": StateUntrusted, "20261130T120000Z-r44": StateUntrusted, altered.ID: StateUntrusted}
	for id, s := range want {
		if got[id] != s {
			t.Errorf("%s: state %q, want %q", id, got[id], s)
		}
	}
	m, err := r.Resolve(ctx, "latest")
	if err != nil || m.ID != good.ID {
		t.Errorf("latest: %v %v, want %s", m, err, good.ID)
	}
	for id, why := range map[string]error{"20261130T110000Z-r43": signing.ErrUnsigned, "20261130T120000Z-r44": signing.ErrUnknownKey, altered.ID: signing.ErrBadSignature} {
		_, err := r.Manifest(ctx, id)
		if !errors.Is(err, ErrUntrusted) || !errors.Is(err, why) {
			t.Errorf("Manifest(%s): %v, want ErrUntrusted and %v", id, err, why)
		}
	}
	// Without trusted keys nothing is checked (a store without signing).
	if got := states(t, New(base.Store, base.Cluster)); got["20261130T120000Z-r44"] != StateOK {
		t.Errorf("without trust: %v", got)
	}
}

// TestKeyRotationAndUnsigned: old objects stay trusted while their key
// is; unsigned ones are read only with AllowUnsigned, and flagged.
func TestKeyRotationAndUnsigned(t *testing.T) {
	base := newDirBackups(t)
	k1, k2 := signingKey(t), signingKey(t)
	putBackupWith(t, writer(base, nil), "20261130T090000Z-r41", func(*Manifest) {})
	putBackupWith(t, writer(base, k1), "20261130T100000Z-r42", func(*Manifest) {})
	putBackupWith(t, writer(base, k2), "20261130T110000Z-r43", func(*Manifest) {})
	for _, tc := range []struct {
		name   string
		r      *Repo
		want   []string
		latest string
	}{
		{"both keys", reader(base, false, k1, k2), []string{StateUntrusted, StateOK, StateOK}, "20261130T110000Z-r43"},
		{"new key only", reader(base, false, k2), []string{StateUntrusted, StateUntrusted, StateOK}, "20261130T110000Z-r43"},
		{"old key only", reader(base, false, k1), []string{StateUntrusted, StateOK, StateUntrusted}, "20261130T100000Z-r42"},
		{"allow unsigned", reader(base, true, k1), []string{StateOK, StateOK, StateUntrusted}, "20261130T100000Z-r42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := states(t, tc.r)
			for i, id := range []string{"20261130T090000Z-r41", "20261130T100000Z-r42", "20261130T110000Z-r43"} {
				if got[id] != tc.want[i] {
					t.Errorf("%s: %q, want %q", id, got[id], tc.want[i])
				}
			}
			m, err := tc.r.Resolve(t.Context(), "latest")
			if err != nil || m.ID != tc.latest {
				t.Errorf("latest: %v %v, want %s", m, err, tc.latest)
			}
		})
	}
	m, err := reader(base, true, k1).Manifest(t.Context(), "20261130T090000Z-r41")
	if err != nil || !m.Unsigned() {
		t.Errorf("unsigned allowed: %v, unsigned=%v", err, m != nil && m.Unsigned())
	}
}

// TestForgedDrillReport: a drill report not signed by a trusted key is
// no verdict: the backup's last drill is unknown, never passed, and
// latest-proven does not choose it.
func TestForgedDrillReport(t *testing.T) {
	ctx := t.Context()
	base := newDirBackups(t)
	key := signingKey(t)
	w := writer(base, key)
	old := putBackupWith(t, w, "20261130T100000Z-r42", func(*Manifest) {})
	newer := putBackupWith(t, w, "20261130T110000Z-r43", func(*Manifest) {})
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := w.PutDrillReport(ctx, testReport(old.ID, start, true)); err != nil {
		t.Fatal(err)
	}
	if err := w.PutDrillReport(ctx, testReport(newer.ID, start, false)); err != nil {
		t.Fatal(err)
	}
	// The attacker's report: newer, passed, unsigned.
	if err := writer(base, nil).PutDrillReport(ctx, testReport(newer.ID, start.Add(time.Minute), true)); err != nil {
		t.Fatal(err)
	}
	r := reader(base, false, key)
	d, err := r.LastDrills(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := d[newer.ID].State(); got != DrillUnknown || !errors.Is(d[newer.ID].Err, ErrUntrusted) {
		t.Errorf("forged newest report: state %s (%v), want unknown and untrusted", got, d[newer.ID].Err)
	}
	if got := d[old.ID].State(); got != DrillPassed {
		t.Errorf("signed report: %s, want passed", got)
	}
	m, err := SelectProven(ctx, r)
	if err != nil || m.ID != old.ID {
		t.Errorf("latest-proven: %v %v, want %s", m, err, old.ID)
	}
}

// TestLineages: backups of two unrelated etcd clusters under one name
// are two lineages; latest refuses to choose between them until told
// which (Repo.Lineage) or until one supersedes the other (adopted);
// backups of a cluster restored from the lineage belong to it.
func TestLineages(t *testing.T) {
	ctx := t.Context()
	b := newDirBackups(t)
	putBackupOf(t, b, "20261130T100000Z-r42", "aaaa")
	putBackupWith(t, b, "20261130T110000Z-r43", func(m *Manifest) {
		m.EtcdClusterID, m.Lineage, m.RestoredFrom = "cccc", "aaaa", "20261130T100000Z-r42"
	})
	putBackupOf(t, b, "20261130T120000Z-r44", "bbbb")
	_, err := b.Resolve(ctx, "latest")
	var amb *AmbiguousError
	if !errors.As(err, &amb) || !errors.Is(err, ErrLineageAmbiguous) {
		t.Fatalf("latest over two lineages: %v, want ErrLineageAmbiguous", err)
	}
	for _, s := range []string{"lineage aaaa (etcd cluster aaaa, cccc)", "lineage bbbb", "20261130T110000Z-r43", "--lineage"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not say %q:\n%v", s, err)
		}
	}
	for _, ref := range []string{"random", "latest-proven"} {
		if _, err := Select(ctx, b, ref, func(int) int { return 0 }); !errors.Is(err, ErrLineageAmbiguous) {
			t.Errorf("%s: %v, want ErrLineageAmbiguous", ref, err)
		}
	}
	pick := *b
	pick.Lineage = "aaaa"
	if m, err := pick.Resolve(ctx, "latest"); err != nil || m.ID != "20261130T110000Z-r43" {
		t.Errorf("latest of lineage aaaa: %v %v", m, err)
	}
	pick.Lineage = "ffff"
	if _, err := pick.Resolve(ctx, "latest"); !errors.Is(err, ErrNoBackups) || !strings.Contains(err.Error(), "aaaa, bbbb") && !strings.Contains(err.Error(), "bbbb, aaaa") {
		t.Errorf("unknown lineage: %v", err)
	}
	// Adopted: bbbb's newest supersedes aaaa.
	putBackupWith(t, b, "20261130T130000Z-r45", func(m *Manifest) {
		m.EtcdClusterID, m.Supersedes = "bbbb", []string{"aaaa"}
	})
	if m, err := b.Resolve(ctx, "latest"); err != nil || m.ID != "20261130T130000Z-r45" {
		t.Errorf("latest after adoption: %v %v", m, err)
	}
	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ls := l.Lineages()
	if len(ls) != 2 || ls[0].ID != "bbbb" || len(ls[1].Backups) != 2 {
		t.Errorf("lineages: %+v", ls)
	}
}
