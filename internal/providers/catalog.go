// Package providers knows the configured model providers: it turns a model choice into a
// ready provider client, lists the choices for pickers, and keeps API keys sealed.
package providers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/trace"
)

// DefaultModelSetting is the settings key holding the instance's default model choice.
const DefaultModelSetting = "default_model"

// Store is what this package needs of the database.
type Store interface {
	ProviderByID(ctx context.Context, id int64) (store.Provider, error)
	ListProviders(ctx context.Context) ([]store.Provider, error)
	SaveProvider(ctx context.Context, p *store.Provider, sealKey func(id int64) ([]byte, error)) error
	Setting(ctx context.Context, key string) (string, error)
	SetSetting(ctx context.Context, key, value string) error
}

// Sealer seals and opens secrets for an owner (owner 0 is the instance).
type Sealer interface {
	Prepare(ctx context.Context, owner int64) error
	Seal(ctx context.Context, owner int64, plaintext, ad []byte) ([]byte, error)
	Open(ctx context.Context, owner int64, sealed, ad []byte) ([]byte, error)
}

// Catalog resolves model choices. Safe for concurrent use.
type Catalog struct {
	Store        Store
	Keys         Sealer
	StartTimeout time.Duration
	IdleTimeout  time.Duration
	// Redactor, when set, learns every API key this catalog opens, so that traces
	// never store one, and provider HTTP requests are captured for the trace.
	Redactor *trace.Redactor
}

// Choice is one selectable model.
type Choice struct {
	Value string // "providerID:model", stored in sessions.model and the default setting
	Label string // "Provider / model"
	// Vision: the model takes images (see Catalog.Vision).
	Vision bool
}

// Value joins a provider id and a model name into a choice value.
func Value(providerID int64, model string) string {
	return strconv.FormatInt(providerID, 10) + ":" + model
}

// ParseValue splits a choice value.
func ParseValue(v string) (int64, string, error) {
	id, model, ok := strings.Cut(v, ":")
	pid, err := strconv.ParseInt(id, 10, 64)
	if !ok || err != nil || pid <= 0 || model == "" {
		return 0, "", errs.E(errs.Invalid, "Unknown model choice %q.", v)
	}
	return pid, model, nil
}

// KeyAD binds a provider's sealed API key to its row.
func KeyAD(providerID int64) []byte {
	return crypto.AD("provider", strconv.FormatInt(providerID, 10), "api_key")
}

// Resolve returns the provider client and model name for a session's choice; an empty
// choice means the instance default. Errors say what the user or admin should fix.
func (c *Catalog) Resolve(ctx context.Context, choice string) (llm.Provider, string, error) {
	if choice == "" {
		def, err := c.Store.Setting(ctx, DefaultModelSetting)
		if err != nil && !errs.Is(err, errs.NotFound) {
			return nil, "", err
		}
		choice = def
	}
	if choice == "" {
		return nil, "", errs.E(errs.Unavailable, "No model is configured. An admin can add a provider and pick a default model in Settings → Providers.")
	}
	pid, model, err := ParseValue(choice)
	if err != nil {
		return nil, "", err
	}
	p, err := c.Store.ProviderByID(ctx, pid)
	if errs.Is(err, errs.NotFound) {
		return nil, "", errs.E(errs.Unavailable, "The provider for model %q was removed. Pick another model for this chat.", model)
	}
	if err != nil {
		return nil, "", err
	}
	client, err := c.Client(ctx, p)
	if err != nil {
		return nil, "", err
	}
	return client, model, nil
}

// Client builds a provider client from a stored provider, opening its API key.
func (c *Catalog) Client(ctx context.Context, p store.Provider) (llm.Provider, error) {
	key, err := c.openKey(ctx, p)
	if err != nil {
		return nil, err
	}
	return c.client(p, key)
}

// client builds a provider client for p with the plaintext key (which may be "").
func (c *Catalog) client(p store.Provider, key string) (llm.Provider, error) {
	cfg := llm.Config{Kind: p.Kind, BaseURL: p.BaseURL, APIKey: key,
		StartTimeout: c.StartTimeout, IdleTimeout: c.IdleTimeout}
	if c.Redactor != nil {
		c.Redactor.AddSecret(key)
		cfg.HTTPClient = capturingClient
	}
	client, err := llm.New(cfg)
	if err != nil {
		var le *llm.Error
		if errors.As(err, &le) {
			return nil, errs.Wrap(errs.Unavailable, err, "Provider %q is misconfigured: %s", p.Name, le.Error())
		}
		return nil, fmt.Errorf("providers: provider %d: %w", p.ID, err)
	}
	return client, nil
}

// capturingClient reports every provider request (exact body, headers) to the trace
// capture in the request's context; without one it is a plain client.
var capturingClient = &http.Client{Transport: llm.CaptureTransport(http.DefaultTransport)}

// Choices lists every configured model, providers by name, models in stored order.
func (c *Catalog) Choices(ctx context.Context) ([]Choice, error) {
	ps, err := c.Store.ListProviders(ctx)
	if err != nil {
		return nil, err
	}
	var out []Choice
	for _, p := range ps {
		for _, m := range p.Models {
			out = append(out, Choice{Value: Value(p.ID, m), Label: p.Name + " / " + m,
				Vision: p.Kind == store.KindAnthropic || p.Windows[m].Vision})
		}
	}
	return out, nil
}

// Default returns the instance's default choice, or "" when none is set.
func (c *Catalog) Default(ctx context.Context) (string, error) {
	v, err := c.Store.Setting(ctx, DefaultModelSetting)
	if errs.Is(err, errs.NotFound) {
		return "", nil
	}
	return v, err
}
