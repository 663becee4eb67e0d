package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

type fixture struct {
	db   *store.DB
	path string
	svc  *Service
	emb  *flakyEmbedder
	ann  int64
	bob  int64
}

// flakyEmbedder is the offline embedder that fails while fail is set.
type flakyEmbedder struct {
	HashEmbedder
	fail atomic.Bool
}

func (f *flakyEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if f.fail.Load() {
		return nil, errors.New("embeddings endpoint down")
	}
	return f.HashEmbedder.Embed(ctx, texts)
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	ctx := context.Background()
	path := filepath.Join(tb.TempDir(), "atrium.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	keys, err := crypto.NewKeyring(ctx, bytes.Repeat([]byte{7}, crypto.KeySize), db)
	if err != nil {
		tb.Fatal(err)
	}
	// A clock one second further on each call, so every write has its own time.
	var tick atomic.Int64
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	db.Now = func() time.Time { return start.Add(time.Duration(tick.Add(1)) * time.Second) }
	f := &fixture{db: db, path: path, emb: &flakyEmbedder{}}
	f.svc = NewService(db, keys, f.emb)
	f.svc.Now = db.Now
	for _, name := range []string{"ann", "bob"} {
		u := store.User{Username: name, PasswordHash: "h", Role: store.RoleUser}
		if err := db.CreateUser(ctx, &u); err != nil {
			tb.Fatal(err)
		}
		if name == "ann" {
			f.ann = u.ID
		} else {
			f.bob = u.ID
		}
	}
	return f
}

// must returns v, panicking (which fails the test with a stack) on an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ok(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func wantCode(tb testing.TB, err error, code string) {
	tb.Helper()
	if !errs.Is(err, code) {
		tb.Fatalf("error = %v, want code %s", err, code)
	}
}

var manual = Source{Kind: SourceManual}

func (f *fixture) save(tb testing.TB, owner int64, text string) Memory {
	tb.Helper()
	return must(f.svc.Save(context.Background(), owner, KindFact, text, manual, 0.9))
}

func ids(hits []Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.ID)
	}
	return out
}

