package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/views"
)

// settingsView loads the providers page model.
func (s *Server) settingsView(ctx context.Context, form views.ProviderForm, notice string) (views.Settings, error) {
	ps, err := s.Store.ListProviders(ctx)
	if err != nil {
		return views.Settings{}, err
	}
	out := views.Settings{Form: form, Notice: notice}
	for _, p := range ps {
		hint := ""
		if len(p.APIKeySealed) > 0 {
			if key, err := s.Keys.Open(ctx, 0, p.APIKeySealed, providers.KeyAD(p.ID)); err == nil {
				hint = crypto.Hint(string(key))
			} else {
				hint = "(unreadable: enter it again)"
			}
		}
		out.Providers = append(out.Providers, views.Provider{ID: p.ID, Name: p.Name, Kind: p.Kind,
			BaseURL: p.BaseURL, KeyHint: hint, Models: p.Models})
	}
	def, err := s.Providers.Default(ctx)
	if err != nil {
		return out, err
	}
	choices, err := s.Providers.Choices(ctx)
	if err != nil {
		return out, err
	}
	out.Models = append(out.Models, views.ModelOption{Value: "", Label: "(none)", Selected: def == ""})
	for _, ch := range choices {
		out.Models = append(out.Models, views.ModelOption{Value: ch.Value, Label: ch.Label, Selected: ch.Value == def})
	}
	return out, nil
}

func (s *Server) showProviders(c echo.Context) error {
	v, err := s.settingsView(c.Request().Context(), views.ProviderForm{Kind: "openai"}, c.QueryParam("notice"))
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.SettingsPage(s.page(c, "Providers"), v))
}

// providerInput reads and checks the provider form.
func providerInput(c echo.Context) (views.ProviderForm, store.Provider, error) {
	f := views.ProviderForm{
		Name:    strings.TrimSpace(c.FormValue("name")),
		Kind:    c.FormValue("kind"),
		BaseURL: strings.TrimSpace(c.FormValue("base_url")),
		Models:  c.FormValue("models"),
	}
	p := store.Provider{Name: f.Name, Kind: f.Kind, BaseURL: f.BaseURL}
	for _, line := range strings.FieldsFunc(f.Models, func(r rune) bool { return r == '\n' || r == ',' || r == '\r' }) {
		if m := strings.TrimSpace(line); m != "" {
			p.Models = append(p.Models, m)
		}
	}
	switch {
	case f.Name == "" || len(f.Name) > 64:
		return f, p, errs.E(errs.Invalid, "A provider needs a name of at most 64 characters.")
	case f.Kind != "openai" && f.Kind != "anthropic":
		return f, p, errs.E(errs.Invalid, "Pick a provider type: OpenAI-compatible or Anthropic.")
	}
	if f.Kind == "openai" && f.BaseURL == "" {
		p.BaseURL = "https://api.openai.com/v1" // the official endpoint, as the form says
	}
	if p.BaseURL != "" {
		u, err := url.Parse(p.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return f, p, errs.E(errs.Invalid, "The base URL must be an http:// or https:// URL.")
		}
	}
	return f, p, nil
}

