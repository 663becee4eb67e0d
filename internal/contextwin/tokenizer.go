package contextwin

import (
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Tokenizer counts the tokens of a text.
type Tokenizer interface {
	Count(text string) int
}

// NewTokenizer returns the cl100k_base BPE tokenizer (GPT-4's), whose
// vocabulary is compiled into the binary, so it works offline. Counts for other
// model families differ by a few percent, which the reply reserve absorbs.
//
// The result is safe for concurrent use. It memoises counts and cuts of recent
// texts (bounded to a few tens of MiB): the system prompt, tool specs, summary
// and long tool results repeat on every turn, and BPE costs about 1 µs a token.
func NewTokenizer() Tokenizer {
	bpeOnce.Do(func() {
		// codec.NewCl100kBase, not tokenizer.Get: Get links all five vocabularies
		// (~13 MB of binary); this links only the one we use.
		bpeShared = &bpe{
			codec:  codec.NewCl100kBase(),
			counts: newMemo[string, int](16 << 20),
			cuts:   newMemo[cutKey, [2]int](16 << 20),
		}
	})
	return bpeShared
}

var (
	bpeOnce   sync.Once
	bpeShared *bpe
)

type bpe struct {
	codec  *codec.Codec
	counts *memo[string, int]
	cuts   *memo[cutKey, [2]int]
}

type cutKey struct {
	text       string
	head, tail int
}

func (t *bpe) Count(text string) int {
	if text == "" {
		return 0
	}
	if n, ok := t.counts.get(text); ok {
		return n
	}
	n, err := t.codec.Count(text)
	if err != nil { // only a regexp timeout; none is set
		n = (len(text) + 3) / 4
	}
	t.counts.put(text, n, len(text))
	return n
}

// cutOffsets returns the byte offsets where the first head tokens of text end
// and where its last tail tokens begin (rune boundaries, h <= s).
func (t *bpe) cutOffsets(text string, head, tail int) (h, s int) {
	k := cutKey{text, head, tail}
	if v, ok := t.cuts.get(k); ok {
		return v[0], v[1]
	}
	h = t.headOffset(text, head)
	s = max(h, t.tailOffset(text, tail))
	t.cuts.put(k, [2]int{h, s}, len(text))
	return h, s
}

// Tokenising only a window around the cut keeps the cost proportional to the
// tokens kept, not to the whole text. A margin of a few tokens past the cut
// makes the boundary the same as tokenising the whole text would give.
const cutMargin = 8

func (t *bpe) headOffset(text string, n int) int {
	if n <= 0 {
		return 0
	}
	for w := n*6 + 64; ; w *= 2 {
		end := len(text)
		if w < end {
			end = runeStartBefore(text, w)
		}
		_, toks, err := t.codec.Encode(text[:end])
		if err != nil {
			return runeStartBefore(text, min(len(text), n*4))
		}
		if len(toks) > n+cutMargin || end == len(text) {
			off := 0
			for _, p := range toks[:min(n, len(toks))] {
				off += len(p)
			}
			return runeStartBefore(text, off)
		}
	}
}

func (t *bpe) tailOffset(text string, n int) int {
	if n <= 0 {
		return len(text)
	}
	for w := n*6 + 64; ; w *= 2 {
		start := 0
		if w < len(text) {
			start = runeStartAfter(text, len(text)-w)
		}
		_, toks, err := t.codec.Encode(text[start:])
		if err != nil {
			return runeStartAfter(text, max(0, len(text)-n*4))
		}
		if len(toks) > n+cutMargin || start == 0 {
			off := start
			for _, p := range toks[:max(0, len(toks)-n)] {
				off += len(p)
			}
			return runeStartAfter(text, off)
		}
	}
}

// cutter is implemented by tokenizers that can find token boundaries cheaply.
type cutter interface {
	cutOffsets(text string, head, tail int) (h, s int)
}

// cutOffsets finds where the first head tokens of text end and the last tail
// tokens begin. For a Tokenizer that is not a cutter it searches rune
// boundaries with Count.
func cutOffsets(tok Tokenizer, text string, head, tail int) (h, s int) {
	if c, ok := tok.(cutter); ok {
		return c.cutOffsets(text, head, tail)
	}
	// Rune boundaries, then the longest prefix with at most head tokens and the
	// longest suffix with at most tail tokens; both counts are monotonic.
	starts := make([]int, 0, len(text)+1)
	for i := range text {
		starts = append(starts, i)
	}
	starts = append(starts, len(text))
	i := sort.Search(len(starts), func(i int) bool { return tok.Count(text[:starts[i]]) > head })
	h = starts[max(0, i-1)]
	j := sort.Search(len(starts), func(j int) bool { return tok.Count(text[starts[j]:]) <= tail })
	return h, max(h, starts[min(j, len(starts)-1)])
}

func runeStartBefore(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

func runeStartAfter(s string, i int) int {
	if i <= 0 {
		return 0
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// memo is a two-generation cache bounded by the bytes of its keys: when the
// current generation is full it becomes the old one, and a hit in the old one
// moves the entry back. Safe for concurrent use.
type memo[K comparable, V any] struct {
	mu       sync.Mutex
	cur, old map[K]V
	size     int
	limit    int
}

func newMemo[K comparable, V any](limit int) *memo[K, V] {
	return &memo[K, V]{cur: map[K]V{}, limit: limit}
}

func (m *memo[K, V]) get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.cur[k]; ok {
		return v, true
	}
	v, ok := m.old[k]
	return v, ok
}

func (m *memo[K, V]) put(k K, v V, size int) {
	if size > m.limit/8 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cur[k]; ok {
		return
	}
	if m.size+size > m.limit {
		m.old, m.cur, m.size = m.cur, map[K]V{}, 0
	}
	m.cur[k] = v
	m.size += size
}
