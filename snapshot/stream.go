package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// snapshotMethod is the full gRPC method name of etcd's snapshot stream.
const snapshotMethod = "/etcdserverpb.Maintenance/Snapshot"

// maxMessageSize bounds one message of the snapshot stream. etcd sends
// 32 KiB of blob per message; the bound keeps a misbehaving server from
// making gRPC buffer a huge message (clientv3 allows 2 GiB).
const maxMessageSize = 16 << 20

// openAttempts is how often OpenStream opens the stream when the first
// message is refused for a stale auth token (see retryableAuth).
const openAttempts = 3

// Stream is etcd's Maintenance.Snapshot stream read as plain bytes: the
// concatenated blobs of all messages, which is the database followed by
// etcd's 32-byte sha256 trailer, exactly what clientv3's
// SnapshotWithVersion delivers.
//
// Unlike SnapshotWithVersion it copies each blob once, from gRPC's receive
// buffers straight into the slice given to Read, without materializing
// the message, without a goroutine and pipe, and without allocating per
// message (gRPC's transport still allocates a few small objects per
// message). Memory stays constant: a spill buffer of at most one message's
// blob holds what did not fit in a short Read. A Stream is not safe for
// concurrent use, except that Close may be called at any time from any
// goroutine (e.g. to unblock a Read).
type Stream struct {
	cs grpc.ClientStream
	// ctx is the stream's context, kept only to tell a cancellation (by
	// Close or the caller) from a server's Canceled status, as clientv3
	// does. gRPC's own cs.Context() cannot tell: gRPC cancels it whenever
	// the stream ends.
	ctx     context.Context
	cancel  context.CancelFunc
	version string
	msg     snapshotMessage
	pending []byte // blob bytes received but not yet returned by Read
	err     error  // sticky error of the stream (io.EOF at the end)
}

