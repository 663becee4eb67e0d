package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

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
		windows := map[string]int{}
		for m, w := range p.Windows {
			windows[m] = w.Tokens
		}
		out.Providers = append(out.Providers, views.Provider{ID: p.ID, Name: p.Name, Kind: p.Kind,
			BaseURL: p.BaseURL, KeyHint: s.Providers.KeyHint(ctx, p), Models: p.Models,
			Windows: windows, ModelLines: providers.ModelLines(p)})
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

// providerInput reads the provider form: what the page shows again on an error, and
// what the catalog saves.
func providerInput(c echo.Context) (views.ProviderForm, providers.Input) {
	f := views.ProviderForm{
		Name:    strings.TrimSpace(c.FormValue("name")),
		Kind:    c.FormValue("kind"),
		BaseURL: strings.TrimSpace(c.FormValue("base_url")),
		Models:  c.FormValue("models"),
	}
	in := providers.Input{Name: f.Name, Kind: f.Kind, BaseURL: f.BaseURL, APIKey: c.FormValue("api_key"),
		Models: strings.FieldsFunc(f.Models, func(r rune) bool { return r == '\n' || r == ',' || r == '\r' })}
	return f, in
}

func (s *Server) createProvider(c echo.Context) error {
	f, in := providerInput(c)
	p, notice, err := s.Providers.Save(c.Request().Context(), in)
	if err != nil {
		return s.providerFormError(c, f, err)
	}
	if notice == "" {
		notice = "Provider " + p.Name + " saved."
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape(notice))
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
	old, err := s.providerParam(c)
	if err != nil {
		return err
	}
	f, in := providerInput(c)
	f.ID, in.ID = old.ID, old.ID
	p, _, err := s.Providers.Save(c.Request().Context(), in)
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
	p, err := s.providerParam(c)
	if err != nil {
		return err
	}
	_, notice, err := s.Providers.RefreshModels(c.Request().Context(), p.ID)
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/settings/providers?notice="+url.QueryEscape(notice))
}

func (s *Server) setDefaultModel(c echo.Context) error {
	if err := s.Providers.SetDefault(c.Request().Context(), c.FormValue("model")); err != nil {
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
