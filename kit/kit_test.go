package kit_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func files(k *kit.Kit) []string {
	var ps []string
	for _, e := range k.Entries {
		if e.Type == kit.TypeFile {
			ps = append(ps, e.Path)
		}
	}
	return ps
}

func TestCollectPresets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		preset string
		tree   func(t *testing.T, root string) kittest.Tree
		pairs  []string
	}{
		{"kubeadm", kit.PresetKubeadm, func(t *testing.T, root string) kittest.Tree {
			return kittest.Kubeadm(t, root, now, now.Add(200*24*time.Hour))
		}, []string{
			"/etc/kubernetes/pki/apiserver", "/etc/kubernetes/pki/apiserver-etcd-client", "/etc/kubernetes/pki/ca", "/etc/kubernetes/pki/etcd/ca",
			"/etc/kubernetes/pki/etcd/healthcheck-client", "/etc/kubernetes/pki/etcd/peer", "/etc/kubernetes/pki/etcd/server",
			"/etc/kubernetes/pki/front-proxy-ca", "/etc/kubernetes/pki/front-proxy-client", "/etc/kubernetes/pki/sa",
		}},
		{"k3s", kit.PresetK3s, func(t *testing.T, root string) kittest.Tree { return kittest.K3s(t, root, now) },
			[]string{"/var/lib/rancher/k3s/server/tls/server-ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tr := tc.tree(t, root)
			k, err := kit.Collect(root, []string{tc.preset})
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			want := slices.Sorted(slices.Values(tr.Files))
			if diff := cmp.Diff(files(k), want); diff != "" {
				t.Errorf("files (-got +want):\n%s", diff)
			}
			for _, e := range k.Entries {
				fi, err := os.Stat(filepath.Join(root, e.Path))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := e.Mode, fi.Mode().Perm(); got != want {
					t.Errorf("%s: mode %v, the file's %v", e.Path, got, want)
				}
				if e.UID != os.Getuid() {
					t.Errorf("%s: uid %d, want %d", e.Path, e.UID, os.Getuid())
				}
			}
			res, err := k.Check()
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if diff := cmp.Diff(res.Pairs, tc.pairs); diff != "" {
				t.Errorf("pairs (-got +want):\n%s", diff)
			}
			if !res.EarliestExpiry.Equal(tr.EarliestExpiry) {
				t.Errorf("earliest expiry %v (%s), want %v", res.EarliestExpiry, res.EarliestPath, tr.EarliestExpiry)
			}
			// The same files give the same id; a changed one another.
			a1, _ := k.Archive()
			k2, err := kit.Collect(root, []string{tc.preset})
			if err != nil {
				t.Fatal(err)
			}
			a2, _ := k2.Archive()
			if kit.ID(a1) != kit.ID(a2) {
				t.Errorf("two collections of the same files: ids %s and %s", kit.ID(a1), kit.ID(a2))
			}
			if err := os.Chtimes(filepath.Join(root, tr.Files[0]), now, now); err != nil {
				t.Fatal(err)
			}
			k3, _ := kit.Collect(root, []string{tc.preset})
			if a3, _ := k3.Archive(); kit.ID(a3) != kit.ID(a1) {
				t.Errorf("a new mtime changed the kit's id")
			}
			if err := os.WriteFile(filepath.Join(root, tr.Files[0]), []byte("changed"), 0o600); err != nil {
				t.Fatal(err)
			}
			k4, _ := kit.Collect(root, []string{tc.preset})
			if a4, _ := k4.Archive(); kit.ID(a4) == kit.ID(a1) {
				t.Errorf("a changed file kept the kit's id")
			}
		})
	}
}

