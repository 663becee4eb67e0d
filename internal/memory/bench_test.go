package memory

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// benchMemories is how many memories each scenario of BenchmarkMemoryRecall
// holds; ATRIUM_BENCH_MEMORIES raises it (e.g. 100000), since generating 100k
// memories takes a while.
func benchMemories() int {
	if n, err := strconv.Atoi(os.Getenv("ATRIUM_BENCH_MEMORIES")); err == nil && n > 0 {
		return n
	}
	return 10_000
}

// benchVocab is a synthetic vocabulary with a Zipf-like use, so texts share
// common words and differ in rare ones, as real memories do.
type benchVocab struct {
	words []string
	zipf  *rand.Zipf
	r     *rand.Rand
}

func newBenchVocab(seed uint64) *benchVocab {
	r := rand.New(rand.NewPCG(seed, 99))
	syl := []string{"ka", "lo", "mi", "ren", "ta", "vu", "sel", "dor", "pi", "qua", "ne", "zo", "bri", "fen", "gal", "hu"}
	seen := map[string]bool{}
	var words []string
	for len(words) < 5000 {
		var b strings.Builder
		for range 2 + r.IntN(3) {
			b.WriteString(syl[r.IntN(len(syl))])
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	return &benchVocab{words: words, zipf: rand.NewZipf(r, 1.1, 2, uint64(len(words)-1)), r: r}
}

func (v *benchVocab) word() string { return v.words[v.zipf.Uint64()] }

func (v *benchVocab) text() string {
	n := 6 + v.r.IntN(9)
	ws := make([]string, n)
	for i := range ws {
		ws[i] = v.word()
	}
	return strings.Join(ws, " ")
}

// paraphrase keeps about two thirds of the words of text and replaces the rest.
func (v *benchVocab) paraphrase(text string) string {
	ws := strings.Fields(text)
	for i := range ws {
		if v.r.IntN(3) == 0 {
			ws[i] = v.word()
		}
	}
	return strings.Join(ws, " ")
}

type benchQuery struct {
	owner int64
	vec   []float32 // transformed, as Search makes it
}

// floatBlob encodes v as sqlite-vec's float32 blob (little-endian).
func floatBlob(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// buildBench fills a fresh database with n memories spread evenly over users
// users through the same indexing path as Save (seal, blind terms, transformed
// vector), inserted in batches, and returns queries paraphrasing some of them.
// Vectors come from the offline HashEmbedder at dim dimensions (384, its own;
// 1536 hashes the same features into 1,536 buckets, a synthetic stand-in for
// text-embedding-3-small's width), padded to the next power of two.
//
// The same vectors, as float32, go to a vec0 float table in a separate file
// (so the measured size is the real schema's): sqlite-vec's plain float KNN,
// the ground truth for recall and the baseline for latency.
func buildBench(b *testing.B, users, n, dim int) (*fixture, *sql.DB, []benchQuery) {
	ctx := context.Background()
	f := newFixture(b)
	emb := HashEmbedder{Dim: dim}
	f.emb.HashEmbedder = emb
	ref, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "reference.db"))
	ok(b, err)
	b.Cleanup(func() { ref.Close() })
	ref.SetMaxOpenConns(1)
	_, err = ref.ExecContext(ctx, fmt.Sprintf(`CREATE VIRTUAL TABLE floats USING vec0(
		owner_id INTEGER, embedding float[%d] distance_metric=cosine)`, must(paddedDims(dim))))
	ok(b, err)
	var refRows [][3]any // seq (unused), owner, float32 blob
	owners := []int64{f.ann}
	for i := 1; i < users; i++ {
		u := store.User{Username: fmt.Sprint("user", i), PasswordHash: "h", Role: store.RoleUser}
		if err := f.db.CreateUser(ctx, &u); err != nil {
			b.Fatal(err)
		}
		owners = append(owners, u.ID)
	}
	v := newBenchVocab(uint64(users))
	start := time.Now()
	var texts []string
	var textOwner []int64
	const batch = 500
	var recs []*store.Memory
	var ixs []store.MemoryIndex
	flush := func() {
		if err := f.db.InsertMemories(ctx, recs, ixs); err != nil {
			b.Fatal(err)
		}
		tx := must(ref.BeginTx(ctx, nil))
		for i, r := range refRows {
			_, err := tx.ExecContext(ctx, `INSERT INTO floats (rowid, owner_id, embedding) VALUES (?, ?, ?)`, recs[i].Seq, r[1], r[2])
			ok(b, err)
		}
		ok(b, tx.Commit())
		recs, ixs, refRows = recs[:0], ixs[:0], refRows[:0]
	}
	for i := range n {
		owner := owners[i%len(owners)]
		k := must(f.svc.ownerKeys(ctx, owner))
		text := v.text()
		ix, terms, err := f.svc.index(ctx, k, text)
		if err != nil {
			b.Fatal(err)
		}
		rot := must(k.apply(must(emb.Embed(ctx, []string{text}))[0]))
		refRows = append(refRows, [3]any{nil, owner, floatBlob(rot)})
		id := fmt.Sprintf("mem_bench%07d", i)
		sealed := must(f.svc.keys.Seal(ctx, owner, []byte(text), sealAD(id, owner)))
		recs = append(recs, &store.Memory{ID: id, OwnerID: owner, Kind: KindFact, Sealed: sealed, TermCount: terms,
			SourceKind: SourceImport, Confidence: 0.8})
		ixs = append(ixs, ix)
		texts, textOwner = append(texts, text), append(textOwner, owner)
		if len(recs) == batch {
			flush()
		}
	}
	if len(recs) > 0 {
		flush()
	}
	b.Logf("%d users, %d memories, %d-d: built in %v (%.0f memories/s)", users, n, dim, time.Since(start).Round(time.Millisecond),
		float64(n)/time.Since(start).Seconds())

	var qs []benchQuery
	for range 200 {
		i := v.r.IntN(n)
		k := must(f.svc.ownerKeys(ctx, textOwner[i]))
		vec := must(emb.Embed(ctx, []string{v.paraphrase(texts[i])}))[0]
		qs = append(qs, benchQuery{owner: textOwner[i], vec: must(k.apply(vec))})
	}
	return f, ref, qs
}

func dbMB(b *testing.B, f *fixture) float64 {
	ok(b, f.db.Checkpoint(context.Background()))
	var size int64
	for _, s := range []string{"", "-wal"} {
		if st, err := os.Stat(f.path + s); err == nil {
			size += st.Size()
		}
	}
	return float64(size) / (1 << 20)
}

// refKNN is sqlite-vec's exact float32 KNN in the reference table, as seqs.
func refKNN(b *testing.B, ref *sql.DB, q benchQuery, k int) []int64 {
	rows, err := ref.Query(`SELECT rowid FROM floats WHERE embedding MATCH ? AND k = ? AND owner_id = ?`, floatBlob(q.vec), k, q.owner)
	ok(b, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var seq int64
		ok(b, rows.Scan(&seq))
		out = append(out, seq)
	}
	ok(b, rows.Err())
	return out
}

// timed runs fn for each of b's iterations over the queries and reports p50 and
// p95 per query.
func timed(b *testing.B, qs []benchQuery, fn func(q benchQuery)) {
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		fn(qs[i%len(qs)])
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds)
}

