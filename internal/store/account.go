package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"unicode/utf8"

	"atrium/internal/errs"
)

// Limits of what a user writes for the model, in characters: long enough for a
// paragraph or two, short enough to stay inside the pinned zone's budget.
const (
	MaxAboutMe      = 1500
	MaxAnswerStyle  = 1500
	MaxSystemPrompt = 4000
)

// Instructions are a user's custom instructions, added to every chat's pinned zone.
type Instructions struct {
	AboutMe     string // what the model should know about the user
	AnswerStyle string // how the user wants answers
}

// UserInstructions returns user id's custom instructions; a missing user is
// errs.NotFound.
func (db *DB) UserInstructions(ctx context.Context, id int64) (Instructions, error) {
	var in Instructions
	err := db.pool.QueryRowContext(ctx, `SELECT about_me, answer_style FROM users WHERE id = ?`, id).Scan(&in.AboutMe, &in.AnswerStyle)
	if errors.Is(err, sql.ErrNoRows) {
		err = errs.E(errs.NotFound, "user not found")
	}
	if err != nil {
		return Instructions{}, fmt.Errorf("store: user instructions: %w", err)
	}
	return in, nil
}

// SetUserInstructions replaces user id's custom instructions. Over a limit is
// errs.Invalid.
func (db *DB) SetUserInstructions(ctx context.Context, id int64, in Instructions) error {
	if err := checkLength("About you", in.AboutMe, MaxAboutMe); err != nil {
		return err
	}
	if err := checkLength("How to answer", in.AnswerStyle, MaxAnswerStyle); err != nil {
		return err
	}
	res, err := db.exec(ctx, `UPDATE users SET about_me = ?, answer_style = ?, updated_at = ? WHERE id = ?`,
		in.AboutMe, in.AnswerStyle, ms(db.now()), id)
	if err == nil {
		err = mustAffect(res, "user not found")
	}
	if err != nil {
		return fmt.Errorf("store: set user instructions: %w", err)
	}
	return nil
}

// SetUserTheme sets user id's theme; an unknown theme is errs.Invalid.
func (db *DB) SetUserTheme(ctx context.Context, id int64, theme string) error {
	if theme != ThemeSystem && theme != ThemeLight && theme != ThemeDark {
		return errs.E(errs.Invalid, "Pick a theme: system, light or dark.")
	}
	res, err := db.exec(ctx, `UPDATE users SET theme = ?, updated_at = ? WHERE id = ?`, theme, ms(db.now()), id)
	if err == nil {
		err = mustAffect(res, "user not found")
	}
	if err != nil {
		return fmt.Errorf("store: set user theme: %w", err)
	}
	return nil
}

// SetSessionSystemPrompt sets a chat's own instructions. Missing or foreign is
// errs.NotFound; over MaxSystemPrompt is errs.Invalid.
func (db *DB) SetSessionSystemPrompt(ctx context.Context, id string, owner int64, prompt string) error {
	if err := checkLength("The chat's instructions", prompt, MaxSystemPrompt); err != nil {
		return err
	}
	return db.updateSession(ctx, "set session system prompt", "system_prompt = ?", id, owner, prompt)
}

// checkLength refuses text over max characters, naming the field.
func checkLength(field, text string, max int) error {
	if n := utf8.RuneCountInString(text); n > max {
		return errs.E(errs.Invalid, "%s is %d characters long; the limit is %d.", field, n, max)
	}
	if !utf8.ValidString(text) {
		return errs.E(errs.Invalid, "%s is not valid UTF-8 text.", field)
	}
	return nil
}
