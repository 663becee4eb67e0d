package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Provider kinds.
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
)

// Provider is a configured model endpoint. APIKeySealed is ciphertext from the
// crypto package; the store never sees the key itself.
type Provider struct {
	ID           int64
	Name         string
	Kind         string
	BaseURL      string
	APIKeySealed []byte
	Models       []string
	// Windows holds the context windows known for some of Models; a model without
	// one uses the instance's window.
	Windows   map[string]ModelWindow
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ModelWindow is what is known of one model: its context window in tokens (0: the
// instance's) and whether it takes images. Reported says the endpoint's model list gave
// the window (refreshing the list may change it); otherwise an admin typed it. Vision
// is only ever typed by an admin ("vision" after the model's name).
type ModelWindow struct {
	Tokens   int  `json:"tokens"`
	Reported bool `json:"reported,omitempty"`
	Vision   bool `json:"vision,omitempty"`
}

const providerCols = `id, name, kind, base_url, api_key_sealed, models, model_windows, created_at, updated_at`

func scanProvider(row scanner) (Provider, error) {
	var p Provider
	var models, windows string
	var created, updated int64
	if err := row.Scan(&p.ID, &p.Name, &p.Kind, &p.BaseURL, &p.APIKeySealed, &models, &windows, &created, &updated); err != nil {
		return Provider{}, err
	}
	if err := json.Unmarshal([]byte(models), &p.Models); err != nil {
		return Provider{}, fmt.Errorf("decode models: %w", err)
	}
	if err := json.Unmarshal([]byte(windows), &p.Windows); err != nil {
		return Provider{}, fmt.Errorf("decode model windows: %w", err)
	}
	p.CreatedAt, p.UpdatedAt = fromMS(created), fromMS(updated)
	return p, nil
}

func validProvider(p *Provider) (models, windows string, err error) {
	if strings.TrimSpace(p.Name) == "" {
		return "", "", errs.E(errs.Invalid, "provider name is required")
	}
	if p.Kind != KindOpenAI && p.Kind != KindAnthropic {
		return "", "", errs.E(errs.Invalid, "unknown provider kind %q", p.Kind)
	}
	list := p.Models
	if list == nil {
		list = []string{}
	}
	b, err := json.Marshal(list)
	if err != nil {
		return "", "", err
	}
	// Only windows of listed models are kept: a removed model takes its window along.
	kept := map[string]ModelWindow{}
	for _, m := range list {
		if w, ok := p.Windows[m]; ok && (w.Tokens > 0 || w.Vision) {
			kept[m] = w
		}
	}
	w, err := json.Marshal(kept)
	if err != nil {
		return "", "", err
	}
	return string(b), string(w), nil
}

// querier is what provider writes need: the database, or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// CreateProvider inserts p and sets its ID and timestamps. A taken name (case
// insensitive) is errs.Conflict; a bad kind or empty name errs.Invalid.
func (db *DB) CreateProvider(ctx context.Context, p *Provider) error {
	if err := db.inTx(ctx, func(tx *sql.Tx) error { return db.createProvider(ctx, tx, p) }); err != nil {
		return fmt.Errorf("store: create provider: %w", err)
	}
	return nil
}

func (db *DB) createProvider(ctx context.Context, q querier, p *Provider) error {
	models, windows, err := validProvider(p)
	if err != nil {
		return err
	}
	now := ms(db.now())
	err = q.QueryRowContext(ctx, `INSERT INTO providers (name, kind, base_url, api_key_sealed, models, model_windows, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		p.Name, p.Kind, p.BaseURL, p.APIKeySealed, models, windows, now, now).Scan(&p.ID)
	if isUnique(err) {
		return errs.Wrap(errs.Conflict, err, "a provider named %q already exists", p.Name)
	}
	if err != nil {
		return err
	}
	p.CreatedAt, p.UpdatedAt = fromMS(now), fromMS(now)
	return nil
}

// UpdateProvider replaces every field of provider p.ID (except CreatedAt) and
// bumps UpdatedAt. Missing is errs.NotFound; a taken name errs.Conflict.
func (db *DB) UpdateProvider(ctx context.Context, p Provider) error {
	if err := db.inTx(ctx, func(tx *sql.Tx) error { return db.updateProvider(ctx, tx, &p) }); err != nil {
		return fmt.Errorf("store: update provider: %w", err)
	}
	return nil
}

func (db *DB) updateProvider(ctx context.Context, q querier, p *Provider) error {
	models, windows, err := validProvider(p)
	if err != nil {
		return err
	}
	now := ms(db.now())
	res, err := q.ExecContext(ctx, `UPDATE providers SET name = ?, kind = ?, base_url = ?, api_key_sealed = ?, models = ?, model_windows = ?, updated_at = ?
		WHERE id = ?`, p.Name, p.Kind, p.BaseURL, p.APIKeySealed, models, windows, now, p.ID)
	if isUnique(err) {
		return errs.Wrap(errs.Conflict, err, "a provider named %q already exists", p.Name)
	}
	if err == nil {
		err = mustAffect(res, "provider not found")
	}
	if err != nil {
		return err
	}
	p.UpdatedAt = fromMS(now)
	return nil
}

// SaveProvider writes p with its models in one transaction: it inserts p when p.ID is
// 0 (setting ID and timestamps) and replaces provider p.ID otherwise. When sealKey is
// set, its result for the row's id becomes p.APIKeySealed. The key is sealed to the
// row's id, which a new row only has inside the transaction; so a failure leaves
// neither a provider without its key nor a half-written one. Errors as CreateProvider
// and UpdateProvider; an error from sealKey is returned as is.
func (db *DB) SaveProvider(ctx context.Context, p *Provider, sealKey func(id int64) ([]byte, error)) error {
	saved := *p
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if saved.ID == 0 {
			if err := db.createProvider(ctx, tx, &saved); err != nil {
				return err
			}
			if sealKey == nil {
				return nil
			}
		}
		if sealKey != nil {
			sealed, err := sealKey(saved.ID)
			if err != nil {
				return err
			}
			saved.APIKeySealed = sealed
		}
		return db.updateProvider(ctx, tx, &saved)
	})
	if err != nil {
		return fmt.Errorf("store: save provider: %w", err)
	}
	*p = saved
	return nil
}

// DeleteProvider removes a provider, or returns errs.NotFound.
func (db *DB) DeleteProvider(ctx context.Context, id int64) error {
	res, err := db.exec(ctx, `DELETE FROM providers WHERE id = ?`, id)
	if err == nil {
		err = mustAffect(res, "provider not found")
	}
	if err != nil {
		return fmt.Errorf("store: delete provider: %w", err)
	}
	return nil
}

// ProviderByID returns the provider or errs.NotFound.
func (db *DB) ProviderByID(ctx context.Context, id int64) (Provider, error) {
	p, err := scanProvider(db.pool.QueryRowContext(ctx, `SELECT `+providerCols+` FROM providers WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Provider{}, fmt.Errorf("store: provider by id: %w", errs.E(errs.NotFound, "provider not found"))
	}
	if err != nil {
		return Provider{}, fmt.Errorf("store: provider by id: %w", err)
	}
	return p, nil
}

// ListProviders returns all providers ordered by name.
func (db *DB) ListProviders(ctx context.Context) ([]Provider, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+providerCols+` FROM providers ORDER BY name, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list providers: %w", err)
	}
	ps, err := scanAll(rows, scanProvider)
	if err != nil {
		return nil, fmt.Errorf("store: list providers: %w", err)
	}
	return ps, nil
}