// BenchmarkMemoryRecall measures top-5 vector retrieval at 384 and 1,536
// dimensions (HashEmbedder, padded to 512 and 2,048), for memories of one user
// and spread over 1,000 users: sqlite-vec's plain float32 KNN (vec0-float), the
// exact scan of the owner's stored float16 vectors (exact-scan; only where an
// owner holds at most 10k, it is ~0.5 s at 100k), reading an owner's bits into
// the cache (bits-load: what the first search after a write pays), the Hamming
// stage alone (hamming-only) and the whole fast path with p rescored candidates
// (prefilter-p, Search uses p = 100 for a top 5), with its recall@5 against
// vec0-float.
func BenchmarkMemoryRecall(b *testing.B) {
	const k = 5
	n := benchMemories()
	for _, dim := range []int{384, 1536} {
		for _, sc := range []struct {
			name  string
			users int
		}{{"one-user", 1}, {"1000-users", 1000}} {
			b.Run(fmt.Sprintf("%dd/%s/%d", dim, sc.name, n), func(b *testing.B) {
				benchRecall(b, sc.users, n, dim, k)
			})
		}
	}
}

func benchRecall(b *testing.B, users, n, dim, k int) {
	f, ref, qs := buildBench(b, users, n, dim)
	ctx := context.Background()
	size := dbMB(b, f)
	seqOf := map[string]int64{}
	rows := must(storetest.Pool(b, f.db).Query(`SELECT id, seq FROM memories`))
	for rows.Next() {
		var id string
		var seq int64
		ok(b, rows.Scan(&id, &seq))
		seqOf[id] = seq
	}
	rows.Close()
	truth := make([][]int64, len(qs))
	for i, q := range qs {
		truth[i] = refKNN(b, ref, q, k)
	}
	recall := func(knn func(q benchQuery) []store.MemoryHit) float64 {
		var found, want int
		for i, q := range qs {
			in := map[int64]bool{}
			for _, s := range truth[i] {
				in[s] = true
			}
			for _, h := range knn(q) {
				if in[seqOf[h.ID]] {
					found++
				}
			}
			want += len(truth[i])
		}
		return float64(found) / float64(want)
	}
	dims := must(paddedDims(dim))

	b.Run("vec0-float", func(b *testing.B) {
		timed(b, qs, func(q benchQuery) { refKNN(b, ref, q, k) })
		b.ReportMetric(size, "db_MB")
	})
	if n/users <= 10_000 {
		b.Run("exact-scan", func(b *testing.B) {
			timed(b, qs, func(q benchQuery) { must(f.db.ExactKNNMemoryCandidates(ctx, q.owner, q.vec, k)) })
		})
	}
	b.Run("bits-load", func(b *testing.B) {
		timed(b, qs, func(q benchQuery) {
			_, _, raw, err := f.db.MemoryBits(ctx, q.owner, dims)
			ok(b, err)
			packWords(raw)
		})
	})
	b.Run("hamming-only", func(b *testing.B) {
		timed(b, qs, func(q benchQuery) {
			o := must(f.svc.ownerBitsFor(ctx, q.owner, dims))
			o.nearestHamming(packWords(signBits(q.vec)), hammingFactor*rescoreCount(k))
		})
	})
	for _, p := range []int{50, rescoreCount(k), 200} {
		b.Run(fmt.Sprintf("prefilter-%d", p), func(b *testing.B) {
			fast := func(q benchQuery) []store.MemoryHit {
				return must(f.svc.prefilterKNN(ctx, q.owner, q.vec, p, k))
			}
			r := recall(fast)
			b.ResetTimer()
			timed(b, qs, func(q benchQuery) { fast(q) })
			b.ReportMetric(r, "recall@5")
		})
	}
}

