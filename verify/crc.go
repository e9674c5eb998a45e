package verify

// crcCombine returns the crc32 (Castagnoli, as hash/crc32 computes it) of
// the concatenation A||B from crc1 = crc of A (or any running crc before B)
// and crc2 = crc32.Update(0, castagnoli, B), len2 = len(B): zlib's
// crc32_combine for etcd's polynomial. It lets two walkers hash consecutive
// parts of a bucket side by side.
func crcCombine(crc1, crc2 uint32, len2 int64) uint32 {
	return multModP(xPow8n(uint64(len2)), crc1) ^ crc2
}

// castagnoliReversed is the Castagnoli polynomial, bit-reflected.
const castagnoliReversed = 0x82F63B78

// multModP returns a*b modulo the polynomial, in the reflected bit order
// of the crc (the x^0 term in the top bit).
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo the polynomial.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// xPow8n returns x^(8n) modulo the polynomial: the effect of n zero bytes.
func xPow8n(n uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			p = multModP(x2n[k&63], p)
		}
	}
	return p
}
