package tools

import (
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Embedder turns text into a fixed-size vector. Implementations must be safe
// for concurrent use and deterministic for a given text.
type Embedder interface {
	Embed(text string) []float32
	Dim() int
}

// VectorDim is the width of the tool_vectors table (migration 0004). A
// Registry ignores an Embedder of another width.
const VectorDim = 256

// HashEmbedder is an offline embedder: lower-cased word unigrams and bigrams and
// character trigrams, hashed (FNV-1a, one bit for the sign) into VectorDim
// buckets and L2-normalised. It needs no model and no network; it captures
// shared words and word pieces, which is enough to rank tool descriptions
// against a user message.
type HashEmbedder struct{}

// Dim returns VectorDim.
func (HashEmbedder) Dim() int { return VectorDim }

// Feature weights: whole words carry the topic; trigrams catch inflections
// ("weather"/"forecast's") and typos at a lower weight.
const (
	weightUnigram = 1.0
	weightBigram  = 0.7
	weightTrigram = 0.3
)

// stopwords carry no topic; without them every description matches every
// question through "what", "the", "to" ...
var stopwords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"can": true, "do": true, "does": true, "for": true, "from": true, "how": true, "i": true,
	"in": true, "is": true, "it": true, "its": true, "me": true, "my": true, "of": true, "on": true,
	"or": true, "please": true, "s": true, "the": true, "this": true, "to": true, "use": true,
	"what": true, "when": true, "which": true, "with": true, "you": true, "your": true,
	"parameters": true, "optional": true,
}

// Embed returns the unit vector for text (all zeros for text without words).
func (HashEmbedder) Embed(text string) []float32 {
	v := make([]float64, VectorDim)
	add := func(prefix byte, feature string, w float64) {
		h := fnv.New32a()
		h.Write([]byte{prefix})
		h.Write([]byte(feature))
		s := h.Sum32()
		if s>>31 == 1 {
			w = -w
		}
		v[s%VectorDim] += w
	}
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	prev := ""
	for _, w := range words {
		if stopwords[w] {
			prev = ""
			continue
		}
		w = stem(w)
		add('u', w, weightUnigram)
		if prev != "" {
			add('b', prev+" "+w, weightBigram)
		}
		prev = w
		padded := []rune("^" + w + "$")
		for i := 0; i+3 <= len(padded); i++ {
			add('c', string(padded[i:i+3]), weightTrigram)
		}
	}
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	out := make([]float32, VectorDim)
	if norm == 0 {
		return out
	}
	norm = math.Sqrt(norm)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// stem folds the commonest English plural forms so that "flights" meets
// "flight" on whole-word features, not only on trigrams.
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:len(w)-1]
	}
	return w
}
