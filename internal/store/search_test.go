package store_test

import (
	"context"
	"fmt"
	"testing"

	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

func searchIDs(t *testing.T, db *store.DB, owner int64, q string) []string {
	t.Helper()
	hits, err := db.SearchChats(context.Background(), owner, q, 20)
	mustNil(t, err)
	var out []string
	for _, h := range hits {
		if h.MessageID == 0 {
			out = append(out, "title:"+h.SessionID)
		} else {
			out = append(out, fmt.Sprintf("%s#%d", h.SessionID, h.Seq))
		}
	}
	return out
}

func wantHits(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("hits %v, want %v", got, want)
	}
}

func TestSearchChats(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	a := store.Session{ID: "a", OwnerID: ann.ID, Title: "Holiday plans"}
	mustNil(t, db.CreateSession(ctx, &a))
	tmp := store.Session{ID: "tmp", OwnerID: ann.ID, Title: "Holiday secret", Temporary: true}
	mustNil(t, db.CreateSession(ctx, &tmp))
	b := store.Session{ID: "b", OwnerID: bob.ID, Title: "Bob's holiday"}
	mustNil(t, db.CreateSession(ctx, &b))
	for _, m := range []*store.Message{
		{SessionID: "a", Role: store.RoleUser, Content: "My cat Pixelbert likes <b>tuna</b>"},
		{SessionID: "a", Role: store.RoleAssistant, Content: "我的猫喜欢吃鱼。Noted."},
		{SessionID: "a", Role: store.RoleTool, Content: "toolonlyword"},
		{SessionID: "tmp", Role: store.RoleUser, Content: "Pixelbert in a temporary chat"},
		{SessionID: "b", Role: store.RoleUser, Content: "Bob's Pixelbert 猫"},
	} {
		mustNil(t, db.AppendMessage(ctx, m))
	}

	wantHits(t, searchIDs(t, db, ann.ID, "xelber"), "a#1")         // substring, not a word start
	wantHits(t, searchIDs(t, db, ann.ID, "PIXELBERT tuna"), "a#1") // case-insensitive, all words
	wantHits(t, searchIDs(t, db, ann.ID, "喜欢吃"), "a#2")            // Chinese through the trigram index
	wantHits(t, searchIDs(t, db, ann.ID, "猫"), "a#2")              // one character: LIKE, still per user
	wantHits(t, searchIDs(t, db, ann.ID, "猫 Noted"), "a#2")        // short word filters the index's hits
	wantHits(t, searchIDs(t, db, ann.ID, "holiday"), "title:a")    // titles; not the temporary chat's, not bob's
	wantHits(t, searchIDs(t, db, ann.ID, "toolonlyword"))          // tool results are not indexed
	wantHits(t, searchIDs(t, db, ann.ID, `"pixel`))                // quotes are text, not FTS syntax
	wantHits(t, searchIDs(t, db, ann.ID, "100%"))                  // LIKE wildcards are text
	wantHits(t, searchIDs(t, db, bob.ID, "Pixelbert"), "b#1")

	// A reply rewritten while it streams is reindexed: the old text no longer matches.
	r := store.Message{SessionID: "a", Role: store.RoleAssistant, Content: "draftword"}
	mustNil(t, db.AppendMessage(ctx, &r))
	wantHits(t, searchIDs(t, db, ann.ID, "draftword"), "a#4")
	r.Content = "finalword"
	mustNil(t, db.UpdateMessage(ctx, &r))
	wantHits(t, searchIDs(t, db, ann.ID, "draftword"))
	wantHits(t, searchIDs(t, db, ann.ID, "finalword"), "a#4")
}

// ftsTerms counts the index's pages (its shadow table's blobs) that hold the bytes of
// term: without secure-delete a deleted row's terms stay there behind delete markers.
func ftsTerms(t *testing.T, db *store.DB, term string) int64 {
	t.Helper()
	return storetest.Int(t, db, `SELECT count(*) FROM message_fts_data WHERE instr(block, CAST(? AS BLOB)) > 0`, term)
}

func TestSearchIndexForgetsDeletedText(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	mustSession(t, db, "a", ann.ID)
	mustSession(t, db, "b", bob.ID)
	// Many other rows, so that the deleted ones share segments with live ones.
	for i := range 200 {
		mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "a", Role: store.RoleUser, Content: fmt.Sprintf("ordinary text %d", i)}))
	}
	mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "a", Role: store.RoleUser, Content: "qqjjzz"}))
	mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "b", Role: store.RoleUser, Content: "vvkkxx"}))
	if ftsTerms(t, db, "qjj") == 0 || ftsTerms(t, db, "vkk") == 0 {
		t.Fatal("the unique words were not indexed")
	}
	mustNil(t, db.DeleteSession(ctx, "a", ann.ID))
	if n := ftsTerms(t, db, "qjj"); n != 0 {
		t.Errorf("a deleted chat's trigrams are still in the index (%d)", n)
	}
	mustNil(t, db.DeleteUser(ctx, bob.ID))
	if n := ftsTerms(t, db, "vkk"); n != 0 {
		t.Errorf("a deleted user's trigrams are still in the index (%d)", n)
	}
}
