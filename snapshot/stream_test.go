package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// streamDBBytes is how much data the stream tests put into etcd: thousands
// of 32 KiB messages, and more than gRPC's largest flow-control window
// (16 MiB), so a canceled stream cannot have been received whole already.
const streamDBBytes = 40 << 20

// putValues writes n values of size bytes so the database grows.
func putValues(t testing.TB, cli *clientv3.Client, n, size int) {
	t.Helper()
	val := strings.Repeat("v", size)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("/stream/%06d", i), val); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
}

// memberClient returns a client of c's first member only, closed at cleanup.
func memberClient(t testing.TB, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cc := c.ClientConfig()
	cc.Endpoints = cc.Endpoints[:1]
	cli, err := clientv3.New(cc)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// clientv3Snapshot reads a whole snapshot with clientv3's SnapshotWithVersion.
func clientv3Snapshot(t testing.TB, ctx context.Context, cli *clientv3.Client) ([]byte, string) {
	t.Helper()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		t.Fatalf("SnapshotWithVersion: %v", err)
	}
	defer resp.Snapshot.Close()
	data, err := io.ReadAll(resp.Snapshot)
	if err != nil {
		t.Fatalf("read clientv3 snapshot: %v", err)
	}
	return data, resp.Version
}

// streamSnapshot reads a whole snapshot with a Stream, each Read into a
// slice of readSize() bytes.
func streamSnapshot(t testing.TB, ctx context.Context, cli *clientv3.Client, readSize func() int) ([]byte, string) {
	t.Helper()
	s, err := OpenStream(ctx, cli)
	if err != nil {
		t.Fatalf("OpenStream: %v", err)
	}
	defer s.Close()
	var out bytes.Buffer
	buf := make([]byte, 1<<20)
	for {
		n, err := s.Read(buf[:readSize()])
		out.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read stream after %d bytes: %v", out.Len(), err)
		}
	}
	return out.Bytes(), s.Version()
}

// checkSnapshot fails unless data is a database followed by its sha256.
func checkSnapshot(t testing.TB, data []byte) {
	t.Helper()
	if len(data) < sha256.Size || len(data)%512 != sha256.Size {
		t.Fatalf("snapshot of %d bytes is not a database plus trailer", len(data))
	}
	sum := sha256.Sum256(data[:len(data)-sha256.Size])
	if !bytes.Equal(sum[:], data[len(data)-sha256.Size:]) {
		t.Fatalf("snapshot sha256 %x does not match its trailer %x", sum, data[len(data)-sha256.Size:])
	}
}

// waitStorageVersion polls until the member reports a storage version in
// the snapshot stream (etcd writes it a few seconds after it starts), so
// that comparing versions compares something.
func waitStorageVersion(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := OpenStream(t.Context(), cli)
		if err != nil {
			t.Fatalf("OpenStream: %v", err)
		}
		v := s.Version()
		_ = s.Close()
		if v != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no storage version in the snapshot stream after a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rawCodec passes messages through as bytes (*[]byte), for the replay
// proxy. Its name is "proto" so that it speaks to etcd and to clients.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// recordSnapshot receives one snapshot stream from cli's member and returns
// its messages exactly as they came over the wire.
func recordSnapshot(t testing.TB, cli *clientv3.Client) [][]byte {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs, err := cli.ActiveConnection().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, snapshotMethod, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	req := []byte{}
	if err := cs.SendMsg(&req); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var msgs [][]byte
	for {
		var m []byte
		err := cs.RecvMsg(&m)
		if err == io.EOF {
			return msgs
		}
		if err != nil {
			t.Fatalf("record snapshot: %v", err)
		}
		msgs = append(msgs, m)
	}
}

// replayClient starts a gRPC server on loopback that answers every
// Maintenance.Snapshot call with msgs, byte for byte (a recording of a real
// member's stream), and returns a clientv3 client of it. Unlike a live
// member, whose every snapshot differs in bbolt's meta pages, it lets two
// clients be compared on the very same stream.
func replayClient(t testing.TB, msgs [][]byte) *clientv3.Client {
	t.Helper()
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		if m, _ := grpc.MethodFromServerStream(ss); m != snapshotMethod {
			return status.Errorf(codes.Unimplemented, "replay serves only %s, not %s", snapshotMethod, m)
		}
		var req []byte
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		for _, m := range msgs {
			if err := ss.SendMsg(&m); err != nil {
				return err
			}
		}
		return nil
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + lis.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.Close()
		srv.Stop()
		wg.Wait()
	})
	return cli
}