// OpenStream opens the snapshot stream on cli's connection, with the
// client's dial options (TLS, the auth token, its interceptors), and waits
// for the first message, so that a member that refuses the snapshot
// (permissions, a learner, a dead connection) fails here rather than in the
// first Read. ctx bounds the whole stream. The caller must Close the Stream.
//
// Errors are converted as clientv3 does (clientv3.ContextError): etcd's
// errors become rpctypes errors, and a canceled or expired stream returns
// the context's error.
func OpenStream(ctx context.Context, cli *clientv3.Client) (*Stream, error) {
	var err error
	for range openAttempts {
		var s *Stream
		s, err = openStream(ctx, cli)
		if err == nil {
			return s, nil
		}
		if !retryableAuth(cli, err) || ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// retryableAuth reports whether err refused the stream for a token that a
// new stream may fix: opening a stream makes the client fetch a new token
// (clientv3's stream interceptor calls getToken). It mirrors clientv3's
// shouldRefreshToken, which SnapshotWithVersion's retrying stream applies.
func retryableAuth(cli *clientv3.Client, err error) bool {
	if cli.Token != "" {
		return false // a fixed token: asking again changes nothing
	}
	switch {
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return cli.Username != "" && cli.Password != ""
	case errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrAuthOldRevision):
		return true
	}
	return false
}

func openStream(ctx context.Context, cli *clientv3.Client) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	desc := &grpc.StreamDesc{StreamName: "Snapshot", ServerStreams: true}
	cs, err := cli.ActiveConnection().NewStream(ctx, desc, snapshotMethod,
		grpc.ForceCodecV2(snapshotCodec{}),
		grpc.WaitForReady(true), // as clientv3's default call options
		grpc.MaxCallRecvMsgSize(maxMessageSize))
	if err == nil {
		err = cs.SendMsg(&pb.SnapshotRequest{})
	}
	if err == nil {
		err = cs.CloseSend()
	}
	if err != nil {
		err = clientv3.ContextError(ctx, err)
		cancel()
		return nil, err
	}
	s := &Stream{cs: cs, ctx: ctx, cancel: cancel}
	// The first message goes to the spill buffer: it carries the version,
	// and a refusal shows here.
	if err := s.recv(nil); err != nil {
		cancel()
		if err == io.EOF {
			return nil, fmt.Errorf("snapshot stream ended before the first message: %w", io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	s.version = string(s.msg.version)
	return s, nil
}

// Version returns the storage version etcd reported in the first message
// (empty before etcd v3.6, and until a new member has written it).
func (s *Stream) Version() string { return s.version }

// Read reads the next snapshot bytes into p. It returns io.EOF after the
// last message (whose blob is the sha256 trailer) and the stream's error,
// converted as OpenStream says, if it fails.
func (s *Stream) Read(p []byte) (int, error) {
	// gRPC goes on delivering what it buffered (up to its flow-control
	// window, megabytes) after a cancellation: stop at once instead.
	if s.err == nil && s.ctx.Err() != nil {
		s.err = s.ctx.Err()
	}
	if s.err != nil && s.err != io.EOF {
		return 0, s.err
	}
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		return n, nil
	}
	if s.err != nil {
		return 0, s.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if err := s.recv(p); err != nil {
			return 0, err
		}
		if s.msg.n > 0 || len(s.pending) > 0 {
			return s.msg.n, nil
		}
		// A message with an empty blob: wait for the next.
	}
}

// recv receives one message, its blob into dst and s.pending.
func (s *Stream) recv(dst []byte) error {
	s.msg.dst = dst
	err := s.cs.RecvMsg(&s.msg)
	s.msg.dst = nil // keep no reference to the caller's buffer
	if err != nil {
		s.msg.n = 0
		if err != io.EOF {
			err = clientv3.ContextError(s.ctx, err)
		}
		s.err = err
		return err
	}
	s.pending = s.msg.spill[:s.msg.nspill]
	return nil
}

// Close ends the stream by canceling its context, which also unblocks a
// pending Read. It is safe to call concurrently with Read and more than
// once, and always returns nil.
func (s *Stream) Close() error {
	s.cancel()
	return nil
}

// snapshotMessage is what snapshotCodec decodes a SnapshotResponse into.
// dst is set by the receiver before each message.
type snapshotMessage struct {
	dst       []byte // where the blob goes first
	n         int    // blob bytes written to dst
	spill     []byte // reused; blob bytes that did not fit in dst
	nspill    int    // blob bytes in spill
	remaining uint64 // remaining_bytes
	version   []byte // reused; the version field
	w         wireReader
}

// snapshotCodec is a gRPC codec for the snapshot stream: it marshals the
// (empty) SnapshotRequest and decodes SnapshotResponse messages into a
// *snapshotMessage without materializing them. Its name is "proto", so the
// content type on the wire stays application/grpc+proto.
type snapshotCodec struct{}

func (snapshotCodec) Name() string { return "proto" }

// Marshal encodes the request. SnapshotRequest has no fields: its wire
// form is empty.
func (snapshotCodec) Marshal(v any) (mem.BufferSlice, error) {
	if _, ok := v.(*pb.SnapshotRequest); !ok {
		return nil, fmt.Errorf("snapshot codec: cannot marshal %T", v)
	}
	return nil, nil
}

// Unmarshal decodes one SnapshotResponse. gRPC frees data when it returns,
// so nothing may keep a reference to it.
func (snapshotCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*snapshotMessage)
	if !ok {
		return fmt.Errorf("snapshot codec: cannot unmarshal into %T", v)
	}
	m.w = wireReader{bufs: data, left: data.Len()}
	err := m.decode()
	m.w = wireReader{}
	return err
}

// Field numbers of etcdserverpb.SnapshotResponse.
const (
	fieldHeader    = 1 // ResponseHeader
	fieldRemaining = 2 // uint64 remaining_bytes
	fieldBlob      = 3 // bytes blob
	fieldVersion   = 4 // string version
)

// maxVarintLen is the longest varint encoding (of a uint64).
const maxVarintLen = 10

// recursionLimit is protobuf's default nesting limit (groups in unknown
// fields, nested messages).
const recursionLimit = 10000

var (
	errTruncated  = errors.New("snapshot response: truncated field")
	errFieldNum   = errors.New("snapshot response: invalid field number")
	errEndGroup   = errors.New("snapshot response: mismatched end group")
	errWireType   = errors.New("snapshot response: reserved wire type")
	errTooDeep    = errors.New("snapshot response: nested too deep")
	errVersionUTF = errors.New("snapshot response: version is not valid UTF-8")
)

// decode parses the message in m.w. It accepts and rejects exactly what
// proto.Unmarshal does for a SnapshotResponse (proto3 semantics: the last
// occurrence of a scalar field wins, known fields with another wire type are
// unknown fields, unknown fields are skipped, the version must be UTF-8).
func (m *snapshotMessage) decode() error {
	m.n, m.nspill, m.remaining = 0, 0, 0
	m.version = m.version[:0]
	w := &m.w
	for w.left > 0 {
		num, typ, err := w.tag(0, true)
		if err != nil {
			return err
		}
		switch {
		case num == fieldHeader && typ == protowire.BytesType:
			l, err := w.length(0)
			if err != nil {
				return err
			}
			// Not needed (etcd leaves it empty), but it must be well-formed.
			if err := w.skipMessage(w.left-l, recursionLimit-1); err != nil {
				return err
			}
		case num == fieldRemaining && typ == protowire.VarintType:
			if m.remaining, err = w.varint(0); err != nil {
				return err
			}
		case num == fieldBlob && typ == protowire.BytesType:
			l, err := w.length(0)
			if err != nil {
				return err
			}
			m.blob(l)
		case num == fieldVersion && typ == protowire.BytesType:
			l, err := w.length(0)
			if err != nil {
				return err
			}
			if cap(m.version) < l {
				m.version = make([]byte, l)
			}
			m.version = m.version[:l]
			w.copyTo(m.version)
			if !utf8.Valid(m.version) {
				return errVersionUTF
			}
		default:
			if err := w.skipValue(0, num, typ, recursionLimit); err != nil {
				return err
			}
		}
	}
	return nil
}

// blob copies the next l bytes, whose presence the caller checked, to dst
// and the rest to spill. A repeated blob field replaces the earlier one.
func (m *snapshotMessage) blob(l int) {
	m.n = min(l, len(m.dst))
	m.w.copyTo(m.dst[:m.n])
	m.nspill = l - m.n
	if cap(m.spill) < m.nspill {
		m.spill = make([]byte, m.nspill)
	}
	m.w.copyTo(m.spill[:m.nspill])
}

// wireReader reads protobuf wire format across the buffers of a
// mem.BufferSlice. Positions are counted by left, the bytes not yet read;
// a (sub)message ends where left reaches its end value, and no read may
// cross it.
type wireReader struct {
	bufs mem.BufferSlice
	next int    // index of the next buffer to load
	cur  []byte // unread part of the current buffer
	left int    // unread bytes in all buffers, cur included
}

// load makes cur non-empty if any bytes are left.
func (w *wireReader) load() {
	for len(w.cur) == 0 && w.next < len(w.bufs) {
		w.cur = w.bufs[w.next].ReadOnlyData()
		w.next++
	}
}

// skip advances n bytes; the caller checked that they are there.
func (w *wireReader) skip(n int) {
	for n > 0 {
		w.load()
		k := min(n, len(w.cur))
		w.cur = w.cur[k:]
		w.left -= k
		n -= k
	}
}

// copyTo fills p from the next bytes; the caller checked that they are there.
func (w *wireReader) copyTo(p []byte) {
	for len(p) > 0 {
		w.load()
		k := copy(p, w.cur)
		w.cur = w.cur[k:]
		w.left -= k
		p = p[k:]
	}
}

// varint reads a varint that must end before end.
func (w *wireReader) varint(end int) (uint64, error) {
	avail := w.left - end
	w.load()
	c := w.cur
	if len(c) > avail {
		c = c[:avail]
	}
	if len(c) < maxVarintLen && len(c) < avail && (len(c) == 0 || c[len(c)-1] >= 0x80) {
		// The varint may go on in the next buffer: gather it.
		var tmp [maxVarintLen]byte
		k := copy(tmp[:], c)
		for i := w.next; i < len(w.bufs) && k < len(tmp) && k < avail; i++ {
			k += copy(tmp[k:min(len(tmp), avail)], w.bufs[i].ReadOnlyData())
		}
		c = tmp[:k]
		v, n := protowire.ConsumeVarint(c)
		if n < 0 {
			return 0, fmt.Errorf("snapshot response: %w", protowire.ParseError(n))
		}
		w.skip(n)
		return v, nil
	}
	v, n := protowire.ConsumeVarint(c)
	if n < 0 {
		return 0, fmt.Errorf("snapshot response: %w", protowire.ParseError(n))
	}
	w.cur = w.cur[n:]
	w.left -= n
	return v, nil
}

// tag reads a field's tag. At message level (the message's own fields)
// field numbers must be valid as protobuf's decoder checks them; inside
// groups it is as lenient as protowire.ConsumeTag.
func (w *wireReader) tag(end int, messageLevel bool) (protowire.Number, protowire.Type, error) {
	v, err := w.varint(end)
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || messageLevel && num > protowire.MaxValidNumber {
		return 0, 0, errFieldNum
	}
	return num, typ, nil
}

// length reads the length of a length-delimited field and checks that the
// field ends before end.
func (w *wireReader) length(end int) (int, error) {
	v, err := w.varint(end)
	if err != nil {
		return 0, err
	}
	if v > uint64(w.left-end) {
		return 0, errTruncated
	}
	return int(v), nil
}

// skipMessage checks and skips the fields of an embedded message that ends
// at end, as protobuf's decoder would parse a message whose fields are all
// unknown or scalar (ResponseHeader has only varints).
func (w *wireReader) skipMessage(end, depth int) error {
	if depth < 0 {
		return errTooDeep
	}
	for w.left > end {
		num, typ, err := w.tag(end, true)
		if err != nil {
			return err
		}
		if err := w.skipValue(end, num, typ, recursionLimit); err != nil {
			return err
		}
	}
	return nil
}

// skipValue skips the value of a field with tag (num, typ) within end, as
// protowire.ConsumeFieldValue does.
func (w *wireReader) skipValue(end int, num protowire.Number, typ protowire.Type, depth int) error {
	switch typ {
	case protowire.VarintType:
		_, err := w.varint(end)
		return err
	case protowire.Fixed32Type, protowire.Fixed64Type:
		n := 4
		if typ == protowire.Fixed64Type {
			n = 8
		}
		if w.left-end < n {
			return errTruncated
		}
		w.skip(n)
		return nil
	case protowire.BytesType:
		l, err := w.length(end)
		if err != nil {
			return err
		}
		w.skip(l)
		return nil
	case protowire.StartGroupType:
		if depth < 0 {
			return errTooDeep
		}
		for {
			num2, typ2, err := w.tag(end, false)
			if err != nil {
				return err
			}
			if typ2 == protowire.EndGroupType {
				if num2 != num {
					return errEndGroup
				}
				return nil
			}
			if err := w.skipValue(end, num2, typ2, depth-1); err != nil {
				return err
			}
		}
	case protowire.EndGroupType:
		return errEndGroup
	default:
		return errWireType
	}
}
