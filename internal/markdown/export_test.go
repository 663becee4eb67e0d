package markdown

import "bytes"

// InertAndSanitized returns the fast path's result for src's goldmark HTML (and whether
// it applies) and the sanitiser's result, for tests.
func InertAndSanitized(src string) (html, fast string, ok bool, sanitized string) {
	var buf bytes.Buffer
	if err := md.Convert([]byte(src), &buf); err != nil {
		panic(err)
	}
	fast, ok = inert(buf.Bytes())
	return buf.String(), fast, ok, string(policy.SanitizeBytes(buf.Bytes()))
}

// ForgetHighlights empties the highlighting cache, for benchmarks of a first render.
func ForgetHighlights() {
	highlighted.mu.Lock()
	highlighted.spans, highlighted.size = nil, 0
	highlighted.mu.Unlock()
}
