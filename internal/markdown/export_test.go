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
