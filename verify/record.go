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

// KeyValue is a record of etcd's key bucket (a marshalled mvccpb.KeyValue)
// as ParseKeyValue reads it: Key and Value point into the record's bytes.
type KeyValue struct {
	Key, Value                                  []byte
	CreateRevision, ModRevision, Version, Lease int64
}

// ParseKeyValue decodes a marshalled mvccpb.KeyValue into kv without
// copying or allocating. Like proto.Unmarshal it keeps the last occurrence
// of a field, skips unknown fields and rejects malformed input; it also
// rejects a known field of another wire type, which proto.Unmarshal keeps
// as an unknown field (etcd 3.5's generated decoder refused it; etcd never
// writes one).
func ParseKeyValue(v []byte, kv *KeyValue) error {
	*kv = KeyValue{}
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return fmt.Errorf("field number %d out of range", num)
		}
		v = v[n:]
		want, known := kvFieldType(num)
		if !known {
			m := protowire.ConsumeFieldValue(num, typ, v)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v = v[m:]
			continue
		}
		if want != typ {
			return fmt.Errorf("field %d has wire type %d", num, typ)
		}
		if typ == protowire.BytesType {
			b, m := protowire.ConsumeBytes(v)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if num == 1 {
				kv.Key = b
			} else {
				kv.Value = b
			}
			v = v[m:]
			continue
		}
		x, m := protowire.ConsumeVarint(v)
		if m < 0 {
			return protowire.ParseError(m)
		}
		switch num {
		case 2:
			kv.CreateRevision = int64(x)
		case 3:
			kv.ModRevision = int64(x)
		case 4:
			kv.Version = int64(x)
		case 6:
			kv.Lease = int64(x)
		}
		v = v[m:]
	}
	return nil
}

// kvKey returns the key field of a marshalled mvccpb.KeyValue (see
// ParseKeyValue). Without a key field, etcdutl counts the record as the
// empty key; etcd never writes one.
func kvKey(v []byte) ([]byte, error) {
	var kv KeyValue
	if err := ParseKeyValue(v, &kv); err != nil {
		return nil, err
	}
	return kv.Key, nil
}
