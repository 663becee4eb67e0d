package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/jsonpos"
	"atrium/internal/memory"
	"atrium/views"
)

// memoryExport is the documented export and import format (README, Memories):
// {"memories": [{"kind", "text", "created_at" (RFC 3339), "source"}]}, oldest
// first so an import lists them in the same order.
type memoryExport struct {
	Memories []memoryExportEntry `json:"memories"`
}

type memoryExportEntry struct {
	Kind      string `json:"kind"`
	Text      string `json:"text"`
	CreatedAt string `json:"created_at,omitempty"`
	Source    string `json:"source,omitempty"`
}

// Import limits: an import is a user's memories, not a bulk load; each entry
// costs an embedding.
const (
	maxImportBytes   = 4 << 20
	maxImportEntries = 1000
)

func (s *Server) exportMemories(c echo.Context) error {
	u, _ := currentUser(c)
	ms, err := s.Memory.List(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	out := memoryExport{Memories: make([]memoryExportEntry, 0, len(ms))}
	for i := len(ms) - 1; i >= 0; i-- { // List is newest first
		m := ms[i]
		out.Memories = append(out.Memories, memoryExportEntry{Kind: m.Kind, Text: m.Text,
			CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339), Source: m.Source.Kind})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep & < > in texts readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="atrium-memories.json"`)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "application/json", buf.Bytes())
}

// importEntry is one validated entry of an import, with the line it starts on
// for messages.
type importEntry struct {
	memoryExportEntry
	created time.Time // zero: no date given
	line    int
}

// parseMemoryImport reads and checks a whole import before anything is saved.
// Malformed JSON is "line L, column C: <what>"; a bad entry is "entry N (line
// L): <what>", all such problems joined by "; ".
func parseMemoryImport(data []byte) ([]importEntry, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errs.E(errs.Invalid, `The import is empty; paste an export like {"memories": [...]}.`)
	}
	if len(data) > maxImportBytes {
		return nil, errs.E(errs.TooLarge, "The import is larger than %d MB.", maxImportBytes>>20)
	}
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		return nil, jsonpos.Error(data, err)
	}
	// The document is valid JSON from here on, so the decoder's errors are
	// only about shape.
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return nil, jsonpos.At(data, skipJSONSpace(data, 0), `expected an object like {"memories": [...]}`)
	}
	var raws []json.RawMessage
	var offs []int
	found := false
	for dec.More() {
		tok, _ := dec.Token()
		var val json.RawMessage
		valOff := skipJSONSpace(data, int(dec.InputOffset()))
		if valOff < len(data) && data[valOff] == ':' { // the offset is that of the key's end
			valOff = skipJSONSpace(data, valOff+1)
		}
		if err := dec.Decode(&val); err != nil {
			return nil, jsonpos.Error(data, err)
		}
		if tok != "memories" {
			continue // unknown keys are ignored, for later versions of the format
		}
		if found {
			return nil, jsonpos.At(data, valOff, `"memories" appears twice`)
		}
		found = true
		inner := json.NewDecoder(bytes.NewReader(val))
		if t, _ := inner.Token(); t != json.Delim('[') {
			return nil, jsonpos.At(data, valOff, `"memories" must be a list like [{"kind": "fact", "text": "…"}]`)
		}
		for inner.More() {
			off := valOff + skipJSONSpace(val, int(inner.InputOffset()))
			var raw json.RawMessage
			if err := inner.Decode(&raw); err != nil {
				return nil, jsonpos.Error(data, err)
			}
			raws, offs = append(raws, raw), append(offs, off)
		}
	}
	if !found {
		return nil, jsonpos.At(data, skipJSONSpace(data, 0), `expected an object like {"memories": [...]}; found no "memories" key`)
	}
	if len(raws) > maxImportEntries {
		return nil, errs.E(errs.TooLarge, "The import has %d memories; at most %d can be imported at once.", len(raws), maxImportEntries)
	}

	var problems []string
	var out []importEntry
	for i, raw := range raws {
		e := importEntry{line: jsonpos.Line(data, offs[i])}
		fail := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("entry %d (line %d): ", i+1, e.line)+fmt.Sprintf(format, args...))
		}
		if err := json.Unmarshal(raw, &e.memoryExportEntry); err != nil {
			// Offsets are within the entry; shift them to the document's.
			if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
				te.Offset += int64(offs[i])
			}
			problems = append(problems, fmt.Sprintf("entry %d: %s", i+1, errs.Message(jsonpos.Error(data, err))))
			continue
		}
		e.Text = strings.TrimSpace(e.Text)
		switch {
		case !isMemoryKind(e.Kind):
			fail(`unknown kind %q; use one of %s`, e.Kind, strings.Join(memoryKinds, ", "))
		case e.Text == "":
			fail("the text is empty")
		case utf8.RuneCountInString(e.Text) > memory.MaxTextLen:
			fail("the text is longer than %d characters", memory.MaxTextLen)
		}
		if e.CreatedAt != "" {
			t, err := time.Parse(time.RFC3339, e.CreatedAt)
			if err != nil {
				fail(`"created_at" must be an RFC 3339 time like 2025-01-31T09:30:00Z`)
			}
			e.created = t
		}
		out = append(out, e)
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("and %d more", len(problems)-10))
		}
		return nil, errs.E(errs.Invalid, "%s", strings.Join(problems, "; "))
	}
	return out, nil
}

// skipJSONSpace skips white space and the commas between values.
func skipJSONSpace(data []byte, off int) int {
	for off < len(data) && (data[off] == ' ' || data[off] == '\t' || data[off] == '\r' || data[off] == '\n' || data[off] == ',') {
		off++
	}
	return off
}

// importMemories saves a whole validated import with source "import", or
// nothing: a text the memory service refuses (a secret) forgets the entries
// already saved by this import, physically, and names the entry.
func (s *Server) importMemories(c echo.Context) error {
	u, _ := currentUser(c)
	paste := c.FormValue("json")
	data := []byte(paste)
	if file, ok, err := uploadedFile(c, "file", maxImportBytes); err != nil {
		return err
	} else if ok {
		data, paste = file, "" // a file's content is not put back into the textarea
	}
	fail := func(err error) error {
		if errs.Code(err) == errs.Internal {
			return err
		}
		return s.memoryFormError(c, err, func(v *views.Memories, msg string) {
			v.Import, v.ImportError = paste, msg+" Nothing was imported."
		})
	}
	entries, err := parseMemoryImport(data)
	if err != nil {
		return fail(err)
	}
	// Every text is checked before anything is written: a refused one (a secret)
	// names its entry and changes nothing.
	for i, e := range entries {
		if err := memory.CheckText(e.Text); err != nil {
			return fail(errs.E(errs.Code(err), "entry %d (line %d): %s", i+1, e.line, errs.Message(err)))
		}
	}
	ctx := c.Request().Context()
	var saved []string
	for i, e := range entries {
		m, err := s.Memory.Save(ctx, u.ID, e.Kind, e.Text, memory.Source{Kind: memory.SourceImport}, 1)
		if err == nil {
			saved = append(saved, m.ID)
			if !e.created.IsZero() && e.created.Before(m.CreatedAt) {
				err = s.Store.BackdateMemory(ctx, u.ID, m.ID, e.created)
			}
		}
		if err != nil {
			// Checked above, so only a failure of the store gets here: undo.
			if rerr := s.undoImport(ctx, u.ID, saved); rerr != nil {
				return fmt.Errorf("web: import failed at entry %d (%v), and undoing it failed: %w", i+1, err, rerr)
			}
			if errs.Code(err) == errs.Internal {
				return err
			}
			return fail(errs.E(errs.Code(err), "entry %d (line %d): %s", i+1, e.line, errs.Message(err)))
		}
	}
	n := len(saved)
	return memoriesDone(c, "Imported "+strconv.Itoa(n)+" "+pluralWord(n, "memory", "memories")+".")
}

// undoImport forgets what a failed import saved, even if the request was
// cancelled meanwhile: a half import must not stay behind.
func (s *Server) undoImport(ctx context.Context, owner int64, ids []string) error {
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		if err := s.Memory.Forget(ctx, owner, id); err != nil && !errs.Is(err, errs.NotFound) {
			return err
		}
	}
	return nil
}

// uploadedFile reads the form's file field: ok is false when none (or an empty one)
// was sent. It reads at most limit+1 bytes, so that the caller's size check can tell
// "too large" from "just fits" without reading a huge upload whole.
func uploadedFile(c echo.Context, field string, limit int64) (data []byte, ok bool, err error) {
	fh, err := c.FormFile(field)
	if err != nil || fh.Size == 0 {
		return nil, false, nil
	}
	f, err := fh.Open()
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, limit+1))
	return data, err == nil, err
}