func randVec(r *rand.Rand, d int) []float32 {
	v := make([]float32, d)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range min(len(a), len(b)) {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestTransformIsOrthogonalAndKeyed(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	key1, key2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	t1 := must(NewTransform(key1, 512))
	t1again := must(NewTransform(key1, 512))
	t2 := must(NewTransform(key2, 512))
	for range 50 {
		a, b := randVec(r, HashDim), randVec(r, HashDim)
		ta, tb := must(t1.Apply(a)), must(t1.Apply(b))
		if len(ta) != 512 {
			t.Fatalf("width %d", len(ta))
		}
		for _, c := range [][2]float64{{dot(a, a), dot(ta, ta)}, {dot(b, b), dot(tb, tb)}, {dot(a, b), dot(ta, tb)}} {
			if math.Abs(c[0]-c[1]) > 1e-4*math.Max(1, math.Abs(c[0])) {
				t.Fatalf("dot product %v became %v", c[0], c[1])
			}
		}
		if !slices.Equal(ta, must(t1again.Apply(a))) {
			t.Fatal("same key, different transform")
		}
		// Another owner's transform sends the same vector somewhere unrelated:
		// the cosine between the two images is near 0, not near 1.
		ta2 := must(t2.Apply(a))
		if cos := dot(ta, ta2) / dot(ta, ta); math.Abs(cos) > 0.3 {
			t.Fatalf("two keys' images have cosine %.2f", cos)
		}
		// And the image is not the padded input.
		if cos := dot(a, ta) / dot(a, a); math.Abs(cos) > 0.3 {
			t.Fatalf("image correlates with the input: %.2f", cos)
		}
	}
	if _, err := t1.Apply(make([]float32, 513)); err == nil {
		t.Fatal("a 513-d vector was accepted by a 512-d transform")
	}
}

// The 512-d transform is the one vectors were stored with before widths
// varied (values computed with that version's code), so they stay comparable
// with new queries after the upgrade.
func TestTransform512Unchanged(t *testing.T) {
	tr := must(NewTransform(bytes.Repeat([]byte{9}, 32), 512))
	v := make([]float32, 384)
	for i := range v {
		v[i] = float32(i%7) - 3
	}
	out := must(tr.Apply(v))
	for i, want := range map[int]float32{0: 1.5909903, 1: -1.7449794, 100: 1.037182, 511: 2.4652061} {
		if math.Abs(float64(out[i]-want)) > 1e-5 {
			t.Errorf("coordinate %d = %v, want %v", i, out[i], want)
		}
	}
}

// Widths are padded to the next power of two, each width has its own
// orthogonal transform, and wider than MaxDims is refused with a clear error.
func TestTransformWidths(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, c := range []struct{ in, want int }{{1, 64}, {64, 64}, {100, 128}, {384, 512}, {768, 1024}, {1536, 2048}, {3072, 4096}, {4096, 4096}} {
		if got := must(paddedDims(c.in)); got != c.want {
			t.Errorf("paddedDims(%d) = %d, want %d", c.in, got, c.want)
		}
	}
	for _, n := range []int{0, 4097, 8192} {
		if _, err := paddedDims(n); !errs.Is(err, errs.Invalid) {
			t.Errorf("paddedDims(%d): %v, want an Invalid error", n, err)
		}
	}
	k := &ownerKeys{vector: bytes.Repeat([]byte{3}, 32), trs: map[int]*Transform{}}
	for _, n := range []int{768, 1536, 3072} {
		a, b := randVec(r, n), randVec(r, n)
		ta, tb := must(k.apply(a)), must(k.apply(b))
		if want := must(paddedDims(n)); len(ta) != want {
			t.Fatalf("%d-d: width %d, want %d", n, len(ta), want)
		}
		if d0, d1 := dot(a, b), dot(ta, tb); math.Abs(d0-d1) > 1e-4*math.Max(1, math.Abs(d0)) {
			t.Errorf("%d-d: dot product %v became %v", n, d0, d1)
		}
	}
}

func TestTerms(t *testing.T) {
	got := Terms("The Café’s dogs, ＣＡＦÉ! 我喜欢咖啡。猫")
	want := []string{"café", "dog", "café", "我喜", "喜欢", "欢咖", "咖啡", "猫"}
	if !slices.Equal(got, want) {
		t.Errorf("Terms = %q, want %q", got, want)
	}
}

func TestSecretsAreRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, text := range []string{
		"my key is sk-proj-abcdefghijklmnop1234",
		"use sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA for claude",
		"AWS: AKIAIOSFODNN7EXAMPLE",
		"token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"My password is hunter2",
		"wifi password: correct-horse",
		"我的密码是 123456",
		"card 4111 1111 1111 1111 exp 12/29",
		"4242-4242-4242-4242",
	} {
		_, err := f.svc.Save(ctx, f.ann, KindFact, text, manual, 1)
		wantCode(t, err, errs.Invalid)
		if !strings.Contains(errs.Message(err), "secrets are never saved") {
			t.Errorf("%q: message %q", text, errs.Message(err))
		}
	}
	for _, text := range []string{
		"I walked 1234 5678 steps", // not a Luhn number
		"I forgot my password yesterday",
		"ask me before resetting passwords",
	} {
		if _, err := f.svc.Save(ctx, f.ann, KindFact, text, manual, 1); err != nil {
			t.Errorf("%q refused: %v", text, err)
		}
	}
	if n := len(must(f.svc.List(ctx, f.ann))); n != 3 {
		t.Errorf("%d memories stored, want 3", n)
	}
}

func TestSaveRejectsBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.svc.Save(ctx, f.ann, "gossip", "x y z", manual, 1)
	wantCode(t, err, errs.Invalid)
	_, err = f.svc.Save(ctx, f.ann, KindFact, "  ", manual, 1)
	wantCode(t, err, errs.Invalid)
	_, err = f.svc.Save(ctx, f.ann, KindFact, "the of to", manual, 1)
	wantCode(t, err, errs.Invalid)
	_, err = f.svc.Save(ctx, f.ann, KindFact, "fine", manual, 1.5)
	wantCode(t, err, errs.Invalid)
	_, err = f.svc.Save(ctx, f.ann, KindFact, "fine", Source{Kind: "web"}, 1)
	wantCode(t, err, errs.Invalid)
	_, err = f.svc.Save(ctx, f.ann, KindFact, strings.Repeat("a", MaxTextLen+1), manual, 1)
	wantCode(t, err, errs.Invalid)
}