// sameDatabase fails unless two snapshots of one member taken one after the
// other hold the same database. They are never byte-identical: each
// snapshot commits a bbolt transaction, which rewrites the two meta pages
// and sometimes a page or two of etcd's own bookkeeping (and so the
// trailer); that transaction may also grow the file by a page. So: the
// same size give or take a page or two, and all but a few pages identical,
// which a lost, repeated or misplaced byte anywhere would break.
func sameDatabase(t testing.TB, got, want []byte) {
	t.Helper()
	const page, maxDiffering = 4096, 8
	if d := len(got) - len(want); d%page != 0 || d > 2*page || d < -2*page {
		t.Fatalf("snapshot of %d bytes, clientv3's has %d", len(got), len(want))
	}
	var differ []int
	for off := 0; off < min(len(got), len(want)); off += page {
		end := min(off+page, len(got), len(want))
		if !bytes.Equal(got[off:end], want[off:end]) {
			differ = append(differ, off/page)
		}
	}
	if len(differ) > maxDiffering {
		t.Fatalf("%d of %d pages differ from clientv3's snapshot, want at most %d (first %v)", len(differ), len(got)/page, maxDiffering, differ[:maxDiffering+1])
	}
}

func TestStream(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := memberClient(t, c)
	putValues(t, cli, streamDBBytes/(100<<10), 100<<10)
	waitStorageVersion(t, cli)

	msgs := recordSnapshot(t, cli)
	replay := replayClient(t, msgs)
	want, wantVersion := clientv3Snapshot(t, t.Context(), replay)
	checkSnapshot(t, want)
	if len(want) < streamDBBytes || len(msgs) < streamDBBytes/(32<<10) {
		t.Fatalf("snapshot has %d bytes in %d messages, want at least %d bytes", len(want), len(msgs), streamDBBytes)
	}
	if wantVersion == "" {
		t.Fatal("clientv3 reports no storage version")
	}

	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name     string
		readSize func() int
	}{
		{name: "1 MiB reads", readSize: func() int { return 1 << 20 }},
		{name: "32 KiB reads", readSize: func() int { return 32 << 10 }},
		{name: "32 KiB + 1 reads", readSize: func() int { return 32<<10 + 1 }},
		{name: "random 1-100 byte reads", readSize: func() int { return 1 + r.IntN(100) }},
		{name: "random 0-70000 byte reads", readSize: func() int { return r.IntN(70000) }},
	}
	for _, tt := range tests {
		t.Run("replayed/"+tt.name, func(t *testing.T) {
			got, gotVersion := streamSnapshot(t, t.Context(), replay, tt.readSize)
			if gotVersion != wantVersion {
				t.Errorf("Version = %q, clientv3 says %q", gotVersion, wantVersion)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("stream delivered %d bytes that differ from clientv3's %d", len(got), len(want))
			}
		})
	}
	t.Run("live member", func(t *testing.T) {
		got, gotVersion := streamSnapshot(t, t.Context(), cli, func() int { return 1 << 20 })
		checkSnapshot(t, got)
		live, liveVersion := clientv3Snapshot(t, t.Context(), cli)
		sameDatabase(t, got, live)
		if gotVersion != liveVersion || gotVersion != wantVersion {
			t.Errorf("Version = %q, clientv3 says %q", gotVersion, liveVersion)
		}
	})

	cancels := []struct {
		name   string
		cancel func(s *Stream, cancel context.CancelFunc)
	}{
		{name: "context canceled", cancel: func(_ *Stream, cancel context.CancelFunc) { cancel() }},
		{name: "closed", cancel: func(s *Stream, _ context.CancelFunc) { _ = s.Close() }},
		{name: "closed concurrently", cancel: func(s *Stream, _ context.CancelFunc) {
			done := make(chan struct{})
			go func() { _ = s.Close(); close(done) }()
			<-done
		}},
	}
	for _, tt := range cancels {
		t.Run("cancel mid-stream/"+tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s, err := OpenStream(ctx, cli)
			if err != nil {
				t.Fatalf("OpenStream: %v", err)
			}
			defer s.Close()
			buf := make([]byte, 64<<10)
			if _, err := io.ReadFull(s, buf); err != nil {
				t.Fatalf("read: %v", err)
			}
			tt.cancel(s, cancel)
			n := int64(len(buf))
			for {
				nr, err := s.Read(buf)
				n += int64(nr)
				if err == nil {
					continue
				}
				if !errors.Is(err, context.Canceled) {
					t.Errorf("read after %d bytes: error %v, want context.Canceled", n, err)
				}
				if n >= int64(len(want)) {
					t.Errorf("read all %d bytes after the cancel", n)
				}
				// The error sticks.
				if _, err2 := s.Read(buf); !errors.Is(err2, context.Canceled) {
					t.Errorf("next read: %v, want context.Canceled", err2)
				}
				return
			}
		})
	}

	t.Run("canceled before open", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := OpenStream(ctx, cli)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("OpenStream: %v, want context.Canceled", err)
		}
	})
}

