package mcp

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Credentials also hide in a server's URL (…?api_key=…) and command-line arguments
// (--token=…, --api-key …, API_KEY=…). Those values are secrets like env values and
// headers: redacted in logs, errors and cards, sealed at rest and REDACTED in exports.
// A slot is found by its name, so a value is never guessed from its looks.

// credentialName reports whether a query parameter, flag or variable name names a
// credential.
func credentialName(name string) bool {
	n := strings.ToLower(strings.TrimLeft(name, "-"))
	n = strings.NewReplacer("-", "_", ".", "_").Replace(n)
	switch n {
	case "key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "auth",
		"sig", "signature", "credential", "credentials", "accesstoken", "authorization", "bearer":
		return true
	}
	for _, suffix := range []string{"_key", "_token", "_secret", "_password", "_pwd", "_auth", "_credential", "_credentials", "_sig", "_signature"} {
		if strings.HasSuffix(n, suffix) && !strings.HasSuffix(n, "_public_key") {
			return true
		}
	}
	return false
}

// mapURLCredentials calls f for each credential query parameter of raw (name and
// value as written) and puts what f returns in its place. The rest of the URL is kept
// byte for byte (no re-encoding or reordering).
func mapURLCredentials(raw string, f func(name, value string) string) string {
	q := strings.IndexByte(raw, '?')
	if q < 0 {
		return raw
	}
	query, frag := raw[q+1:], ""
	if h := strings.IndexByte(query, '#'); h >= 0 {
		query, frag = query[:h], query[h:]
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, value, ok := strings.Cut(p, "=")
		if !ok || value == "" {
			continue
		}
		if credentialName(unescapeLoose(name)) {
			parts[i] = name + "=" + f(name, value)
		}
	}
	return raw[:q+1] + strings.Join(parts, "&") + frag
}

func unescapeLoose(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// mapArgCredentials calls f for each credential among args: the value of
// --name=value and NAME=value, the argument after a bare --name, and every argument
// whose index is in marked (the admin said it is secret) as a whole. The slot key is
// the argument's index, so a rewritten list lines up with the original.
func mapArgCredentials(args []string, marked []int, f func(slot, value string) string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if slices.Contains(marked, i) {
			if a != "" {
				out[i] = f(strconv.Itoa(i), a)
			}
			continue
		}
		if name, value, ok := strings.Cut(a, "="); ok {
			if value != "" && credentialName(name) && !strings.ContainsAny(name, " /") {
				out[i] = name + "=" + f(strconv.Itoa(i), value)
			}
			continue
		}
		if strings.HasPrefix(a, "-") && credentialName(a) && i+1 < len(out) && !strings.HasPrefix(out[i+1], "-") {
			out[i+1] = f(strconv.Itoa(i+1), out[i+1])
			i++
		}
	}
	return out
}

// credentialValues lists the credentials in cfg's URL and arguments.
func credentialValues(cfg ServerConfig) []string {
	var out []string
	keep := func(_, v string) string { out = append(out, v); return v }
	mapURLCredentials(cfg.URL, keep)
	mapArgCredentials(cfg.Args, cfg.SecretArgs, keep)
	return out
}

// RedactCredentials returns cfg's URL and arguments with their credentials REDACTED,
// for showing and exporting.
func RedactCredentials(cfg ServerConfig) (string, []string) {
	red := func(_, _ string) string { return RedactedValue }
	return mapURLCredentials(cfg.URL, red), mapArgCredentials(cfg.Args, cfg.SecretArgs, red)
}

// splitCredentials returns cfg's URL and arguments REDACTED, and the credentials by
// slot ("url:<name>", "arg:<index>") for sealing.
func splitCredentials(cfg ServerConfig) (string, []string, map[string]string) {
	slots := map[string]string{}
	u := mapURLCredentials(cfg.URL, func(name, v string) string { slots["url:"+name] = v; return RedactedValue })
	args := mapArgCredentials(cfg.Args, cfg.SecretArgs, func(i, v string) string { slots["arg:"+i] = v; return RedactedValue })
	return u, args, slots
}

// fillCredentials puts the stored credentials back into REDACTED slots of url and
// args. It reports the first REDACTED slot that has no stored value ("" if none).
func fillCredentials(u string, args []string, marked []int, slots map[string]string) (string, []string, string) {
	missing := ""
	fill := func(slot, v string) string {
		if v != RedactedValue {
			return v
		}
		if sv, ok := slots[slot]; ok {
			return sv
		}
		if missing == "" {
			missing = slot
		}
		return v
	}
	u = mapURLCredentials(u, func(name, v string) string { return fill("url:"+name, v) })
	args = mapArgCredentials(args, marked, func(i, v string) string { return fill("arg:"+i, v) })
	return u, args, missing
}