func TestRoundTrip(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	seq := int64(7)
	src := Source{Kind: SourceChat, SessionID: "sess-1", MessageSeq: &seq}
	m := must(f.svc.Save(ctx, f.ann, KindPreference, "  Prefers window seats on long flights ", src, 0.75))
	if !strings.HasPrefix(m.ID, "mem_") || m.Text != "Prefers window seats on long flights" || m.CreatedAt.IsZero() {
		t.Fatalf("saved %+v", m)
	}
	got := must(f.svc.Get(ctx, f.ann, m.ID))
	if got.Text != m.Text || got.Kind != KindPreference || got.Confidence != 0.75 ||
		got.Source.Kind != SourceChat || got.Source.SessionID != "sess-1" || got.Source.MessageSeq == nil || *got.Source.MessageSeq != 7 {
		t.Errorf("got %+v", got)
	}
	list := must(f.svc.List(ctx, f.ann))
	if len(list) != 1 || list[0].Text != m.Text {
		t.Errorf("list %+v", list)
	}
	res := must(f.svc.Search(ctx, f.ann, "which seat do I like on a flight?", 5))
	if len(res.Hits) != 1 || res.Hits[0].ID != m.ID || res.LexicalOnly || res.Hits[0].Score <= 0 {
		t.Errorf("search %+v", res)
	}
	ok(t, f.svc.MarkUsed(ctx, f.ann, []string{m.ID}))
	if got := must(f.svc.Get(ctx, f.ann, m.ID)); got.UseCount != 1 || got.LastUsedAt == nil {
		t.Errorf("after use %+v", got)
	}
	// The stored ciphertext is bound to its row: moved to another id it does not open.
	other := f.save(t, f.ann, "Lives near the harbour")
	if _, err := storetest.Pool(t, f.db).Exec(`UPDATE memories SET sealed = (SELECT sealed FROM memories WHERE id = ?) WHERE id = ?`, m.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Get(ctx, f.ann, other.ID); !errors.Is(err, crypto.ErrOpen) {
		t.Errorf("moved ciphertext opened: %v", err)
	}
}

func TestOwnerIsolation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.save(t, f.ann, "Ann's locker code lives in the blue notebook")
	f.save(t, f.bob, "Bob likes chess")

	_, err := f.svc.Get(ctx, f.bob, m.ID)
	wantCode(t, err, errs.NotFound)
	_, err = f.svc.Get(ctx, f.bob, "mem_missing")
	wantCode(t, err, errs.NotFound)
	res := must(f.svc.Search(ctx, f.bob, m.Text, 5))
	for _, h := range res.Hits {
		if h.ID == m.ID || h.OwnerID != f.bob {
			t.Errorf("bob found %+v", h)
		}
	}
	_, err = f.svc.Update(ctx, f.bob, m.ID, "Bob was here")
	wantCode(t, err, errs.NotFound)
	wantCode(t, f.svc.Forget(ctx, f.bob, m.ID), errs.NotFound)
	if n := must(f.svc.ForgetAll(ctx, f.bob)); n != 1 {
		t.Errorf("bob forgot %d", n)
	}
	got := must(f.svc.Get(ctx, f.ann, m.ID))
	if got.Text != m.Text {
		t.Errorf("ann's memory changed: %+v", got)
	}
	if res := must(f.svc.Search(ctx, f.ann, "blue notebook", 5)); len(res.Hits) != 1 {
		t.Errorf("ann's search %+v", res)
	}
}

func TestUpdateReplaces(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.save(t, f.ann, "Works at Initech as an accountant")
	f.save(t, f.ann, "Has a cat named Tofu")
	up := must(f.svc.Update(ctx, f.ann, m.ID, "Works at Globex as a designer"))
	if up.ID != m.ID || up.Text != "Works at Globex as a designer" || !up.UpdatedAt.After(m.UpdatedAt) || !up.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("updated %+v", up)
	}
	if res := must(f.svc.Search(ctx, f.ann, "Initech accountant", 5)); len(res.Hits) != 0 {
		t.Errorf("old text still found: %+v", res.Hits)
	}
	res := must(f.svc.Search(ctx, f.ann, "where does she work? Globex?", 5))
	if len(res.Hits) == 0 || res.Hits[0].ID != m.ID || res.Hits[0].Text != up.Text {
		t.Errorf("new text not found: %+v", res.Hits)
	}
	if n := len(must(f.svc.List(ctx, f.ann))); n != 2 {
		t.Errorf("%d memories after update, want 2", n)
	}
}

func TestSearchFallsBackToLexical(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.save(t, f.ann, "Allergic to penicillin")
	f.emb.fail.Store(true)
	res, err := f.svc.Search(ctx, f.ann, "penicillin allergy?", 5)
	if err != nil {
		t.Fatal(err)
	}
	if !res.LexicalOnly || res.VectorErr == nil || len(res.Hits) != 1 || res.Hits[0].ID != m.ID {
		t.Errorf("fallback result %+v", res)
	}
	_, err = f.svc.Save(ctx, f.ann, KindFact, "Likes jazz", manual, 1)
	wantCode(t, err, errs.Unavailable)
}

