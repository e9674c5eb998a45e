package verify_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/verify"
)

func addFixtureSeeds(f *testing.F, names ...string) {
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatalf("seed %s: %v", name, err)
		}
		f.Add(b)
	}
}

// FuzzTrailerReader: any input either fails or has a trailer that is the
// sha256 of what precedes it.
func FuzzTrailerReader(f *testing.F) {
	addFixtureSeeds(f, "small.db", "truncated.db", "empty.db")
	f.Add(bytes.Repeat([]byte{0}, 32))
	f.Fuzz(func(t *testing.T, in []byte) {
		digest, size, err := verify.TrailerReader(t.Context(), bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, verify.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		sum := sha256.Sum256(in[:size])
		if size != int64(len(in))-32 || digest != hex.EncodeToString(sum[:]) || !bytes.Equal(sum[:], in[size:]) {
			t.Fatalf("accepted %d bytes: digest %s size %d", len(in), digest, size)
		}
	})
}

// FuzzFile: File on damaged snapshots returns a status or an error
// wrapping ErrCorrupt, never panics, crashes or changes the file, and a file
// it accepts is one bbolt reads safely, with the status etcdutl reports.
func FuzzFile(f *testing.F) {
	addFixtureSeeds(f, "small.db", "notrailer.db", "flipped-page.db", "truncated.db")
	f.Fuzz(func(t *testing.T, in []byte) {
		path := filepath.Join(t.TempDir(), "snapshot.db")
		if err := os.WriteFile(path, in, 0o600); err != nil {
			t.Fatal(err)
		}
		rev, rerr := verify.Revision(t.Context(), path)
		if rerr != nil && !errors.Is(rerr, verify.ErrCorrupt) {
			t.Fatalf("Revision: error %v does not wrap ErrCorrupt", rerr)
		}
		if rerr != nil && strings.Contains(rerr.Error(), "unexpected failure") {
			t.Fatalf("Revision panicked: %v", rerr)
		}
		st, err := verify.File(t.Context(), path)
		// Walking the key bucket in two halves or in one piece: one verdict.
		for _, minPages := range []uint64{0, 1} {
			sst, serr := verify.FileSplit(t.Context(), path, minPages)
			if (serr == nil) != (err == nil) || serr == nil && sst != st {
				t.Fatalf("FileSplit(%d) = %+v, %v; File = %+v, %v", minPages, sst, serr, st, err)
			}
			if serr != nil && !errors.Is(serr, verify.ErrCorrupt) {
				t.Fatalf("FileSplit(%d): error %v does not wrap ErrCorrupt", minPages, serr)
			}
		}
		if err == nil && (rerr != nil || rev != st.Revision) {
			t.Fatalf("Revision = %d, %v on a file File accepts with revision %d", rev, rerr, st.Revision)
		}
		if err != nil && !errors.Is(err, verify.ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
		if err != nil && strings.Contains(err.Error(), "unexpected failure") {
			t.Fatalf("File panicked: %v", err)
		}
		if err == nil {
			// Only now is bbolt safe to run on the file.
			es, err := snapshot.NewV3(zap.NewNop()).Status(path)
			if err != nil {
				t.Fatalf("File accepts a file etcdutl rejects: %v", err)
			}
			got := asEtcdutl(st, es.Revision)
			if diff := cmp.Diff(got, es); diff != "" {
				t.Fatalf("File disagrees with etcdutl (-File +etcdutl):\n%s", diff)
			}
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(after, in) {
			t.Fatal("File changed the file")
		}
	})
}

// FuzzParseKeyValue: what ParseKeyValue accepts, proto.Unmarshal accepts
// into an mvccpb.KeyValue with the same fields; what it refuses,
// proto.Unmarshal refuses too, except a known field of another wire type
// (proto.Unmarshal keeps it as an unknown field, etcd 3.5's decoder
// refused it).
func FuzzParseKeyValue(f *testing.F) {
	for _, kv := range []*mvccpb.KeyValue{
		{},
		{Key: []byte("/registry/pods/default/p"), Value: []byte("v"), CreateRevision: 3, ModRevision: 9, Version: 4, Lease: 7},
		{Key: []byte("k"), Lease: -1, CreateRevision: 1 << 40},
	} {
		b, err := proto.Marshal(kv)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x01})       // truncated key
	f.Add([]byte{0x10, 0x80})       // truncated varint
	f.Add([]byte{0x0d, 0, 0, 0, 0}) // key with a fixed32 wire type
	f.Add([]byte{0x3a, 0x01, 'x'})  // unknown field 7
	f.Fuzz(func(t *testing.T, b []byte) {
		var want mvccpb.KeyValue
		werr := proto.Unmarshal(b, &want)
		var got verify.KeyValue
		gerr := verify.ParseKeyValue(b, &got)
		if gerr != nil {
			if werr == nil && !strings.Contains(gerr.Error(), "has wire type") {
				t.Fatalf("ParseKeyValue error %v, proto.Unmarshal accepts the record", gerr)
			}
			return
		}
		if werr != nil {
			t.Fatalf("ParseKeyValue accepts what proto.Unmarshal refuses (%v)", werr)
		}
		if !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) || got.CreateRevision != want.CreateRevision ||
			got.ModRevision != want.ModRevision || got.Version != want.Version || got.Lease != want.Lease {
			t.Fatalf("ParseKeyValue = %+v, proto.Unmarshal = %v", got, &want)
		}
	})
}
