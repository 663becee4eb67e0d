package memory

import (
	"context"
	"hash/fnv"
	"math"
)

// Embedder turns texts into vectors of at most MaxDims dimensions, one per text,
// all of the same width. Implementations must be safe for concurrent use.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// HashDim is the width of HashEmbedder's vectors unless Dim says otherwise.
const HashDim = 384

// HashEmbedder is the offline embedder: features hashed (FNV-1a, one bit for the
// sign) into HashDim buckets and L2-normalised. Features are stemmed words, word
// bigrams and character trigrams of words for alphabetic scripts, and CJK
// characters and character bigrams. It needs no model and no network; it finds
// memories sharing words or word pieces with the question, not synonyms.
//
// Dim (0: HashDim) sets another width; the benchmarks use 1536 to stand in for
// the vectors of text-embedding-3-small.
type HashEmbedder struct {
	Dim int
}

// Feature weights: whole words carry the topic; pieces catch inflections and
// typos at a lower weight; CJK bigrams are the nearest thing to words there.
const (
	wWord    = 1.0
	wBigram  = 0.6
	wTrigram = 0.3
	wHan     = 0.4
	wHan2    = 1.0
)

// Embed embeds each text (all zeros for a text without features).
func (h HashEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	dim := h.Dim
	if dim <= 0 {
		dim = HashDim
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = hashEmbed(t, dim)
	}
	return out, nil
}

func hashEmbed(text string, dim int) []float32 {
	v := make([]float64, dim)
	add := func(kind byte, feature string, w float64) {
		h := fnv.New32a()
		h.Write([]byte{kind})
		h.Write([]byte(feature))
		s := h.Sum32()
		if s>>31 == 1 {
			w = -w
		}
		v[s%uint32(dim)] += w
	}
	prev := ""
	for _, t := range tokenize(text) {
		if t.cjk {
			prev = ""
			r := []rune(t.text)
			for i := range r {
				add('h', string(r[i]), wHan)
				if i+1 < len(r) {
					add('H', string(r[i:i+2]), wHan2)
				}
			}
			continue
		}
		if stopwords[t.text] {
			prev = ""
			continue
		}
		w := stem(t.text)
		add('w', w, wWord)
		if prev != "" {
			add('b', prev+" "+w, wBigram)
		}
		prev = w
		p := []rune("^" + w + "$")
		for i := 0; i+3 <= len(p); i++ {
			add('c', string(p[i:i+3]), wTrigram)
		}
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	out := make([]float32, dim)
	if n == 0 {
		return out
	}
	n = math.Sqrt(n)
	for i, x := range v {
		out[i] = float32(x / n)
	}
	return out
}
