package store

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Where a chat's title came from (sessions.title_source).
const (
	TitleByUser      = "user"       // typed by the user: never replaced
	TitleFromMessage = "first_line" // the first message's first line, until the model writes one
	TitleByModel     = "model"      // written by the model after the first reply
)

// MaxTitle is the longest title kept, in characters.
const MaxTitle = 120

// CleanTitle trims a title to one line of at most MaxTitle characters, without control
// characters (NUL, ESC, the rest of C0 and C1) or bidi controls, which could garble
// the chat list or make a title read differently from what it is (U+202E).
func CleanTitle(t string) string {
	t = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r), IsBidiControl(r), r == utf8.RuneError:
			return -1
		}
		return r
	}, t)
	t = strings.Join(strings.Fields(t), " ")
	if utf8.RuneCountInString(t) > MaxTitle {
		t = string([]rune(t)[:MaxTitle-1]) + "…"
	}
	return t
}

// IsBidiControl reports the explicit bidi formatting characters: embeddings and
// overrides (U+202A–U+202E), isolates (U+2066–U+2069) and the marks LRM, RLM and ALM.
func IsBidiControl(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) || r == 0x200E || r == 0x200F || r == 0x061C
}

// SetFirstLineTitle gives an untitled chat its first message's first line as a
// provisional title. It reports whether the chat was still untitled.
func (db *DB) SetFirstLineTitle(ctx context.Context, id string, owner int64, title string) (bool, error) {
	return db.setTitleIf(ctx, "set first-line title", id, owner, title, TitleFromMessage, `title = ''`)
}

// SetModelTitle replaces a provisional (first-line) title with the model's. It
// reports whether it did: a title the user typed meanwhile always wins.
func (db *DB) SetModelTitle(ctx context.Context, id string, owner int64, title string) (bool, error) {
	return db.setTitleIf(ctx, "set model title", id, owner, title, TitleByModel, `title_source = 'first_line'`)
}

func (db *DB) setTitleIf(ctx context.Context, op, id string, owner int64, title, source, cond string) (bool, error) {
	res, err := db.exec(ctx, `UPDATE sessions SET title = ?, title_source = ?, updated_at = ?
		WHERE id = ? AND owner_id = ? AND `+cond, title, source, ms(db.now()), id, owner)
	if err != nil {
		return false, fmt.Errorf("store: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: %s: %w", op, err)
	}
	return n == 1, nil
}
