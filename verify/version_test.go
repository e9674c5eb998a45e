package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestCompareMemberHashKV: a member of a version whose HashKV rules the
// hasher does not know is "not comparable (etcd X.Y)", never a mismatch
// that fails the backup; known versions compare as CompareHashKV.
func TestCompareMemberHashKV(t *testing.T) {
	st := verify.Status{Revision: 100, CompactRevision: 40, HashKV: 0x1234, HashKVComparable: true}
	tests := []struct {
		name, version string
		hash          uint32
		compact       int64
		want          string // prefix of the verdict
		wantErr       error
	}{
		{name: "3.7 equal", version: "3.7.3", hash: 0x1234, compact: 40, want: "match"},
		{name: "3.6 equal", version: "3.6.16", hash: 0x1234, compact: 40, want: "match"},
		{name: "3.5 equal", version: "3.5.35", hash: 0x1234, compact: 40, want: "match"},
		{name: "3.5 differs", version: "3.5.35", hash: 0x9999, compact: 40, wantErr: verify.ErrHashKVMismatch},
		{name: "3.7 differs", version: "3.7.0", hash: 0x9999, compact: 40, wantErr: verify.ErrHashKVMismatch},
		{name: "v prefix", version: "v3.6.0", hash: 0x9999, compact: 40, wantErr: verify.ErrHashKVMismatch},
		{name: "known, other compaction", version: "3.6.16", hash: 0x9999, compact: 50, want: "not comparable: member compact revision 50"},
		{name: "3.8 differs", version: "3.8.0", hash: 0x9999, compact: 40, want: "not comparable (etcd 3.8): "},
		{name: "3.8 pre-release", version: "3.8.0-alpha.0", hash: 0x9999, compact: 40, want: "not comparable (etcd 3.8): "},
		{name: "3.8 equal", version: "3.8.1", hash: 0x1234, compact: 40, want: "not comparable (etcd 3.8): "},
		{name: "3.4", version: "3.4.33", hash: 0x9999, compact: 40, want: "not comparable (etcd 3.4): "},
		{name: "4.0", version: "4.0.0", hash: 0x9999, compact: 40, want: "not comparable (etcd 4.0): "},
		{name: "empty", version: "", hash: 0x9999, compact: 40, want: `not comparable (etcd version "" unknown): `},
		{name: "garbage", version: "three", hash: 0x9999, compact: 40, want: `not comparable (etcd version "three" unknown): `},
		{name: "leading zero", version: "3.07.0", hash: 0x9999, compact: 40, want: `not comparable (etcd version "3.07.0" unknown): `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.CompareMemberHashKV(st, tt.version, tt.hash, tt.compact)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("CompareMemberHashKV(%q) = %q, %v; want an error wrapping %v", tt.version, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !strings.HasPrefix(got, tt.want) {
				t.Fatalf("CompareMemberHashKV(%q) = %q, %v; want %q...", tt.version, got, err, tt.want)
			}
		})
	}
}

// FuzzHashKVRules: any version string gives a known minor only for a
// version of HashKVVersions, and never panics.
func FuzzHashKVRules(f *testing.F) {
	for _, s := range []string{"3.7.3", "v3.5.1", "3.8.0-alpha.0", "", "3", "3.", ".7", "3.6.x", "99999.1.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		minor, known := verify.HashKVRules(v)
		if known {
			found := false
			for _, k := range verify.HashKVVersions {
				found = found || k == minor
			}
			if !found {
				t.Fatalf("HashKVRules(%q) = %q, known, not in %v", v, minor, verify.HashKVVersions)
			}
		}
		if minor == "" && known {
			t.Fatalf("HashKVRules(%q): known without a minor", v)
		}
	})
}
