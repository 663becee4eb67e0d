package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"atrium/internal/errs"
)

// Settings are a user's choices about memory.
type Settings struct {
	// Enabled: memories are looked up for the user's messages and explicit
	// "remember"/"forget" requests are acted on. Off, memory is neither read nor
	// written in chats (the Memories page still works).
	Enabled bool `json:"enabled"`
	// Extract: after each reply the model is asked what is worth keeping.
	Extract bool `json:"extract"`
	// Ask: what extraction would add or update is kept as a suggestion for the
	// user to accept or reject instead of being written.
	Ask bool `json:"ask"`

	// From the instance settings, not the user's: an admin turned memory off for
	// everyone, and the model extraction asks ("" = the chat's).
	InstanceOff bool   `json:"-"`
	Model       string `json:"-"`
}

// Active reports whether memory is read and written in the user's chats: both the
// user and the instance have it on.
func (st Settings) Active() bool { return st.Enabled && !st.InstanceOff }

// DefaultSettings are what a user has who never changed them.
var DefaultSettings = Settings{Enabled: true, Extract: true}

func settingsKey(owner int64) string { return "memory.user." + strconv.FormatInt(owner, 10) }

// Settings returns owner's memory settings (DefaultSettings when never set), with
// the instance's switch and memory model.
func (s *Service) Settings(ctx context.Context, owner int64) (Settings, error) {
	in := s.Instance()
	st := DefaultSettings
	st.InstanceOff, st.Model = !in.Enabled, in.Model
	v, err := s.db.Setting(ctx, settingsKey(owner))
	if errs.Is(err, errs.NotFound) {
		return st, nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("memory: settings: %w", err)
	}
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return DefaultSettings, fmt.Errorf("memory: settings: %w", err)
	}
	return st, nil
}

// SetSettings stores owner's memory settings. Turning memory off deletes the
// pending suggestions: they hold memory text the user no longer wants kept.
func (s *Service) SetSettings(ctx context.Context, owner int64, st Settings) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := s.db.SetSetting(ctx, settingsKey(owner), string(b)); err != nil {
		return fmt.Errorf("memory: set settings: %w", err)
	}
	if !st.Enabled {
		if _, err := s.db.DeleteOwnerMemorySuggestions(ctx, owner); err != nil {
			return fmt.Errorf("memory: set settings: %w", err)
		}
	}
	return nil
}
