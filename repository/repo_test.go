package repository

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// rawSnapshot returns compressible bytes standing in for a snapshot.
func rawSnapshot(t *testing.T, n int) []byte {
	t.Helper()
	b := bytes.Repeat([]byte(`{"kind":"Pod","metadata":{"name":"web-1","namespace":"default"}}`), n/64+1)[:n]
	rand.Read(b[:n/10])
	return b
}

func newIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// putBackup stores raw as backup id with the encoding and commits it.
func putBackup(t *testing.T, b *Repo, id string, raw []byte, enc Encoding) *Manifest {
	t.Helper()
	ctx := t.Context()
	var buf bytes.Buffer
	w, err := NewEncoder(&buf, enc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	key := b.ObjectKey(id, enc)
	obj, err := b.Store.Put(ctx, key, &buf, uploader.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	m := &Manifest{
		Format: ManifestFormat, ID: id, Cluster: b.Cluster, CreatedAt: time.Date(2026, 11, 30, 11, 38, 0, 0, time.UTC),
		Revision: 42, TotalKeys: 1, DBSize: int64(len(raw)), SnapshotSHA256: hex.EncodeToString(sum[:]),
		Object: key, ObjectSize: obj.Size, ObjectSHA256: obj.SHA256,
		Compression: enc.CompressionName(), Encryption: enc.EncryptionName(), Recipients: enc.RecipientKeys,
	}
	if err := b.PutManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func newDirBackups(t testing.TB) *Repo {
	t.Helper()
	d, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return New(d, "c1")
}

func TestEncodingRoundTrip(t *testing.T) {
	id := newIdentity(t)
	other := newIdentity(t)
	raw := rawSnapshot(t, 3<<20)
	tests := []struct {
		name    string
		enc     Encoding
		ids     []age.Identity
		suffix  string
		wantErr error
	}{
		{name: "zstd", enc: Encoding{Compression: "zstd"}, suffix: ".db.zst"},
		{name: "none", enc: Encoding{Compression: "none"}, suffix: ".db"},
		{name: "s2", enc: Encoding{Compression: "s2"}, suffix: ".db.s2"},
		{name: "s2+age", enc: Encoding{Compression: "s2", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, ids: []age.Identity{id}, suffix: ".db.s2.age"},
		{name: "zstd+age", enc: Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, ids: []age.Identity{id}, suffix: ".db.zst.age"},
		{name: "age, two recipients, second identity", enc: Encoding{Compression: "none", Recipients: []age.Recipient{other.Recipient(), id.Recipient()}, RecipientKeys: []string{other.Recipient().String(), id.Recipient().String()}}, ids: []age.Identity{id}, suffix: ".db.age"},
		{name: "wrong identity", enc: Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, ids: []age.Identity{other}, suffix: ".db.zst.age", wantErr: ErrDecrypt},
		{name: "no identity", enc: Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, suffix: ".db.zst.age", wantErr: ErrNoIdentity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newDirBackups(t)
			m := putBackup(t, b, "20261130T113800Z-r42", raw, tt.enc)
			if !strings.HasSuffix(m.Object, tt.suffix) {
				t.Errorf("object %s, want suffix %s", m.Object, tt.suffix)
			}
			rc, err := b.Open(t.Context(), m, tt.ids)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Open error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, raw) {
				t.Errorf("round trip changed the bytes (%d vs %d)", len(got), len(raw))
			}
		})
	}
}

func TestOpenDetectsDamage(t *testing.T) {
	raw := rawSnapshot(t, 1<<20)
	damage := []struct {
		name string
		do   func(path string) error
	}{
		{name: "one byte flipped", do: func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x40
			return os.WriteFile(p, b, 0o600)
		}},
		{name: "truncated", do: func(p string) error {
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, st.Size()/2)
		}},
		{name: "extra bytes", do: func(p string) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("junk"))
			return err
		}},
	}
	for _, enc := range []Encoding{{Compression: "zstd"}, {Compression: "s2"}, {Compression: "none"}} {
		for _, d := range damage {
			t.Run(enc.CompressionName()+"/"+d.name, func(t *testing.T) {
				b := newDirBackups(t)
				m := putBackup(t, b, "20261130T113800Z-r42", raw, enc)
				if err := d.do(filepath.Join(b.Store.(*uploader.Dir).Root(), m.Object)); err != nil {
					t.Fatal(err)
				}
				rc, err := b.Open(t.Context(), m, nil)
				if err == nil {
					_, err = io.Copy(io.Discard, rc)
					rc.Close()
				}
				if !errors.Is(err, ErrObjectMismatch) {
					t.Errorf("reading a damaged object: %v, want ErrObjectMismatch", err)
				}
			})
		}
	}
}