// BenchmarkMemoryFileSize reports the database size for 1,000 users × 100
// memories (100k memories; building them takes about 40 s here), and the
// top-5 latency there of the two vector paths and of a whole Search.
func BenchmarkMemoryFileSize(b *testing.B) {
	const k = 5
	f, _, qs := buildBench(b, 1000, 100_000, HashDim)
	ctx := context.Background()
	size := dbMB(b, f)
	b.Run("size", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(size, "db_MB")
		b.ReportMetric(size*(1<<20)/100_000, "bytes/memory")
	})
	b.Run("exact-scan", func(b *testing.B) {
		timed(b, qs, func(q benchQuery) { must(f.db.ExactKNNMemoryCandidates(ctx, q.owner, q.vec, k)) })
	})
	b.Run("prefilter", func(b *testing.B) {
		timed(b, qs, func(q benchQuery) { must(f.svc.prefilterKNN(ctx, q.owner, q.vec, rescoreCount(k), k)) })
	})
	v := newBenchVocab(7)
	b.Run("search", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			must(f.svc.Search(ctx, qs[i%len(qs)].owner, v.text(), k))
		}
	})
}

// reportPercentiles adds p50 and p95 of ds in milliseconds: a turn waits for
// one Search, so the typical and the slow case matter more than the mean.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(ds[len(ds)*95/100].Microseconds())/1000, "p95_ms")
}

// BenchmarkMemorySave measures writing one memory through Save with the
// offline embedder (goal ≤ 5 ms): validation, secret check, embedding, keyed
// transform, sealing and one insert transaction, into an owner that already
// holds 1,000 memories so the indexes are not empty.
func BenchmarkMemorySave(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	v := newBenchVocab(3)
	for range 1000 {
		must(f.svc.Save(ctx, f.ann, KindFact, v.text(), manual, 0.9))
	}
	var ds []time.Duration
	for b.Loop() {
		text := v.text()
		t0 := time.Now()
		must(f.svc.Save(ctx, f.ann, KindPreference, text, manual, 0.9))
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds)
}

// BenchmarkMemorySearch measures one whole Search (embed, blind lexical
// candidates, bit prefilter + rescore, fusion, opening the hits) for one user
// holding 10,000 memories: what retrieval adds before the first token (goal
// ≤ 20 ms).
func BenchmarkMemorySearch(b *testing.B) {
	f, _, _ := buildBench(b, 1, 10_000, HashDim)
	ctx := context.Background()
	v := newBenchVocab(1) // the vocabulary the memories were written with
	var ds []time.Duration
	for b.Loop() {
		q := v.paraphrase(v.text())
		t0 := time.Now()
		must(f.svc.Search(ctx, f.ann, q, 5))
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds)
}
