package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/store"
)

var benchWords = strings.Fields(`the a model reply context window token budget summary memory tool call result
	server database search index chat message user assistant browser stream error retry page cache
	golang sqlite python docker network kernel socket thread buffer parser schema migration
	我的 猫 喜欢 吃鱼 今天 天气 很好 数据库 搜索 模型`)

// benchText is a message of about 40 words drawn from benchWords, plus one word
// unique to the message (m<chat>x<seq>) so that rare queries have a single hit.
func benchText(r *rand.Rand, chat, seq int) string {
	var b strings.Builder
	for i := range 40 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(benchWords[r.IntN(len(benchWords))])
	}
	fmt.Fprintf(&b, " m%dx%d", chat, seq)
	return b.String()
}

// BenchmarkSearchChats: one user with 1,000 chats × 100 messages (100,000 indexed
// messages, about 300 bytes each) and a second user with 100 × 100, searched with a
// rare word, a common word (matches most messages), Chinese, two words, and a
// two-character word (the LIKE path). p50-ms is the median of the iterations.
func BenchmarkSearchChats(b *testing.B) {
	db := mustOpen(b)
	ctx := context.Background()
	ann := mustUser(b, db, "ann", store.RoleUser)
	bob := mustUser(b, db, "bob", store.RoleUser)
	r := rand.New(rand.NewPCG(1, 2))
	fill := func(owner int64, prefix string, chats int) {
		for c := range chats {
			sid := fmt.Sprint(prefix, c)
			mustSession(b, db, sid, owner)
			msgs := make([]*store.Message, 100)
			for i := range msgs {
				role := store.RoleUser
				if i%2 == 1 {
					role = store.RoleAssistant
				}
				msgs[i] = &store.Message{SessionID: sid, Role: role, Content: benchText(r, c, i)}
			}
			if err := db.AppendMessages(ctx, msgs); err != nil {
				b.Fatal(err)
			}
		}
	}
	start := time.Now()
	fill(ann.ID, "a", 1000)
	fill(bob.ID, "b", 100)
	// carol has one chat of two messages beside ann's 100,000: her searches must not
	// read ann's matches.
	carol := mustUser(b, db, "carol", store.RoleUser)
	mustSession(b, db, "c", carol.ID)
	mustNil(b, db.AppendMessages(ctx, []*store.Message{{SessionID: "c", Role: store.RoleUser, Content: "where is my cat"},
		{SessionID: "c", Role: store.RoleAssistant, Content: "on the mat"}}))
	b.Logf("filled 110,002 messages in %v", time.Since(start).Round(time.Millisecond))
	search := func(b *testing.B, owner int64, q string, wantHits bool) {
		b.Run(q, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				t0 := time.Now()
				hits, err := db.SearchChats(ctx, owner, q, 20)
				times = append(times, time.Since(t0))
				if err != nil || (len(hits) > 0) != wantHits {
					b.Fatalf("%d hits, %v", len(hits), err)
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		})
	}
	for _, q := range []string{"m17x42", "database", "数据库", "sqlite kernel", "猫", "docker m999x99"} {
		search(b, ann.ID, q, true)
	}
	// dave has 900 messages, just under the size at which a search for a short word
	// starts from every message instead of from his own.
	dave := mustUser(b, db, "dave", store.RoleUser)
	fill(dave.ID, "d", 9)
	b.Run("few", func(b *testing.B) {
		for _, q := range []string{"database", "数据库", "a", "cat"} {
			search(b, carol.ID, q, q == "a" || q == "cat")
		}
	})
	b.Run("under1000", func(b *testing.B) {
		for _, q := range []string{"m3x42", "database", "数据库", "猫"} {
			search(b, dave.ID, q, true)
		}
	})
}

// BenchmarkAppendIndexed: what the index costs per message append, as the ratio of an
// indexed chat's append to a temporary (unindexed) chat's in the same run.
func BenchmarkAppendIndexed(b *testing.B) {
	for _, temporary := range []bool{false, true} {
		b.Run(fmt.Sprintf("temporary=%v", temporary), func(b *testing.B) {
			db := mustOpen(b)
			ctx := context.Background()
			u := mustUser(b, db, "ann", store.RoleUser)
			s := store.Session{ID: "s", OwnerID: u.ID, Temporary: temporary}
			mustNil(b, db.CreateSession(ctx, &s))
			r := rand.New(rand.NewPCG(1, 2))
			i := 0
			for b.Loop() {
				i++
				if err := db.AppendMessage(ctx, &store.Message{SessionID: "s", Role: store.RoleUser, Content: benchText(r, 0, i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
