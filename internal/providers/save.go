package providers

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// OpenAIBaseURL is the official endpoint, used when an OpenAI provider names none.
const OpenAIBaseURL = "https://api.openai.com/v1"

// maxListedModels caps how many listed models a provider keeps: some endpoints list
// thousands, which no picker can show.
const maxListedModels = 200

// listTimeout bounds asking an endpoint for its models while an admin waits.
const listTimeout = 15 * time.Second

// Input is a provider as an admin enters it.
type Input struct {
	ID      int64  // 0 adds a provider
	Name    string // 1 to 64 bytes
	Kind    string // store.KindOpenAI or store.KindAnthropic
	BaseURL string // "" for OpenAI means OpenAIBaseURL
	// Models: each a name, optionally followed by "window=N" and "vision" (see parseModel). None:
	// listed from the endpoint for a new provider, kept for an existing one.
	Models []string
	APIKey string // plaintext; "" keeps the stored key
}

// Save checks in and writes the provider, its sealed API key and its models in one
// transaction. A new provider without typed models gets the endpoint's list, and the
// first new provider with models becomes the default when none is set. The notice is
// not "" when the models could not be listed: the provider is saved anyway, and the
// notice says to type them in. Errors are *errs.Error: Invalid for a bad input,
// Conflict for a taken name, NotFound for a missing in.ID.
func (c *Catalog) Save(ctx context.Context, in Input) (p store.Provider, notice string, err error) {
	p, typed, err := checkInput(in)
	if err != nil {
		return p, "", err
	}
	key := strings.TrimSpace(in.APIKey)
	if in.ID != 0 {
		old, err := c.Store.ProviderByID(ctx, in.ID)
		if err != nil {
			return p, "", err
		}
		p.ID, p.APIKeySealed, p.CreatedAt = old.ID, old.APIKeySealed, old.CreatedAt
		p.Windows = typedWindows(typed, old.Windows)
		if len(p.Models) == 0 {
			p.Models, p.Windows = old.Models, old.Windows
		}
	} else if len(p.Models) == 0 {
		// Listed before the write, with the typed key: a transaction must not wait on
		// the network.
		var list []llm.Model
		list, notice = c.listModels(ctx, p, key)
		p.Models, p.Windows = listedWindows(list, nil)
	} else {
		p.Windows = typedWindows(typed, nil)
	}
	var seal func(int64) ([]byte, error)
	if key != "" {
		// The key is sealed inside the transaction: have the data key ready before it.
		if err := c.Keys.Prepare(ctx, 0); err != nil {
			return p, "", err
		}
		seal = func(id int64) ([]byte, error) { return c.Keys.Seal(ctx, 0, []byte(key), KeyAD(id)) }
	}
	if err := c.Store.SaveProvider(ctx, &p, seal); err != nil {
		return p, "", err
	}
	if in.ID == 0 && len(p.Models) > 0 {
		if def, _ := c.Default(ctx); def == "" {
			if err := c.Store.SetSetting(ctx, DefaultModelSetting, Value(p.ID, p.Models[0])); err != nil {
				return p, notice, err
			}
		}
	}
	return p, notice, nil
}

// checkInput validates in and returns the provider row it describes (without id, key
// or windows) and the windows typed with its models.
func checkInput(in Input) (store.Provider, map[string]store.ModelWindow, error) {
	p := store.Provider{Name: strings.TrimSpace(in.Name), Kind: in.Kind, BaseURL: strings.TrimSpace(in.BaseURL)}
	typed := map[string]store.ModelWindow{}
	for _, entry := range in.Models {
		m, window, err := parseModel(entry)
		if err != nil {
			return p, nil, err
		}
		if m == "" {
			continue
		}
		p.Models = append(p.Models, m)
		if window.Tokens > 0 || window.Vision {
			typed[m] = window
		}
	}
	switch {
	case p.Name == "" || len(p.Name) > 64:
		return p, nil, errs.E(errs.Invalid, "A provider needs a name of at most 64 characters.")
	case p.Kind != store.KindOpenAI && p.Kind != store.KindAnthropic:
		return p, nil, errs.E(errs.Invalid, "Pick a provider type: OpenAI-compatible or Anthropic.")
	}
	if p.Kind == store.KindOpenAI && p.BaseURL == "" {
		p.BaseURL = OpenAIBaseURL
	}
	if p.BaseURL != "" {
		u, err := url.Parse(p.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return p, nil, errs.E(errs.Invalid, "The base URL must be an http:// or https:// URL.")
		}
	}
	return p, typed, nil
}

// listModels asks p's endpoint for its models. A failure is not fatal: it returns no
// models and a notice that says to type them in.
func (c *Catalog) listModels(ctx context.Context, p store.Provider, key string) ([]llm.Model, string) {
	client, err := c.client(p, key)
	if err != nil {
		return nil, errs.Message(err)
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	list, err := client.Models(ctx)
	if err != nil {
		return nil, "Could not list models: " + err.Error() + " Type the model names instead."
	}
	if len(list) > maxListedModels {
		list = list[:maxListedModels]
	}
	return list, ""
}

// RefreshModels replaces provider id's models with the endpoint's list. When listing
// fails the provider is left as it was and the notice says why; otherwise the notice
// says how many models were listed.
func (c *Catalog) RefreshModels(ctx context.Context, id int64) (store.Provider, string, error) {
	p, err := c.Store.ProviderByID(ctx, id)
	if err != nil {
		return p, "", err
	}
	key, err := c.openKey(ctx, p)
	if err != nil {
		return p, errs.Message(err), nil
	}
	list, notice := c.listModels(ctx, p, key)
	if notice != "" {
		return p, notice, nil
	}
	p.Models, p.Windows = listedWindows(list, p.Windows)
	if err := c.Store.SaveProvider(ctx, &p, nil); err != nil {
		return p, "", err
	}
	return p, "Listed " + strconv.Itoa(len(p.Models)) + " models from " + p.Name + ".", nil
}

// SetDefault makes choice the instance's default model; "" clears it. A choice that
// is not configured is errs.Invalid.
func (c *Catalog) SetDefault(ctx context.Context, choice string) error {
	if choice != "" {
		choices, err := c.Choices(ctx)
		if err != nil {
			return err
		}
		if !HasChoice(choices, choice) {
			return errs.E(errs.Invalid, "Unknown model.")
		}
	}
	return c.Store.SetSetting(ctx, DefaultModelSetting, choice)
}

// HasChoice reports whether v is one of choices.
func HasChoice(choices []Choice, v string) bool {
	for _, ch := range choices {
		if ch.Value == v {
			return true
		}
	}
	return false
}

// KeyHint is what the settings page shows of p's API key: "" without one, the hint
// of crypto.Hint, or a request to enter it again when it cannot be opened.
func (c *Catalog) KeyHint(ctx context.Context, p store.Provider) string {
	if len(p.APIKeySealed) == 0 {
		return ""
	}
	key, err := c.openKey(ctx, p)
	if err != nil {
		return "(unreadable: enter it again)"
	}
	return crypto.Hint(key)
}

// openKey returns p's plaintext API key, "" when it has none.
func (c *Catalog) openKey(ctx context.Context, p store.Provider) (string, error) {
	if len(p.APIKeySealed) == 0 {
		return "", nil
	}
	plain, err := c.Keys.Open(ctx, 0, p.APIKeySealed, KeyAD(p.ID))
	if err != nil {
		return "", errs.Wrap(errs.Internal, err, "The API key of provider %q could not be decrypted; enter it again in Settings → Providers.", p.Name)
	}
	return string(plain), nil
}
