package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ErrManifestMismatch is wrapped when a backup's content disagrees with
// what its manifest recorded.
var ErrManifestMismatch = errors.New("backup does not match its manifest")

// Backup checks a stored backup end to end: it reads the object back
// (size and sha256 against the manifest), decrypts and decompresses it into
// a temporary file in spoolDir, checks etcd's trailer, runs File and
// compares revision, key count, bolt hash, db size and HashKV with the
// manifest. The temporary file is always removed.
func Backup(ctx context.Context, b *uploader.Backups, m *uploader.Manifest, ids []age.Identity, spoolDir string) (Status, error) {
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return Status{}, fmt.Errorf("spool directory %s: %w", spoolDir, err)
	}
	f, err := os.CreateTemp(spoolDir, "lifeboat-verify-"+m.ID+"-*.db")
	if err != nil {
		return Status{}, fmt.Errorf("spool file in %s: %w", spoolDir, err)
	}
	path := f.Name()
	defer os.Remove(path)
	rc, err := b.Open(ctx, m, ids)
	if err != nil {
		f.Close()
		return Status{}, err
	}
	_, err = io.CopyBuffer(f, rc, make([]byte, 1<<20))
	rc.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Status{}, fmt.Errorf("read backup %s: %w", m.ID, err)
	}
	digest, err := Trailer(ctx, path)
	if err != nil {
		return Status{}, err
	}
	if digest != m.SnapshotSHA256 {
		return Status{}, fmt.Errorf("%w: snapshot sha256 %s, manifest says %s", ErrManifestMismatch, digest, m.SnapshotSHA256)
	}
	st, err := File(ctx, path)
	if err != nil {
		return Status{}, err
	}
	type check struct {
		name      string
		got, want any
	}
	for _, c := range []check{
		{"revision", st.Revision, m.Revision},
		{"total keys", st.TotalKeys, m.TotalKeys},
		{"bolt hash", st.BoltHash, m.BoltHash},
		{"db size", st.Size, m.DBSize},
		{"compact revision", st.CompactRevision, m.CompactRevision},
		{"hashkv", st.HashKV, m.HashKV},
	} {
		if c.got != c.want {
			return st, fmt.Errorf("%w: %s is %v, manifest says %v", ErrManifestMismatch, c.name, c.got, c.want)
		}
	}
	return st, nil
}
