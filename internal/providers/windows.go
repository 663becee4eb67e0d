package providers

import (
	"context"
	"strconv"
	"strings"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// The window an admin may give a model: the same range as ATRIUM_CONTEXT_WINDOW.
const (
	minWindow = 2048
	maxWindow = 2_000_000
)

// parseModel reads one model entry as an admin types it: a name, optionally followed
// by "window=N" (tokens; "32k" is 32 × 1024) and "vision" (the model takes images).
// It returns the name and what was given with it (Tokens 0 when no window was).
func parseModel(entry string) (string, store.ModelWindow, error) {
	var w store.ModelWindow
	fields := strings.Fields(entry)
	if len(fields) == 0 {
		return "", w, nil
	}
	name := fields[0]
	for _, f := range fields[1:] {
		if strings.EqualFold(f, "vision") {
			w.Vision = true
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok || !strings.EqualFold(k, "window") {
			return "", w, errs.E(errs.Invalid, "Model %q: unknown option %q. Write the model name, optionally followed by window=32768 and vision.", name, f)
		}
		n, err := parseTokens(v)
		if err != nil || n < minWindow || n > maxWindow {
			return "", w, errs.E(errs.Invalid, "Model %q: the window must be a number of tokens from %d to %d (e.g. window=32768 or window=32k).", name, minWindow, maxWindow)
		}
		w.Tokens = n
	}
	return name, w, nil
}

// parseTokens reads "32768" or "32k".
func parseTokens(v string) (int, error) {
	mult := 1
	if s, ok := strings.CutSuffix(strings.ToLower(v), "k"); ok {
		v, mult = s, 1024
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > maxWindow {
		return 0, errs.E(errs.Invalid, "not a token count")
	}
	return n * mult, nil
}

// ModelLines is what the edit form shows of p's models: one per line, with its window
// where one is known (typed or reported) and its vision flag, so saving the form
// unchanged keeps them.
func ModelLines(p store.Provider) string {
	lines := make([]string, 0, len(p.Models))
	for _, m := range p.Models {
		w := p.Windows[m]
		if w.Tokens > 0 {
			m += " window=" + strconv.Itoa(w.Tokens)
		}
		if w.Vision {
			m += " vision"
		}
		lines = append(lines, m)
	}
	return strings.Join(lines, "\n")
}

// typedWindows turns the windows an admin typed into stored ones. A value equal to
// what the endpoint reported before stays marked reported, so a later refresh may
// update it; any other value is the admin's and a refresh keeps it.
func typedWindows(typed map[string]store.ModelWindow, old map[string]store.ModelWindow) map[string]store.ModelWindow {
	out := map[string]store.ModelWindow{}
	for m, w := range typed {
		w.Reported = w.Tokens > 0 && old[m].Reported && old[m].Tokens == w.Tokens
		out[m] = w
	}
	return out
}

// listedWindows merges an endpoint's model list into the windows: an admin's typed
// window wins; otherwise the endpoint's, where it reports one. A vision flag an admin
// typed stays.
func listedWindows(list []llm.Model, old map[string]store.ModelWindow) ([]string, map[string]store.ModelWindow) {
	names := make([]string, 0, len(list))
	out := map[string]store.ModelWindow{}
	for _, m := range list {
		names = append(names, m.ID)
		switch w := old[m.ID]; {
		case w.Tokens > 0 && !w.Reported:
			out[m.ID] = w
		case m.Window > 0:
			out[m.ID] = store.ModelWindow{Tokens: min(m.Window, maxWindow), Reported: true, Vision: w.Vision}
		case w.Vision:
			out[m.ID] = store.ModelWindow{Vision: true}
		}
	}
	return names, out
}

// Window returns the context window of a model choice ("" is the instance default):
// the one known for that provider's model, or 0 when none is (the caller then uses
// the instance's window). A choice that does not resolve is 0 too: resolving it fails
// with a clearer error elsewhere.
func (c *Catalog) Window(ctx context.Context, choice string) int {
	if choice == "" {
		def, err := c.Default(ctx)
		if err != nil {
			return 0
		}
		choice = def
	}
	pid, model, err := ParseValue(choice)
	if err != nil {
		return 0
	}
	p, err := c.Store.ProviderByID(ctx, pid)
	if err != nil {
		return 0
	}
	return p.Windows[model].Tokens
}

// Vision reports whether a model choice ("" is the instance default) takes images:
// every model of an Anthropic provider does (all current Claude models accept image
// blocks); a model of an OpenAI-compatible provider only when an admin marked it
// "vision" in its models list, since such endpoints do not say. A choice that does
// not resolve is false.
func (c *Catalog) Vision(ctx context.Context, choice string) bool {
	if choice == "" {
		def, err := c.Default(ctx)
		if err != nil {
			return false
		}
		choice = def
	}
	pid, model, err := ParseValue(choice)
	if err != nil {
		return false
	}
	p, err := c.Store.ProviderByID(ctx, pid)
	if err != nil {
		return false
	}
	return p.Kind == store.KindAnthropic || p.Windows[model].Vision
}
