package memory

import (
	"context"
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"

	"atrium/internal/store"
)

// The vector search of an owner with many memories runs in three stages, each
// cheaper per candidate than the next and each cutting the list by about ten:
//
//  1. Hamming distance between the query's sign bits and every stored vector's
//     (memory_bits, cached in process per owner: 64 bytes per memory at 512
//     dimensions), popcounts over 64-bit words of the first hammingBits bits
//     only, keeping hammingFactor × P;
//  2. the query's float coordinates against those candidates' sign bits (an
//     asymmetric estimate of the dot product, through per-byte tables: the query
//     is not quantised, so it ranks far better than Hamming), keeping P;
//  3. the exact cosine on the P candidates' stored float16 vectors, in SQLite.
//
// Measured in BenchmarkMemoryRecall (docs/benchmarks.md): the vec0 bit KNN this
// replaces took ~9 ms per query over 100k vectors of one owner at recall 0.80.

// hammingFactor is how many Hamming candidates stage 1 keeps per final
// candidate: at 100k memories Hamming's top 1,000 held 99.6 % of the true top
// 5, its top 100 only 88 %.
const hammingFactor = 10

// hammingBits caps the bits stage 1 compares. Each sign bit of the keyed
// rotation is one random hyperplane, so any 512 of them rank like the 512-bit
// vectors of a 384-d embedder, and stage 2 looks at all of them: at 2,048
// dimensions this makes stage 1 four times cheaper (it was most of a search).
const hammingBits = 512

// rescoreCount is how many candidates reach the exact float16 rescoring (stage
// 3) for a top k: each costs a row read (100 took 0.44 ms with the pages cached,
// several ms when they must be read). Search asks for 20 candidates to fuse,
// which need not be the exact top 20.
func rescoreCount(k int) int { return max(5*k, 100) }

// bitCacheBudget bounds the bytes of sign bits (and their seqs) cached across
// owners; the least recently searched owners are dropped first. 100k memories
// of 512 dimensions take 7.2 MB, of 2,048 dimensions 26 MB.
const bitCacheBudget = 128 << 20

// ownerBits is one owner's sign bits of one width, as of version. Saves through
// this Service patch it in place (patchBits); any other change (Update, Forget,
// Reindex, another process, a user's deletion) makes the next search read it
// again.
type ownerBits struct {
	dims  int
	words int // uint64 words per vector

	mu      sync.RWMutex
	version int64
	seqs    []int64  // memory seqs, in bits' order
	bits    []uint64 // len(seqs) × words
	lastUse uint64   // guarded by bitCache.mu
}

func (o *ownerBits) size() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return 8*len(o.seqs) + 8*len(o.bits)
}

func (o *ownerBits) index(seq int64) int {
	for i, s := range o.seqs {
		if s == seq {
			return i
		}
	}
	return -1
}

// remove drops seq's vector (the last one takes its place).
func (o *ownerBits) remove(seq int64) {
	i := o.index(seq)
	if i < 0 {
		return
	}
	last, w := len(o.seqs)-1, o.words
	o.seqs[i] = o.seqs[last]
	copy(o.bits[i*w:i*w+w], o.bits[last*w:])
	o.seqs, o.bits = o.seqs[:last], o.bits[:last*w]
}

// set puts raw (the bits of a vector of any width) as seq's vector; a vector of
// another width than o's is not o's to hold.
func (o *ownerBits) set(seq int64, raw []byte) {
	o.remove(seq)
	if len(raw) != o.dims/8 {
		return
	}
	o.seqs = append(o.seqs, seq)
	o.bits = append(o.bits, packWords(raw)...)
}

// bitCache holds ownerBits by owner. Whether an entry is current is decided by
// comparing its version with the database's (store.MemoryVectorVersion) at
// every search, so a write or delete by any path is seen by the next search.
type bitCache struct {
	mu     sync.Mutex
	budget int
	size   int
	clock  uint64
	owners map[int64]*ownerBits
}

func newBitCache(budget int) *bitCache {
	return &bitCache{budget: budget, owners: map[int64]*ownerBits{}}
}

func (c *bitCache) get(owner int64) *ownerBits {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owners[owner]
	if o != nil {
		c.clock++
		o.lastUse = c.clock
	}
	return o
}

// put stores o for owner and drops the least recently used other owners while
// the cache is over budget (o itself stays, however large). Sizes are summed
// here, as patches change them a little.
func (c *bitCache) put(owner int64, o *ownerBits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	o.lastUse = c.clock
	c.owners[owner] = o
	size := 0
	for _, e := range c.owners {
		size += e.size()
	}
	for size > c.budget && len(c.owners) > 1 {
		var victim int64
		var oldest *ownerBits
		for id, e := range c.owners {
			if id != owner && (oldest == nil || e.lastUse < oldest.lastUse) {
				victim, oldest = id, e
			}
		}
		size -= oldest.size()
		delete(c.owners, victim)
	}
}

func (c *bitCache) drop(owner int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.owners, owner)
}

// patchBits applies fn to owner's cached bits after a write through this
// Service that moved the owner's vector version from before to after (the store
// reads it inside the write's transaction). It does so only when the cache is at
// exactly before, i.e. holds every change up to this one; otherwise the entry is
// left stale and the next search reads it again. It saves that read (~1 µs per
// memory) after every Save.
//
// The versions must come from the write itself: a version read after the commit
// may include another writer's change, and a cache read meanwhile at that
// writer's version would then be labelled current without it.
func (s *Service) patchBits(owner int64, before, after int64, fn func(o *ownerBits)) {
	o := s.bits.get(owner)
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.version == before {
		fn(o)
		o.version = after
	}
}

