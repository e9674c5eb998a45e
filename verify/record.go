package verify

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Layout of a key in etcd's "key" bucket (mvcc revision key): 8 bytes main
// revision big-endian, '_', 8 bytes sub revision big-endian, and for a
// deletion a trailing 't' (tombstone mark).
const (
	revKeyLen       = 8 + 1 + 8
	markedRevKeyLen = revKeyLen + 1
	tombstoneMark   = 't'
)

// revision is an mvcc revision key of the key bucket.
type revision struct {
	main, sub int64
	tombstone bool
}

// parseRevKey decodes a key of the key bucket. etcd panics on the same
// inputs this rejects.
func parseRevKey(k []byte) (revision, error) {
	if len(k) != revKeyLen && len(k) != markedRevKeyLen {
		return revision{}, fmt.Errorf("revision key %x: length %d", k, len(k))
	}
	if k[8] != '_' {
		return revision{}, fmt.Errorf("revision key %x: no '_' separator", k)
	}
	r := revision{
		main:      int64(binary.BigEndian.Uint64(k[:8])),
		sub:       int64(binary.BigEndian.Uint64(k[9:revKeyLen])),
		tombstone: len(k) == markedRevKeyLen && k[revKeyLen] == tombstoneMark,
	}
	if r.main < 0 || r.sub < 0 {
		return revision{}, fmt.Errorf("revision key %x: negative revision", k)
	}
	return r, nil
}

// revKey encodes main revision rev (sub 0) as a key of the key bucket, for
// seeking.
func revKey(rev int64) []byte {
	k := make([]byte, revKeyLen)
	binary.BigEndian.PutUint64(k, uint64(rev))
	k[8] = '_'
	return k
}

// kvFieldType returns the wire type of field num of mvccpb.KeyValue: key
// (1) and value (5) are bytes, create_revision, mod_revision, version and
// lease (2, 3, 4, 6) are varints.
func kvFieldType(num protowire.Number) (protowire.Type, bool) {
	switch num {
	case 1, 5:
		return protowire.BytesType, true
	case 2, 3, 4, 6:
		return protowire.VarintType, true
	}
	return 0, false
}

// kvKey returns the key field of a marshalled mvccpb.KeyValue without
// copying or allocating. Like proto.Unmarshal it keeps the last occurrence
// of the field, skips unknown fields and rejects malformed input and known
// fields of the wrong wire type.
func kvKey(v []byte) ([]byte, error) {
	var key []byte
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		v = v[n:]
		if want, known := kvFieldType(num); known && want != typ {
			return nil, fmt.Errorf("field %d has wire type %d", num, typ)
		}
		if num == 1 {
			b, m := protowire.ConsumeBytes(v)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			key = b
			v = v[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, v)
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		v = v[m:]
	}
	// Without a key field, etcdutl counts the record as the empty key; etcd
	// never writes one.
	return key, nil
}