func TestCollectErrors(t *testing.T) {
	kubeadmRoot := t.TempDir()
	kittest.Kubeadm(t, kubeadmRoot, now, now.Add(time.Hour))
	noEnc := t.TempDir()
	kittest.Kubeadm(t, noEnc, now, now.Add(time.Hour))
	if err := os.Remove(filepath.Join(noEnc, kittest.EncryptionConfig)); err != nil {
		t.Fatal(err)
	}
	noManifest := t.TempDir()
	kittest.Kubeadm(t, noManifest, now, now.Add(time.Hour))
	if err := os.Remove(filepath.Join(noManifest, kit.KubeadmAPIServer)); err != nil {
		t.Fatal(err)
	}
	withFifo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(withFifo, "etc/x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../outside", filepath.Join(withFifo, "etc/x/link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		root  string
		paths []string
		is    error
		want  string
	}{
		{"unknown preset", kubeadmRoot, []string{"kubeadmm"}, kit.ErrUnknownPath, `"kubeadmm": not a preset`},
		{"relative path", kubeadmRoot, []string{"etc/kubernetes"}, kit.ErrUnknownPath, "not a preset"},
		{"none", kubeadmRoot, nil, nil, "none given"},
		{"kubeadm on another host", t.TempDir(), []string{"kubeadm"}, fs.ErrNotExist, "kit preset kubeadm: kit path /etc/kubernetes/pki"},
		{"kubeadm without its manifest", noManifest, []string{"kubeadm"}, fs.ErrNotExist, "is this a kubeadm control-plane node?"},
		{"kubeadm without the encryption config", noEnc, []string{"kubeadm"}, fs.ErrNotExist, "encryption-config.yaml"},
		{"k3s missing", kubeadmRoot, []string{"k3s"}, fs.ErrNotExist, "kit preset k3s: kit path /var/lib/rancher/k3s/server/token"},
		{"missing file", kubeadmRoot, []string{"/etc/nothing"}, fs.ErrNotExist, "kit path /etc/nothing"},
		{"symlink out of the tree", withFifo, []string{"/etc/x"}, kit.ErrBadKit, "leaves the kit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kit.Collect(tc.root, tc.paths)
			if err == nil {
				t.Fatal("Collect succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v, want one wrapping %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestEncryptionConfigPath(t *testing.T) {
	for _, tc := range []struct{ name, manifest, want string }{
		{"equals", "spec:\n  containers:\n  - command: [kube-apiserver, --encryption-provider-config=/etc/k/enc.yaml]\n", "/etc/k/enc.yaml"},
		{"separate", "spec:\n  containers:\n  - command: [kube-apiserver]\n    args: [--encryption-provider-config, /etc/k/../k/e.yaml]\n", "/etc/k/e.yaml"},
		{"none", "spec:\n  containers:\n  - command: [kube-apiserver, --v=2]\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kit.EncryptionConfigPath([]byte(tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := kit.EncryptionConfigPath([]byte("spec:\n  containers:\n  - command: [x, --encryption-provider-config=enc.yaml]\n")); err == nil {
		t.Error("a relative path was accepted")
	}
}

var bucketSeq atomic.Int64

// stores returns a directory store and a versitygw bucket.
func stores(t *testing.T) map[string]uploader.Store {
	t.Helper()
	d, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := fmt.Sprintf("lifeboat-kit-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, bucket, false)
	s3, err := uploader.NewS3(t.Context(), uploader.S3Config{Bucket: bucket, Prefix: "lifeboat", Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]uploader.Store{"dir": d, "s3": s3}
}

func encryption(id *age.X25519Identity) kit.Encryption {
	return kit.Encryption{Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}
}

func TestStore(t *testing.T) {
	root := t.TempDir()
	tr := kittest.Kubeadm(t, root, now, now.Add(90*24*time.Hour))
	id, _ := kittest.Identity(t, t.TempDir())
	other, _ := kittest.Identity(t, t.TempDir())
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			r := kit.Repo{Store: st, Cluster: "prod"}
			k, err := kit.Collect(root, []string{"kubeadm"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Put(ctx, k, kit.Encryption{}, []string{"kubeadm"}, now, "test"); !errors.Is(err, kit.ErrNoRecipients) {
				t.Fatalf("Put without recipients: %v, want ErrNoRecipients", err)
			}
			first, err := r.Put(ctx, k, encryption(id), []string{"kubeadm"}, now, "test")
			if err != nil || !first.Stored {
				t.Fatalf("Put: %+v, %v", first, err)
			}
			again, err := r.Put(ctx, k, encryption(id), []string{"kubeadm"}, now.Add(time.Hour), "test")
			if err != nil || again.Stored || again.Manifest.ID != first.Manifest.ID || !again.Manifest.CreatedAt.Equal(now) {
				t.Fatalf("second Put of the same kit: stored %v, id %s, created %v, %v", again.Stored, again.Manifest.ID, again.Manifest.CreatedAt, err)
			}
			m := first.Manifest
			if len(m.Certificates) != 9 || m.Recipients[0] != id.Recipient().String() {
				t.Errorf("manifest: %d certificates, recipients %v", len(m.Certificates), m.Recipients)
			}
			got, err := r.Load(ctx, m, []age.Identity{id})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(got, k); diff != "" {
				t.Errorf("loaded kit (-got +want):\n%s", diff)
			}
			if _, err := r.Load(ctx, m, []age.Identity{other}); !errors.Is(err, kit.ErrDecrypt) {
				t.Errorf("Load with the wrong identity: %v, want ErrDecrypt", err)
			}
			if _, err := r.Load(ctx, m, nil); !errors.Is(err, kit.ErrNoIdentity) {
				t.Errorf("Load without identity: %v, want ErrNoIdentity", err)
			}
			// A changed file is a new kit; both are listed, the newer last.
			if err := os.WriteFile(filepath.Join(root, tr.Files[0]+".new"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(filepath.Join(root, tr.Files[0]+".new")) })
			k2, _ := kit.Collect(root, []string{"kubeadm"})
			second, err := r.Put(ctx, k2, encryption(id), []string{"kubeadm"}, now.Add(time.Hour), "test")
			if err != nil || !second.Stored || second.Manifest.ID == m.ID {
				t.Fatalf("Put of a changed kit: %+v, %v", second, err)
			}
			l, err := r.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, km := range l.Kits {
				ids = append(ids, km.ID)
			}
			if diff := cmp.Diff(ids, []string{m.ID, second.Manifest.ID}); diff != "" || len(l.Orphans) != 0 {
				t.Errorf("listed kits (-got +want):\n%s\norphans %v", diff, l.Orphans)
			}
			if latest, _ := l.Find("latest"); latest.ID != second.Manifest.ID {
				t.Errorf("latest is %s", latest.ID)
			}
			if found, err := l.Find(m.ID[:10]); err != nil || found.ID != m.ID {
				t.Errorf("Find by prefix: %v, %v", found, err)
			}

			// A tampered and a truncated object: refused, named.
			obj := storetest.ReadObject(t, st, m.Object)
			for _, bad := range []struct {
				name string
				b    []byte
			}{
				{"tampered", flip(obj, len(obj)/2)},
				{"truncated", obj[:len(obj)-10]},
			} {
				replace(t, st, m.Object, bad.b)
				_, err := r.Load(ctx, m, []age.Identity{id})
				if !errors.Is(err, kit.ErrBadKit) || !strings.Contains(err.Error(), m.Object) {
					t.Errorf("Load of a %s object: %v, want ErrBadKit naming the object", bad.name, err)
				}
			}
			// Even with a manifest that matches the tampered bytes, age's
			// authentication refuses them.
			tampered := flip(obj, len(obj)/2)
			replace(t, st, m.Object, tampered)
			forged := *m
			forged.ObjectSHA256 = fmt.Sprintf("%x", sha256.Sum256(tampered))
			if _, err := r.Load(ctx, &forged, []age.Identity{id}); !errors.Is(err, kit.ErrBadKit) {
				t.Errorf("Load of a tampered object with a forged manifest: %v, want ErrBadKit", err)
			}
			replace(t, st, m.Object, obj)
			if _, err := r.Load(ctx, m, []age.Identity{id}); err != nil {
				t.Errorf("Load of the object put back: %v", err)
			}
		})
	}
}

// TestStoreRecipientSets: a kit is stored per recipient set (issue 28,
// section 4, defect 1): the same files for new recipients are a new kit
// encrypted to them alone; a manifest whose recipients or content digest
// were altered does not parse; a kit stored before ids covered the
// recipients (its id the content's sha256, no content_sha256) still
// loads under its old id.
func TestStoreRecipientSets(t *testing.T) {
	root := t.TempDir()
	kittest.Kubeadm(t, root, now, now.Add(90*24*time.Hour))
	oldID, _ := kittest.Identity(t, t.TempDir())
	newID, _ := kittest.Identity(t, t.TempDir())
	st := stores(t)["dir"]
	ctx := t.Context()
	r := kit.Repo{Store: st, Cluster: "prod"}
	k, err := kit.Collect(root, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Put(ctx, k, encryption(oldID), []string{"kubeadm"}, now, "test")
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.Put(ctx, k, encryption(newID), []string{"kubeadm"}, now.Add(time.Hour), "test")
	if err != nil || !second.Stored || second.Manifest.ID == first.Manifest.ID {
		t.Fatalf("Put for a new recipient: %+v, %v; want a new kit", second, err)
	}
	archive, _ := k.Archive()
	if got, want := second.Manifest.ContentSHA256, kit.ID(archive); got != want || first.Manifest.ContentSHA256 != want {
		t.Errorf("content digests %s and %s, want %s", first.Manifest.ContentSHA256, got, want)
	}
	if _, err := r.Load(ctx, second.Manifest, []age.Identity{oldID}); !errors.Is(err, kit.ErrDecrypt) {
		t.Errorf("Load of the new kit with the old identity: %v, want ErrDecrypt", err)
	}
	if _, err := r.Load(ctx, second.Manifest, []age.Identity{newID}); err != nil {
		t.Errorf("Load of the new kit with the new identity: %v", err)
	}

	// Altered manifests: refused.
	for _, tc := range []struct {
		name  string
		alter func(m *kit.Manifest)
	}{
		{"recipients", func(m *kit.Manifest) { m.Recipients = []string{oldID.Recipient().String()} }},
		{"content", func(m *kit.Manifest) { m.ContentSHA256 = strings.Repeat("a", 64) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := *second.Manifest
			tc.alter(&m)
			b, _ := json.Marshal(m)
			if _, err := kit.ParseManifest(b); !errors.Is(err, kit.ErrBadKit) {
				t.Errorf("ParseManifest of a manifest with altered %s: %v, want ErrBadKit", tc.name, err)
			}
		})
	}

	// A kit as stored before: id = content sha256, no content_sha256.
	legacy := *first.Manifest
	legacy.ID, legacy.ContentSHA256 = kit.ID(archive), ""
	legacy.Object = r.Dir() + legacy.ID + "-01020304.tar.zst.age"
	if _, err := st.Put(ctx, legacy.Object, bytes.NewReader(storetest.ReadObject(t, st, first.Manifest.Object)), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(legacy)
	if _, err := st.Put(ctx, r.ManifestKey(legacy.ID), bytes.NewReader(b), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	lm, err := r.Manifest(ctx, legacy.ID)
	if err != nil {
		t.Fatalf("Manifest of a kit stored before: %v", err)
	}
	got, err := r.Load(ctx, lm, []age.Identity{oldID})
	if err != nil {
		t.Fatalf("Load of a kit stored before: %v", err)
	}
	if diff := cmp.Diff(got, k); diff != "" {
		t.Errorf("kit stored before (-got +want):\n%s", diff)
	}
}

func replace(t *testing.T, st uploader.Store, key string, b []byte) {
	t.Helper()
	if err := st.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), key, bytes.NewReader(b), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0x40
	return c
}

// FuzzParseManifest: a kit manifest from the store is untrusted; parsing
// never panics, and what parses names an object of its own id.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":1,"id":"` + strings.Repeat("a", 64) + `","object":"c/kits/` + strings.Repeat("a", 64) + `-01020304.tar.zst.age","object_size":10,"object_sha256":"` + strings.Repeat("b", 64) + `","compression":"zstd","encryption":"age","recipients":["age1x"]}`))
	f.Add([]byte(`{"format":1,"id":"` + strings.Repeat("a", 64) + `","content_sha256":"` + strings.Repeat("c", 64) + `","object":"c/kits/` + strings.Repeat("a", 64) + `-01020304.tar.zst.age","object_size":10,"object_sha256":"` + strings.Repeat("b", 64) + `","compression":"zstd","encryption":"age","recipients":["age1x"]}`))
	f.Add([]byte(`{"format":1,"id":"../x"}`))
	f.Add([]byte(`{"format":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := kit.ParseManifest(b)
		if err != nil {
			if !errors.Is(err, kit.ErrBadKit) {
				t.Fatalf("error %v does not wrap ErrBadKit", err)
			}
			return
		}
		if !kit.ValidID(m.ID) || strings.Contains(m.Object, "..") || !strings.HasPrefix(filepath.Base(m.Object), m.ID+"-") || len(m.Recipients) == 0 ||
			m.ContentSHA256 != "" && kit.IDFor(m.ContentSHA256, m.Recipients) != m.ID {
			t.Fatalf("accepted %+v", m)
		}
	})
}

// TestRestoreOwners: as root the kit's owners are applied; otherwise the
// result says they were not.
func TestRestoreOwners(t *testing.T) {
	k := &kit.Kit{Entries: []kit.Entry{
		{Path: "/etc/x", Type: kit.TypeDir, Mode: 0o750, UID: 1234, GID: 2345},
		{Path: "/etc/x/key", Type: kit.TypeFile, Mode: 0o640, UID: 1234, GID: 2345, Data: []byte("k"), Size: 1},
		{Path: "/etc/x/link", Type: kit.TypeSymlink, Mode: 0o777, UID: 1234, GID: 2345, Link: "key"},
	}}
	to := t.TempDir()
	res, err := kit.Restore(to, k, kit.RestoreOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Owners != (os.Geteuid() == 0) {
		t.Errorf("Owners %v as uid %d", res.Owners, os.Geteuid())
	}
	for _, e := range k.Entries {
		fi, err := os.Lstat(filepath.Join(to, e.Path))
		if err != nil {
			t.Fatal(err)
		}
		uid, gid := ownerOf(fi)
		wantUID, wantGID := os.Geteuid(), os.Getegid()
		if res.Owners {
			wantUID, wantGID = e.UID, e.GID
		}
		if uid != wantUID || gid != wantGID {
			t.Errorf("%s: owner %d:%d, want %d:%d", e.Path, uid, gid, wantUID, wantGID)
		}
		if e.Type != kit.TypeSymlink && fi.Mode().Perm() != e.Mode {
			t.Errorf("%s: mode %v, want %v", e.Path, fi.Mode().Perm(), e.Mode)
		}
	}
	if l, _ := os.Readlink(filepath.Join(to, "etc/x/link")); l != "key" {
		t.Errorf("symlink to %q", l)
	}
}