// fillModels lists the endpoint's models when none were typed in. A failure is not
// fatal: it becomes a notice that says to type them in.
func (s *Server) fillModels(ctx context.Context, p *store.Provider) string {
	if len(p.Models) > 0 {
		return ""
	}
	client, err := s.Providers.Client(ctx, *p)
	if err != nil {
		return errs.Message(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	list, err := client.Models(ctx)
	if err != nil {
		return "Could not list models: " + err.Error() + " Type the model names instead."
	}
	if len(list) > 200 {
		list = list[:200]
	}
	p.Models = list
	return ""
}

func (s *Server) createProvider(c echo.Context) error {
	ctx := c.Request().Context()
	f, p, err := providerInput(c)
	if err == nil {
		err = s.Store.CreateProvider(ctx, &p)
	}
	if err == nil {
		err = s.saveKey(ctx, &p, c.FormValue("api_key"))
	}
	if err != nil {
		return s.providerFormError(c, f, err)
	}
	notice := s.fillModels(ctx, &p)
	if err := s.Store.UpdateProvider(ctx, p); err != nil {
		return err
	}
	if def, _ := s.Providers.Default(ctx); def == "" && len(p.Models) > 0 {
		if err := s.Store.SetSetting(ctx, providers.DefaultModelSetting, providers.Value(p.ID, p.Models[0])); err != nil {
			return err
		}
	}
	if notice == "" {
		notice = "Provider " + p.Name + " saved."
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape(notice))
}

// saveKey seals key into p (bound to the provider's row). An empty key keeps the old one.
func (s *Server) saveKey(ctx context.Context, p *store.Provider, key string) error {
	key = strings.TrimSpace(key)
	if key == "" {
		return nil
	}
	sealed, err := s.Keys.Seal(ctx, 0, []byte(key), providers.KeyAD(p.ID))
	if err != nil {
		return err
	}
	p.APIKeySealed = sealed
	return s.Store.UpdateProvider(ctx, *p)
}

func (s *Server) providerParam(c echo.Context) (store.Provider, error) {
	id, err := strconv.ParseInt(c.Param("pid"), 10, 64)
	if err != nil {
		return store.Provider{}, echo.ErrNotFound
	}
	p, err := s.Store.ProviderByID(c.Request().Context(), id)
	if errs.Is(err, errs.NotFound) {
		return p, echo.ErrNotFound
	}
	return p, err
}

func (s *Server) updateProvider(c echo.Context) error {
	ctx := c.Request().Context()
	old, err := s.providerParam(c)
	if err != nil {
		return err
	}
	f, p, err := providerInput(c)
	f.ID = old.ID
	if err == nil {
		p.ID, p.APIKeySealed, p.CreatedAt = old.ID, old.APIKeySealed, old.CreatedAt
		if len(p.Models) == 0 {
			p.Models = old.Models
		}
		err = s.Store.UpdateProvider(ctx, p)
	}
	if err == nil {
		err = s.saveKey(ctx, &p, c.FormValue("api_key"))
	}
	if err != nil {
		return s.providerFormError(c, f, err)
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape("Provider "+p.Name+" saved."))
}

func (s *Server) deleteProvider(c echo.Context) error {
	p, err := s.providerParam(c)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteProvider(c.Request().Context(), p.ID); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape("Provider "+p.Name+" removed."))
}

func (s *Server) refreshProviderModels(c echo.Context) error {
	ctx := c.Request().Context()
	p, err := s.providerParam(c)
	if err != nil {
		return err
	}
	old := p.Models
	p.Models = nil
	notice := s.fillModels(ctx, &p)
	if notice != "" {
		p.Models = old
	} else {
		notice = "Listed " + strconv.Itoa(len(p.Models)) + " models from " + p.Name + "."
	}
	if err := s.Store.UpdateProvider(ctx, p); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape(notice))
}

func (s *Server) setDefaultModel(c echo.Context) error {
	ctx := c.Request().Context()
	model := c.FormValue("model")
	if model != "" {
		choices, err := s.Providers.Choices(ctx)
		if err != nil {
			return err
		}
		if !hasChoice(choices, model) {
			return errs.E(errs.Invalid, "Unknown model.")
		}
	}
	if err := s.Store.SetSetting(ctx, providers.DefaultModelSetting, model); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape("Default model saved."))
}

// providerFormError re-renders the providers page with a user-facing error on form f;
// internal errors go to the error handler.
func (s *Server) providerFormError(c echo.Context, f views.ProviderForm, err error) error {
	if errs.Code(err) == errs.Internal {
		return err
	}
	f.Error = errs.Message(err)
	v, verr := s.settingsView(c.Request().Context(), f, "")
	if verr != nil {
		return verr
	}
	return render(c, statusOf(errs.Code(err)), views.SettingsPage(s.page(c, "Providers"), v))
}