// ownerBitsFor returns owner's current sign bits of dims dimensions, from the
// cache or read again when the stored version moved on.
func (s *Service) ownerBitsFor(ctx context.Context, owner int64, dims int) (*ownerBits, error) {
	v, err := s.db.MemoryVectorVersion(ctx, owner)
	if err != nil {
		return nil, err
	}
	if o := s.bits.get(owner); o != nil && o.dims == dims {
		o.mu.RLock()
		current := o.version == v
		o.mu.RUnlock()
		if current {
			return o, nil
		}
	}
	v, seqs, raw, err := s.db.MemoryBits(ctx, owner, dims)
	if err != nil {
		return nil, err
	}
	o := &ownerBits{version: v, dims: dims, words: dims / 64, seqs: seqs, bits: packWords(raw)}
	s.bits.put(owner, o)
	return o, nil
}

// packWords reads memory_bits' bytes as little-endian 64-bit words (byte i of
// a vector is bits 8i…8i+7, as signBits lays them out).
func packWords(raw []byte) []uint64 {
	w := make([]uint64, len(raw)/8)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	return w
}

// prefilterKNN is the three-stage search above: the k nearest of owner's
// memories to rot (a transformed query), from p exactly rescored candidates.
func (s *Service) prefilterKNN(ctx context.Context, owner int64, rot []float32, p, k int) ([]store.MemoryHit, error) {
	o, err := s.ownerBitsFor(ctx, owner, len(rot))
	if err != nil {
		return nil, err
	}
	o.mu.RLock()
	seqs := o.shortlist(rot, p)
	o.mu.RUnlock()
	return s.db.RescoreMemories(ctx, owner, seqs, rot, k)
}

// shortlist returns the seqs of the p stored vectors nearest to q by stages 1
// and 2. The caller holds o.mu (read).
func (o *ownerBits) shortlist(q []float32, p int) []int64 {
	n := len(o.seqs)
	if n <= p {
		return slices.Clone(o.seqs)
	}
	cand := o.nearestHamming(packWords(signBits(q)), hammingFactor*p)
	if len(cand) > p {
		score := o.asymmetric(q, cand)
		order := make([]int, len(cand))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			switch {
			case score[a] > score[b]:
				return -1
			case score[a] < score[b]:
				return 1
			}
			return cand[a] - cand[b]
		})
		kept := make([]int, p)
		for i := range kept {
			kept[i] = cand[order[i]]
		}
		cand = kept
	}
	out := make([]int64, len(cand))
	for i, c := range cand {
		out[i] = o.seqs[c]
	}
	return out
}

// nearestHamming returns the indices of the m vectors of smallest Hamming
// distance to qw (all when there are fewer), ties broken by position. Distances
// are small integers, so a histogram finds the cut-off without sorting.
func (o *ownerBits) nearestHamming(qw []uint64, m int) []int {
	n, w := len(o.seqs), o.words
	if n <= m {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all
	}
	dist := make([]uint16, n)
	pw := min(w, hammingBits/64)
	hist := make([]int, 64*pw+1)
	qw = qw[:pw]
	for i := range n {
		row := o.bits[i*w : i*w+pw]
		d := 0
		for j, x := range row {
			d += bits.OnesCount64(x ^ qw[j])
		}
		dist[i] = uint16(d)
		hist[d]++
	}
	cut, below := 0, 0 // keep every distance < cut, and ties at cut up to m
	for cut = range hist {
		if below+hist[cut] >= m {
			break
		}
		below += hist[cut]
	}
	out := make([]int, 0, m)
	ties := m - below
	for i, d := range dist {
		switch {
		case int(d) < cut:
			out = append(out, i)
		case int(d) == cut && ties > 0:
			out = append(out, i)
			ties--
		}
	}
	return out
}

// asymmetric scores each candidate by q · s, where s is the candidate's sign
// vector (±1 per bit): one table per byte of the bits holds the partial dot
// product of the query's 8 coordinates there with every sign pattern, so a
// candidate costs dims/8 look-ups. Higher is nearer.
func (o *ownerBits) asymmetric(q []float32, cand []int) []float32 {
	nb := o.dims / 8
	tab := make([]float32, nb*256)
	for j := range nb {
		t := tab[j*256 : j*256+256]
		var base float32
		for _, x := range q[8*j : 8*j+8] {
			base -= x
		}
		t[0] = base
		for m := 1; m < 256; m++ {
			low := bits.TrailingZeros(uint(m))
			t[m] = t[m&(m-1)] + 2*q[8*j+low]
		}
	}
	w := o.words
	score := make([]float32, len(cand))
	for i, c := range cand {
		var s float32
		for j, x := range o.bits[c*w : c*w+w] {
			t := tab[j*8*256:]
			s += t[byte(x)] + t[256+int(byte(x>>8))] + t[512+int(byte(x>>16))] + t[768+int(byte(x>>24))] +
				t[1024+int(byte(x>>32))] + t[1280+int(byte(x>>40))] + t[1536+int(byte(x>>48))] + t[1792+int(byte(x>>56))]
		}
		score[i] = s
	}
	return score
}