func TestListStatesAndOrphans(t *testing.T) {
	ctx := t.Context()
	b := newDirBackups(t)
	raw := rawSnapshot(t, 4096)
	enc := Encoding{Compression: "zstd"}
	putBackup(t, b, "20261128T000000Z-r10", raw, enc)
	broken := putBackup(t, b, "20261129T000000Z-r20", raw, enc)
	putBackup(t, b, "20261130T000000Z-r30", raw, enc)
	if err := b.Store.Delete(ctx, broken.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.Put(ctx, b.ObjectKey("20261130T010000Z-r40", enc), strings.NewReader("partial"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.Put(ctx, b.ManifestKey("20261130T020000Z-r50"), strings.NewReader("{not json"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another cluster's backups are not listed.
	putBackup(t, &Repo{Store: b.Store, Cluster: "c2"}, "20261130T030000Z-r60", raw, enc)

	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ ID, State string }
	var got []row
	for _, e := range l.Backups {
		got = append(got, row{e.Manifest.ID, e.State})
	}
	want := []row{{"20261130T000000Z-r30", StateOK}, {"20261129T000000Z-r20", StateBroken}, {"20261128T000000Z-r10", StateOK}}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("backups (-got +want):\n%s", diff)
	}
	if len(l.Orphans) != 1 || !strings.Contains(l.Orphans[0].Key, "r40") {
		t.Errorf("orphans = %+v, want the r40 object", l.Orphans)
	}
	if len(l.Unreadable) != 1 || !strings.Contains(l.Unreadable[0].Key, "r50") {
		t.Errorf("unreadable = %+v, want the r50 manifest", l.Unreadable)
	}
	m, err := b.Resolve(ctx, "latest")
	if err != nil || m.ID != "20261130T000000Z-r30" {
		t.Errorf("Resolve(latest) = %v, %v", m, err)
	}
	if _, err := b.Resolve(ctx, "20261101T000000Z-r1"); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("Resolve(missing) error %v, want uploader.ErrNotFound", err)
	}
	if _, err := b.Resolve(ctx, "../../etc/passwd"); err == nil {
		t.Error("Resolve accepted a path as id")
	}
	empty := &Repo{Store: b.Store, Cluster: "none"}
	if _, err := empty.Resolve(ctx, "latest"); !errors.Is(err, ErrNoBackups) {
		t.Errorf("Resolve(latest) on an empty cluster: %v, want ErrNoBackups", err)
	}
}

func TestParseManifest(t *testing.T) {
	b := newDirBackups(t)
	good := putBackup(t, b, "20261130T113800Z-r42", rawSnapshot(t, 1000), Encoding{Compression: "zstd"})
	data, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseManifest(data); err != nil {
		t.Fatalf("ParseManifest(good) = %v", err)
	}
	tests := []struct {
		name string
		edit func(m *Manifest)
	}{
		{"future format", func(m *Manifest) { m.Format = 2 }},
		{"bad id", func(m *Manifest) { m.ID = "yesterday" }},
		{"no revision", func(m *Manifest) { m.Revision = 0 }},
		{"object escapes", func(m *Manifest) { m.Object = "../x" }},
		{"short sha", func(m *Manifest) { m.ObjectSHA256 = "abc" }},
		{"unknown compression", func(m *Manifest) { m.Compression = "lz4" }},
		{"age without recipients", func(m *Manifest) { m.Encryption = "age"; m.Recipients = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := *good
			tt.edit(&m)
			data, _ := m.Marshal()
			if _, err := ParseManifest(data); !errors.Is(err, ErrBadManifest) {
				t.Errorf("ParseManifest = %v, want ErrBadManifest", err)
			}
		})
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":1,"id":"20261130T113800Z-r42","revision":42,"object":"c/snapshots/x.db.zst","object_sha256":"` + strings.Repeat("a", 64) + `","snapshot_sha256":"` + strings.Repeat("b", 64) + `","compression":"zstd","encryption":"none"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"format":1,"recipients":[1,2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseManifest accepted an invalid manifest: %v", err)
		}
		again, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseManifest(again); err != nil {
			t.Fatalf("re-encoded manifest does not parse: %v", err)
		}
	})
}

// failingGets is a real store whose Gets fail, as a store that is down.
type failingGets struct{ uploader.Store }

func (f failingGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return nil, errors.New("connection reset by peer")
}

// TestListFailsOnStoreErrors: a manifest that cannot be read because the
// store failed is an error, never a shorter listing.
func TestListFailsOnStoreErrors(t *testing.T) {
	b := newDirBackups(t)
	for i := range 20 {
		putBackup(t, b, NewID(time.Date(2026, 11, 30, 0, i, 0, 0, time.UTC), int64(i+1)), rawSnapshot(t, 1024), Encoding{Compression: "zstd"})
	}
	l, err := b.List(t.Context())
	if err != nil || len(l.Backups) != 20 {
		t.Fatalf("List = %d backups, %v; want 20", len(l.Backups), err)
	}
	broken := &Repo{Store: failingGets{b.Store}, Cluster: b.Cluster}
	if l, err := broken.List(t.Context()); err == nil {
		t.Fatalf("List with failing reads = %d backups, %d unreadable, no error", len(l.Backups), len(l.Unreadable))
	}
}