func TestStreamAuth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true, Auth: true})
	root := memberClient(t, c)
	putValues(t, root, 40, 100<<10)
	const readerPassword = "stream-reader-pass"
	if _, err := root.UserAdd(t.Context(), "streamreader", readerPassword); err != nil {
		t.Fatalf("add user: %v", err)
	}

	t.Run("root", func(t *testing.T) {
		got, gotVersion := streamSnapshot(t, t.Context(), root, func() int { return 1 << 20 })
		checkSnapshot(t, got)
		want, wantVersion := clientv3Snapshot(t, t.Context(), root)
		sameDatabase(t, got, want)
		if gotVersion != wantVersion {
			t.Errorf("Version = %q, clientv3 says %q", gotVersion, wantVersion)
		}
	})

	tests := []struct {
		name     string
		user, pw string
		want     error
	}{
		{name: "user without root role", user: "streamreader", pw: readerPassword, want: rpctypes.ErrPermissionDenied},
		// etcd takes the common name of the client certificate as the user.
		{name: "no credentials", want: rpctypes.ErrUserNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := c.ClientConfig()
			cc.Endpoints = cc.Endpoints[:1]
			cc.Username, cc.Password = tt.user, tt.pw
			cli, err := clientv3.New(cc)
			if err != nil {
				t.Fatalf("new client: %v", err)
			}
			defer cli.Close()
			s, err := OpenStream(t.Context(), cli)
			if err == nil {
				_ = s.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("OpenStream: %v, want %v", err, tt.want)
			}
			// clientv3 reports the same.
			resp, cerr := cli.SnapshotWithVersion(t.Context())
			if cerr == nil {
				_ = resp.Snapshot.Close()
			}
			if got, want := fmt.Sprint(clientv3.ContextError(t.Context(), cerr)), fmt.Sprint(err); got != want {
				t.Errorf("clientv3 says %q, OpenStream %q", got, want)
			}
		})
	}
}

