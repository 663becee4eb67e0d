package memory

import (
	"fmt"
	"math"
	"math/rand/v2"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// MaxDims is the widest embedding memory stores: vectors are zero-padded to the
// next power of two for the Hadamard transform, so 4,096 is the widest padded width.
const MaxDims = store.MaxMemoryVectorDim

// paddedDims is the stored width of an n-dimensional embedding: the next power of
// two, at least store.MinMemoryVectorDim (384 → 512, 768 → 1024, 1536 → 2048).
func paddedDims(n int) (int, error) {
	if n <= 0 || n > MaxDims {
		return 0, errs.E(errs.Invalid, "The embedding model gives %d-dimensional vectors; memory holds at most %d (ask for fewer with -embeddings-dimensions if the model can shorten them).", n, MaxDims)
	}
	d := store.MinMemoryVectorDim
	for d < n {
		d *= 2
	}
	return d, nil
}

// transformRounds: one round of sign flips + Hadamard already spreads every
// coordinate over all others; more rounds with fresh keyed permutations make the
// result harder to relate to the input and the coordinates closer to Gaussian,
// which helps the bit prefilter.
const transformRounds = 3

// Transform is a keyed randomised Hadamard transform of one width: per round,
// keyed sign flips, a keyed permutation and a normalised Walsh–Hadamard
// transform. Every step is orthogonal, so norms, dot products and distances are
// preserved. It costs O(d log d) per vector and is rebuilt from the key alone.
type Transform struct {
	dims  int
	signs [transformRounds][]bool // true: flip
	perm  [transformRounds][]uint16
}

// NewTransform derives the transform of width dims (a power of two of at most
// MaxDims) from a 32-byte key. The draws for 512 are those of the fixed-width
// transform before widths varied, so vectors stored then stay comparable.
func NewTransform(key []byte, dims int) (*Transform, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("memory: transform key must be 32 bytes")
	}
	if dims <= 0 || dims > MaxDims || dims&(dims-1) != 0 {
		return nil, fmt.Errorf("memory: transform width %d is not a power of two up to %d", dims, MaxDims)
	}
	r := rand.New(rand.NewChaCha8([32]byte(key)))
	t := &Transform{dims: dims}
	for k := range transformRounds {
		t.signs[k] = make([]bool, dims)
		for i := range dims {
			t.signs[k][i] = r.Uint64()&1 == 1
		}
		t.perm[k] = make([]uint16, dims)
		for i, p := range r.Perm(dims) {
			t.perm[k][i] = uint16(p)
		}
	}
	return t, nil
}

// Dims is the transform's width.
func (t *Transform) Dims() int { return t.dims }

// Apply returns the transformed vector of v (len(v) <= Dims), Dims wide.
func (t *Transform) Apply(v []float32) ([]float32, error) {
	if len(v) > t.dims {
		return nil, fmt.Errorf("memory: a %d-dimensional vector for a %d-dimensional transform", len(v), t.dims)
	}
	x := make([]float64, t.dims)
	for i, f := range v {
		x[i] = float64(f)
	}
	y := make([]float64, t.dims)
	scale := 1 / math.Sqrt(float64(t.dims))
	for k := range transformRounds {
		for i := range x {
			if t.signs[k][i] {
				y[t.perm[k][i]] = -x[i]
			} else {
				y[t.perm[k][i]] = x[i]
			}
		}
		fwht(y)
		for i := range y {
			x[i] = y[i] * scale
		}
	}
	out := make([]float32, t.dims)
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
// (the layout of memory_bits).
func signBits(v []float32) []byte {
	b := make([]byte, (len(v)+7)/8)
	for i, x := range v {
		if x > 0 {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return b
}
