package store

import (
	"encoding/binary"
	"math"
)

// Rescoring vectors are stored as IEEE 754 half-precision floats: a 512-d
// float32 row (2,048 bytes) fits only once in a 4 KiB page, a float16 row three
// times, and float16's 11-bit mantissa changes cosine similarities of unit
// vectors by about 1e-3, far below what reorders neighbours.

// halfTable maps every float16 bit pattern to its float32 value.
var halfTable = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = halfToFloat(uint16(i))
	}
	return &t
}()

func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(mant) / (1 << 24)
		if sign != 0 {
			return -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// floatToHalf rounds f to the nearest float16 (ties to even), saturating to
// infinity and flushing values below the subnormal range to zero.
func floatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		h := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, which is the correct rounding
	}
	return sign | uint16(h)
}

// HalfBlob encodes v as little-endian float16, the format of memory_embeddings.
func HalfBlob(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], floatToHalf(x))
	}
	return b
}

// halfCosineDistance is 1 - cos(q, stored) for a float16 blob; 1 for a zero vector.
func halfCosineDistance(q []float32, qNorm float64, blob []byte) float64 {
	var d, n float64
	for i := range min(len(q), len(blob)/2) {
		x := halfTable[binary.LittleEndian.Uint16(blob[2*i:])]
		d += float64(q[i]) * float64(x)
		n += float64(x) * float64(x)
	}
	if n == 0 || qNorm == 0 {
		return 1
	}
	return 1 - d/(math.Sqrt(n)*qNorm)
}

func norm(v []float32) float64 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	return math.Sqrt(n)
}