func TestSearchThreshold(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.save(t, f.ann, "Drives a red bicycle to the office")
	f.save(t, f.ann, "Grows tomatoes on the balcony")
	if res := must(f.svc.Search(ctx, f.ann, "quantum chromodynamics lecture", 5)); len(res.Hits) != 0 {
		t.Errorf("unrelated query found %+v", res.Hits)
	}
}

// dbFiles reads the database and its WAL and shared-memory files as they are.
func (f *fixture) dbFiles(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(f.path + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		out[filepath.Base(f.path)+suffix] = b
	}
	return out
}

func (f *fixture) assertAbsent(t *testing.T, when string, needles map[string][]byte) {
	t.Helper()
	for file, data := range f.dbFiles(t) {
		lower := bytes.ToLower(data)
		for name, n := range needles {
			if bytes.Contains(data, n) || bytes.Contains(lower, bytes.ToLower(n)) {
				t.Errorf("%s: %s contains %s", when, file, name)
			}
		}
	}
}

func TestNoPlaintextInFilesAndForgetIsPhysical(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const sentinel = "Quokka marmalade hides behind the xylophone in Reykjavik"
	needles := map[string][]byte{"the sentinel": []byte(sentinel)}
	for _, w := range strings.Fields(sentinel) {
		if len(w) >= 4 {
			needles["word "+w] = []byte(w)
		}
	}
	f.save(t, f.ann, "Some other memory about gardening")
	m := f.save(t, f.ann, sentinel)
	f.assertAbsent(t, "after save", needles)

	res := must(f.svc.Search(ctx, f.ann, "where is the xylophone?", 5))
	if len(res.Hits) == 0 || res.Hits[0].ID != m.ID {
		t.Fatalf("sentinel not found: %+v", res.Hits)
	}
	ok(t, f.svc.MarkUsed(ctx, f.ann, []string{m.ID}))
	f.assertAbsent(t, "after search", needles)

	// What forgetting must remove: the ciphertext, the vector and the tags.
	var sealed, vec []byte
	var seq int64
	if err := storetest.Pool(t, f.db).QueryRow(`SELECT seq, sealed FROM memories WHERE id = ?`, m.ID).Scan(&seq, &sealed); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Pool(t, f.db).QueryRow(`SELECT embedding FROM memory_embeddings WHERE seq = ?`, seq).Scan(&vec); err != nil {
		t.Fatal(err)
	}
	stored := map[string][]byte{"the ciphertext": sealed, "the vector": vec[:64]}
	rows, err := storetest.Pool(t, f.db).Query(`SELECT term FROM memory_terms WHERE memory_seq = ?`, seq)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tag []byte
		rows.Scan(&tag)
		stored["tag "+string(rune('a'+len(stored)))] = tag
	}
	rows.Close()
	if err := f.db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, data := range f.dbFiles(t) {
		found = found || bytes.Contains(data, sealed)
	}
	if !found {
		t.Fatal("the scan cannot see the ciphertext even before forgetting")
	}

	ok(t, f.svc.Forget(ctx, f.ann, m.ID))
	if res := must(f.svc.Search(ctx, f.ann, "where is the xylophone?", 5)); len(res.Hits) != 0 {
		t.Errorf("forgotten memory found: %+v", res.Hits)
	}
	f.assertAbsent(t, "after forget", needles)
	for file, data := range f.dbFiles(t) {
		for name, n := range stored {
			if bytes.Contains(data, n) {
				t.Errorf("after forget: %s still contains %s", file, name)
			}
		}
	}
}

func TestForgetAll(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, s := range []string{"Likes hiking", "Speaks Portuguese", "Owns a kayak"} {
		f.save(t, f.ann, s)
	}
	f.save(t, f.bob, "Owns a kayak too")
	if n := must(f.svc.ForgetAll(ctx, f.ann)); n != 3 {
		t.Errorf("forgot %d", n)
	}
	if l := must(f.svc.List(ctx, f.ann)); len(l) != 0 {
		t.Errorf("left %+v", l)
	}
	if res := must(f.svc.Search(ctx, f.ann, "kayak", 5)); len(res.Hits) != 0 {
		t.Errorf("found %+v", res.Hits)
	}
	if res := must(f.svc.Search(ctx, f.bob, "kayak", 5)); len(res.Hits) != 1 {
		t.Errorf("bob's kayak: %+v", res.Hits)
	}
}