func TestRetryableAuth(t *testing.T) {
	tests := []struct {
		name string
		cli  *clientv3.Client
		err  error
		want bool
	}{
		{name: "stale token", cli: &clientv3.Client{Username: "u", Password: "p"}, err: rpctypes.ErrInvalidAuthToken, want: true},
		{name: "old auth revision", cli: &clientv3.Client{}, err: rpctypes.ErrAuthOldRevision, want: true},
		{name: "token lost with credentials", cli: &clientv3.Client{Username: "u", Password: "p"}, err: rpctypes.ErrUserEmpty, want: true},
		{name: "no credentials", cli: &clientv3.Client{}, err: rpctypes.ErrUserEmpty, want: false},
		{name: "fixed token", cli: &clientv3.Client{Token: "t"}, err: rpctypes.ErrInvalidAuthToken, want: false},
		{name: "permission denied", cli: &clientv3.Client{Username: "u", Password: "p"}, err: rpctypes.ErrPermissionDenied, want: false},
		{name: "wrapped", cli: &clientv3.Client{}, err: fmt.Errorf("open: %w", rpctypes.ErrInvalidAuthToken), want: true},
		{name: "canceled", cli: &clientv3.Client{}, err: context.Canceled, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryableAuth(tt.cli, tt.err); got != tt.want {
				t.Errorf("retryableAuth(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// marshalResponse marshals a SnapshotResponse as etcd sends it.
func marshalResponse(t testing.TB, r *pb.SnapshotResponse) []byte {
	t.Helper()
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// responseSeeds are real SnapshotResponse messages, as etcd sends them.
func responseSeeds(t testing.TB) [][]byte {
	blob := make([]byte, 32<<10)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	sum := sha256.Sum256(blob)
	return [][]byte{
		marshalResponse(t, &pb.SnapshotResponse{RemainingBytes: 1 << 20, Blob: blob, Version: "3.7.0"}),
		marshalResponse(t, &pb.SnapshotResponse{RemainingBytes: 0, Blob: sum[:], Version: "3.7.0"}),
		marshalResponse(t, &pb.SnapshotResponse{Blob: blob[:100]}),
		marshalResponse(t, &pb.SnapshotResponse{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 3, RaftTerm: 4}, RemainingBytes: 5, Blob: blob[:10], Version: "3.6.0"}),
		marshalResponse(t, &pb.SnapshotResponse{}),
	}
}

// split cuts b into buffers at the given cut points (taken modulo len(b)+1).
func split(b []byte, cuts []int) mem.BufferSlice {
	var out mem.BufferSlice
	prev := 0
	for _, c := range cuts {
		c = c % (len(b) + 1)
		if c < prev {
			continue
		}
		out = append(out, mem.SliceBuffer(b[prev:c]))
		prev = c
	}
	return append(out, mem.SliceBuffer(b[prev:]))
}

// decodeSplit decodes b split at cuts with a destination of dstLen bytes,
// and returns the blob (destination then spill).
func decodeSplit(b []byte, cuts []int, dstLen int) (blob []byte, m *snapshotMessage, err error) {
	m = &snapshotMessage{dst: make([]byte, dstLen)}
	err = snapshotCodec{}.Unmarshal(split(b, cuts), m)
	blob = append(append([]byte{}, m.dst[:m.n]...), m.spill[:m.nspill]...)
	return blob, m, err
}

func TestSnapshotCodec(t *testing.T) {
	seeds := responseSeeds(t)
	r := rand.New(rand.NewPCG(3, 4))
	for i, b := range seeds {
		var want pb.SnapshotResponse
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		for _, dstLen := range []int{0, 1, 5, len(want.Blob) - 1, len(want.Blob), len(want.Blob) + 10, 1 << 20} {
			dstLen = max(dstLen, 0)
			for j := range 20 {
				cuts := make([]int, j%6)
				for k := range cuts {
					cuts[k] = r.IntN(len(b) + 1)
				}
				if j == 1 { // every byte its own buffer
					cuts = make([]int, len(b))
					for k := range cuts {
						cuts[k] = k
					}
				}
				t.Run(fmt.Sprintf("seed %d/dst %d/split %d", i, dstLen, j), func(t *testing.T) {
					blob, m, err := decodeSplit(b, cuts, dstLen)
					if err != nil {
						t.Fatalf("Unmarshal: %v", err)
					}
					if !bytes.Equal(blob, want.Blob) {
						t.Errorf("blob of %d bytes, want %d", len(blob), len(want.Blob))
					}
					if m.n != min(dstLen, len(want.Blob)) {
						t.Errorf("%d bytes in dst, want %d", m.n, min(dstLen, len(want.Blob)))
					}
					if string(m.version) != want.Version || m.remaining != want.RemainingBytes {
						t.Errorf("version %q remaining %d, want %q %d", m.version, m.remaining, want.Version, want.RemainingBytes)
					}
				})
			}
		}
	}

	malformed := []struct {
		name string
		b    []byte
	}{
		{name: "truncated blob", b: seeds[0][:len(seeds[0])-1]},
		{name: "truncated tag", b: []byte{0x80}},
		{name: "field number 0", b: []byte{0x00, 0x00}},
		{name: "end group at top", b: protowire.AppendTag(nil, 9, protowire.EndGroupType)},
		{name: "unterminated group", b: protowire.AppendTag(nil, 9, protowire.StartGroupType)},
		{name: "mismatched group", b: append(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 8, protowire.EndGroupType)...)},
		{name: "reserved wire type", b: []byte{0x0e}},
		{name: "varint overflow", b: []byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
		{name: "version not utf-8", b: []byte{0x22, 0x01, 0xff}},
		{name: "header field crosses header end", b: []byte{0x0a, 0x01, 0x08, 0x01}},
		{name: "blob length beyond message", b: []byte{0x1a, 0x05, 0x01}},
	}
	for _, tt := range malformed {
		t.Run("malformed/"+tt.name, func(t *testing.T) {
			if err := proto.Unmarshal(tt.b, &pb.SnapshotResponse{}); err == nil {
				t.Fatalf("proto.Unmarshal accepts %x; the case is wrong", tt.b)
			}
			if _, _, err := decodeSplit(tt.b, []int{1, 2}, 3); err == nil {
				t.Errorf("Unmarshal accepts %x", tt.b)
			}
		})
	}

	t.Run("unknown fields are skipped", func(t *testing.T) {
		b := marshalResponse(t, &pb.SnapshotResponse{Blob: []byte("abc"), Version: "v"})
		b = protowire.AppendTag(b, 3, protowire.VarintType) // blob with another wire type
		b = protowire.AppendVarint(b, 7)
		b = protowire.AppendTag(b, 20, protowire.StartGroupType)
		b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, 1)
		b = protowire.AppendTag(b, 20, protowire.EndGroupType)
		b = protowire.AppendTag(b, 21, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, 1)
		b = protowire.AppendTag(b, 22, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("xyz"))
		blob, m, err := decodeSplit(b, []int{3, 9}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(blob) + "/" + string(m.version); got != "abc/v" {
			t.Errorf("got %q, want abc/v", got)
		}
	})

	t.Run("no allocations", func(t *testing.T) {
		b := seeds[0]
		data := split(b, []int{9, 16393})
		m := &snapshotMessage{dst: make([]byte, 1<<20)}
		allocs := testing.AllocsPerRun(100, func() {
			if err := (snapshotCodec{}).Unmarshal(data, m); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v allocations per message, want 0", allocs)
		}
		// With a small destination the spill buffer is reused.
		m.dst = m.dst[:10]
		allocs = testing.AllocsPerRun(100, func() {
			if err := (snapshotCodec{}).Unmarshal(data, m); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v allocations per spilled message, want 0", allocs)
		}
	})
}

// FuzzSnapshotCodec checks the codec against proto.Unmarshal: on any input,
// split into buffers anywhere and decoded into a destination of any size,
// it must accept exactly what proto.Unmarshal accepts, yield the same blob,
// version and remaining bytes, and never panic.
func FuzzSnapshotCodec(f *testing.F) {
	for i, b := range responseSeeds(f) {
		f.Add(b, uint16(i*3), uint16(i*1000+1), uint16(i*17))
		f.Add(b[:len(b)/2], uint16(1), uint16(2), uint16(3))
	}
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01, 0x1a, 0x01, 0x7f}, uint16(1), uint16(3), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, cut1, cut2, dstLen uint16) {
		var want pb.SnapshotResponse
		werr := proto.Unmarshal(b, &want)
		blob, m, err := decodeSplit(b, []int{int(cut1), int(cut2)}, int(dstLen))
		if (err == nil) != (werr == nil) {
			t.Fatalf("Unmarshal error %v, proto.Unmarshal error %v, input %x", err, werr, b)
		}
		if err != nil {
			return
		}
		got := []any{blob, string(m.version), m.remaining}
		exp := []any{want.Blob, want.Version, want.RemainingBytes}
		if len(want.Blob) == 0 {
			exp[0] = blob[:0]
		}
		if diff := cmp.Diff(exp, got); diff != "" {
			t.Errorf("decoded differently from proto.Unmarshal (-proto +codec):\n%s", diff)
		}
	})
}

// BenchmarkStream reads the snapshot of the same member (about 80 MB, 20k
// Kubernetes-like keys, as BenchmarkTake) into a sink that drops it, through
// a Stream and through clientv3's SnapshotWithVersion, both with 1 MiB reads
// as save does. The embedded etcd server runs in the same process, so its
// work counts in both: cpu-ms/op (user+sys time of the process per
// snapshot) is the server's share plus the client's, and the difference
// between the variants is the client's saving.
func BenchmarkStream(b *testing.B) {
	c := etcdtest.Start(b, etcdtest.Options{Members: 1})
	cli := memberClient(b, c)
	if _, err := seed.Kubernetes(context.Background(), cli, seed.Options{Objects: 20000, Seed: 1}); err != nil {
		b.Fatalf("seed: %v", err)
	}
	variants := []struct {
		name string
		open func(ctx context.Context) (io.ReadCloser, error)
	}{
		{name: "stream", open: func(ctx context.Context) (io.ReadCloser, error) {
			return OpenStream(ctx, cli)
		}},
		{name: "clientv3", open: func(ctx context.Context) (io.ReadCloser, error) {
			resp, err := cli.SnapshotWithVersion(ctx)
			if err != nil {
				return nil, err
			}
			return resp.Snapshot, nil
		}},
	}
	buf := make([]byte, copyBufferSize)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int64
			cpu0 := processCPU(b)
			for b.Loop() {
				rc, err := v.open(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				size = 0
				for {
					n, err := rc.Read(buf)
					size += int64(n)
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				_ = rc.Close()
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.SetBytes(size)
		})
	}
}

// processCPU returns the user and system CPU time the process used so far.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
