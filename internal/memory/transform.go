package memory

import (
	"errors"
	"math"
	"math/rand/v2"
)

// transformDim is the width the transform works in: the Hadamard matrix needs a
// power of two, so vectors are zero-padded to it. It equals store.MemoryVectorDim.
const transformDim = 512

// transformRounds: one round of sign flips + Hadamard already spreads every
// coordinate over all others; more rounds with fresh keyed permutations make the
// result harder to relate to the input and the coordinates closer to Gaussian,
// which helps the bit prefilter.
const transformRounds = 3

// Transform is a keyed randomised Hadamard transform: per round, keyed sign
// flips, a keyed permutation and a normalised Walsh–Hadamard transform. Every
// step is orthogonal, so norms, dot products and distances are preserved. It
// costs O(d log d) per vector and is rebuilt from the key alone.
type Transform struct {
	signs [transformRounds][transformDim]float64
	perm  [transformRounds][transformDim]int
}

// NewTransform derives a transform from a 32-byte key.
func NewTransform(key []byte) (*Transform, error) {
	if len(key) != 32 {
		return nil, errors.New("memory: transform key must be 32 bytes")
	}
	r := rand.New(rand.NewChaCha8([32]byte(key)))
	t := &Transform{}
	for k := range transformRounds {
		for i := range transformDim {
			t.signs[k][i] = 1
			if r.Uint64()&1 == 1 {
				t.signs[k][i] = -1
			}
		}
		for i, p := range r.Perm(transformDim) {
			t.perm[k][i] = p
		}
	}
	return t, nil
}

// Apply returns the transformed vector of v (len(v) <= 512), 512 wide.
func (t *Transform) Apply(v []float32) ([]float32, error) {
	if len(v) > transformDim {
		return nil, errors.New("memory: vector wider than 512 dimensions")
	}
	x := make([]float64, transformDim)
	for i, f := range v {
		x[i] = float64(f)
	}
	y := make([]float64, transformDim)
	scale := 1 / math.Sqrt(transformDim)
	for k := range transformRounds {
		for i := range x {
			y[t.perm[k][i]] = x[i] * t.signs[k][i]
		}
		fwht(y)
		for i := range y {
			x[i] = y[i] * scale
		}
	}
	out := make([]float32, transformDim)
	for i, f := range x {
		out[i] = float32(f)
	}
	return out, nil
}

// fwht is the in-place unnormalised fast Walsh–Hadamard transform.
func fwht(a []float64) {
	for h := 1; h < len(a); h *= 2 {
		for i := 0; i < len(a); i += 2 * h {
			for j := i; j < i+h; j++ {
				x, y := a[j], a[j+h]
				a[j], a[j+h] = x+y, x-y
			}
		}
	}
}

// signBits packs the signs of v into bits, bit i of byte i/8 set for v[i] > 0
// (sqlite-vec's bit[] layout, as vec_quantize_binary makes it).
func signBits(v []float32) []byte {
	b := make([]byte, (len(v)+7)/8)
	for i, x := range v {
		if x > 0 {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return b
}