func TestMixedLanguageRetrieval(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	texts := []string{
		"My dog is called Biscuit, a golden retriever",
		"I am allergic to peanuts",
		"Prefers answers in British English", // no query: nothing shared with "which spelling?"
		"Team meetings are every Monday at 9am",
		"My sister lives in Berlin and works as a nurse",
		"I'm learning to play the piano",
		"我住在上海浦东",
		"我喜欢喝乌龙茶，不喜欢咖啡",
		"我的女儿叫小美，今年五岁",
		"我对猫毛过敏",
		"我的牙医是 Dr. Wong，诊所在中环",
		"Runs a marathon every spring",
		"周末常去西湖骑自行车",
	}
	byText := map[string]string{}
	for _, s := range texts {
		byText[s] = f.save(t, f.ann, s).ID
	}
	// Noise from another owner must never show up.
	for _, s := range texts {
		f.save(t, f.bob, s)
	}
	for q, want := range map[string]string{
		"What's the name of my dog?":    texts[0],
		"which foods am I allergic to?": texts[1],
		"when are my meetings":          texts[3],
		"where does my sister live":     texts[4],
		"what instrument am I learning": texts[5],
		"我住在哪个城市？":                      texts[6],
		"我喜欢什么茶？":                       texts[7],
		"我女儿几岁了":                        texts[8],
		"猫会让我过敏吗":                       texts[9],
		"who is my dentist? 牙医叫什么":      texts[10],
		"what do I do in spring":        texts[11],
		"周末去哪里骑车":                       texts[12],
	} {
		res := must(f.svc.Search(ctx, f.ann, q, 5))
		pos := slices.Index(ids(res.Hits), byText[want])
		if pos < 0 {
			t.Errorf("%q did not find %q in %v", q, want, hitTexts(res.Hits))
		}
		for _, h := range res.Hits {
			if h.OwnerID != f.ann {
				t.Errorf("%q found bob's memory", q)
			}
		}
	}
}

func hitTexts(hs []Hit) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Text)
	}
	return out
}

func TestExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.save(t, f.ann, "Staying at the Hotel Aurora until Friday")
	keep := f.save(t, f.ann, "Hotel loyalty number is with the travel agent")
	wantCode(t, f.svc.SetExpiry(ctx, f.bob, m.ID, nil), errs.NotFound)
	past := f.db.Now().Add(-time.Hour)
	ok(t, f.svc.SetExpiry(ctx, f.ann, m.ID, &past))
	if res := must(f.svc.Search(ctx, f.ann, "Aurora hotel", 5)); slices.Contains(ids(res.Hits), m.ID) {
		t.Errorf("expired memory found")
	}
	if l := must(f.svc.List(ctx, f.ann)); len(l) != 1 || l[0].ID != keep.ID {
		t.Errorf("list %+v", l)
	}
	if n := must(f.svc.PurgeExpired(ctx)); n != 1 {
		t.Errorf("purged %d", n)
	}
	var left int
	ok(t, storetest.Pool(t, f.db).QueryRow(`SELECT COUNT(*) FROM memories`).Scan(&left))
	if left != 1 {
		t.Errorf("%d rows left", left)
	}
}

func TestConcurrentUse(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		owner := f.ann
		if g%2 == 1 {
			owner = f.bob
		}
		wg.Go(func() {
			for i := range 10 {
				m, err := f.svc.Save(ctx, owner, KindFact, fmt.Sprintf("worker %d remembers item number %d", g, i), manual, 0.5)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := f.svc.Search(ctx, owner, "remembers item", 5); err != nil {
					t.Error(err)
				}
				if i%3 == 0 {
					if err := f.svc.Forget(ctx, owner, m.ID); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, owner := range []int64{f.ann, f.bob} {
		if l := must(f.svc.List(ctx, owner)); len(l) != 12 {
			t.Errorf("owner %d has %d memories, want 12", owner, len(l))
		}
	}
}

// An owner past exactBelow is searched through the bit prefilter.
func TestSearchLargeOwner(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	v := newBenchVocab(3)
	for range exactBelow + 40 {
		f.save(t, f.ann, v.text())
	}
	dog := f.save(t, f.ann, "My dog is called Biscuit")
	tea := f.save(t, f.ann, "我喜欢喝乌龙茶")
	if !must(f.db.HasMoreMemories(ctx, f.ann, exactBelow)) {
		t.Fatal("owner not large enough to take the prefilter path")
	}
	for q, want := range map[string]string{"what's my dog's name": dog.ID, "我喜欢什么茶": tea.ID} {
		res := must(f.svc.Search(ctx, f.ann, q, 5))
		if len(res.Hits) == 0 || res.Hits[0].ID != want {
			t.Errorf("%q: %v", q, hitTexts(res.Hits))
		}
	}
}
