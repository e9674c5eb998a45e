package repository

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseSegmentBytes: ParseSegmentBytes is ParseSegment over memory:
// the same segment or the same error for any input, the seeds being
// FuzzParseSegment's (every valid case, and damaged ones: each cut short
// and each with a byte flipped), and signed ones (formats 3 and 4).
func FuzzParseSegmentBytes(f *testing.F) {
	for _, s := range segmentCases() {
		raw := encodeRaw(f, s)
		if len(raw) > 1<<20 {
			continue // keep seeds small
		}
		f.Add(raw)
		f.Add(raw[:len(raw)/2])
		f.Add(raw[:len(raw)-1])
		flipped := bytes.Clone(raw)
		flipped[len(raw)*2/3] ^= 0x40
		f.Add(flipped)
		f.Add(append(bytes.Clone(raw), 0))
	}
	for _, raw := range signedSeeds(f) {
		f.Add(raw)
		f.Add(raw[:len(raw)-1]) // the signature cut short
		flipped := bytes.Clone(raw)
		flipped[len(raw)-1] ^= 0x40 // parses: the Repo checks the signature
		f.Add(flipped)
		f.Add(append(bytes.Clone(raw), 0))
	}
	f.Add([]byte{})
	f.Add(segmentMagic)
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := ParseSegment(bytes.NewReader(data))
		got, err := ParseSegmentBytes(bytes.Clone(data))
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("ParseSegmentBytes: %v, ParseSegment: %v", err, wantErr)
		}
		if d := cmp.Diff(want, got, segCmp); d != "" {
			t.Fatalf("ParseSegmentBytes (-ParseSegment +ParseSegmentBytes):\n%s", d)
		}
	})
}

// TestParseSegmentBytesAliasesValues: the values are slices of the input
// (no copy), the keys copies (a store may keep a key).
func TestParseSegmentBytesAliasesValues(t *testing.T) {
	for _, s := range segmentCases() {
		raw := encodeRaw(t, s)
		seg, err := ParseSegmentBytes(raw)
		if err != nil {
			t.Fatal(err)
		}
		inRaw := func(b []byte) bool {
			if len(b) == 0 {
				return false
			}
			p := &b[0]
			for i := range raw {
				if &raw[i] == p {
					return true
				}
			}
			return false
		}
		for _, r := range seg.Revisions {
			for _, op := range r.Ops {
				if inRaw(op.Key) {
					t.Fatalf("revision %d: key %q is a slice of the input", r.Revision, op.Key)
				}
				if len(op.Value) > 0 && len(op.Value) < 1<<16 && !inRaw(op.Value) {
					t.Fatalf("revision %d: the value of %q is a copy", r.Revision, op.Key)
				}
			}
		}
	}
}
