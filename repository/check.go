package repository

import (
	"context"
	"fmt"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// CheckFile checks a fetched raw snapshot read-only with verify.File and
// compares what it finds with backup m's manifest: revision, compact
// revision, key count, db size, bolt hash and HashKV. A difference wraps
// verify.ErrManifestMismatch; damage wraps verify.ErrCorrupt.
func CheckFile(ctx context.Context, path string, m *Manifest) (verify.Status, error) {
	return CheckFileRecords(ctx, path, m, nil)
}

// CheckFileRecords is CheckFile handing the key bucket's records to rec
// as they are checked (verify.FileRecords); rec nil is CheckFile.
func CheckFileRecords(ctx context.Context, path string, m *Manifest, rec verify.Records) (verify.Status, error) {
	var st verify.Status
	var err error
	if rec == nil {
		st, err = verify.File(ctx, path)
	} else {
		st, err = verify.FileRecords(ctx, path, rec)
	}
	if err != nil {
		return st, err
	}
	type check struct {
		name      string
		got, want any
	}
	for _, c := range []check{
		{"revision", st.Revision, m.Revision},
		{"compact revision", st.CompactRevision, m.CompactRevision},
		{"total keys", st.TotalKeys, m.TotalKeys},
		{"db size", st.Size, m.DBSize},
		{"bolt hash", st.BoltHash, m.BoltHash},
		{"hashkv", st.HashKV, m.HashKV},
	} {
		if c.got != c.want {
			return st, fmt.Errorf("%w: %s is %v, manifest says %v", verify.ErrManifestMismatch, c.name, c.got, c.want)
		}
	}
	return st, nil
}
