// Package jsonpos reports where in a pasted JSON document a problem is, as the
// line and column an editor shows, so an import can say "line 3, column 14"
// instead of a byte offset. Shared by the MCP and the memory imports.
package jsonpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"atrium/internal/errs"
)

// Position converts a byte offset of data into a 1-based line and column; the
// column counts characters, as editors do. Offsets out of range are clamped.
func Position(data []byte, off int) (line, col int) {
	off = max(0, min(off, len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	start := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[start:]) + 1
}

// Line is the 1-based line of byte offset off.
func Line(data []byte, off int) int {
	l, _ := Position(data, off)
	return l
}

// At returns an errs.Invalid "line L, column C: <what>" for byte offset off.
func At(data []byte, off int, format string, args ...any) error {
	line, col := Position(data, off)
	return errs.E(errs.Invalid, "line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

// Error turns an encoding/json decoding error over data into an errs.Invalid
// "line L, column C: <what>": a syntax error, or a value of the wrong type.
// Other errors become "the JSON could not be read".
func Error(data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, including the offending one.
		off := int(se.Offset) - 1
		if end := len(bytes.TrimRight(data, " \t\r\n")); off >= end {
			off = end // unexpected end: point just after the last thing written
		}
		return At(data, off, "%s", se.Error())
	case errors.As(err, &te):
		// Offset is just after the offending value; point at its start.
		off := int(te.Offset)
		if off > 0 && off <= len(data) {
			off = valueStart(data, off)
		}
		what := "a value"
		if f := fieldPath(te.Field); f != "" {
			what = fmt.Sprintf("%q", f)
		}
		return At(data, off, "%s must be %s, not %s", what, typeName(te.Type), te.Value)
	}
	return errs.Wrap(errs.Invalid, err, "the JSON could not be read")
}

// fieldPath is the decoder's path to the offending field without list indexes, which
// the line and column already give: since Go 1.27 encoding/json reports "0.kind"
// where it said "kind".
func fieldPath(f string) string {
	parts := strings.Split(f, ".")
	kept := parts[:0]
	for _, p := range parts {
		if p != "" && strings.Trim(p, "0123456789") != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ".")
}

// valueStart walks back from end over the value that ends there: a string,
// or a run of non-delimiter bytes (number, literal). For an object or array
// the decoder stops just after its opening bracket.
func valueStart(data []byte, end int) int {
	i := end - 1
	if data[i] == '{' || data[i] == '[' {
		return i
	}
	if data[i] == '"' {
		for i--; i >= 0; i-- {
			if data[i] == '"' && (i == 0 || data[i-1] != '\\') {
				return i
			}
		}
		return end
	}
	for i >= 0 && !bytes.ContainsRune([]byte(" \t\r\n,:[{"), rune(data[i])) {
		i--
	}
	return i + 1
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}
