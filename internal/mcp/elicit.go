package mcp

import (
	"encoding/json"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on what a server may ask with an elicitation form. A request beyond them is
// refused (the server gets an invalid-params error saying why) instead of shown.
const (
	maxSchemaBytes  = 64 << 10 // the requested schema as JSON
	maxFields       = 50
	maxFieldName    = 64
	maxOptions      = 100
	maxText         = 500   // a title, a description or an option label is cut to this (bytes)
	maxMessage      = 4000  // the request's message is cut to this (bytes)
	maxAnswerString = 10000 // a string answer without a smaller maxLength
)

// FieldKind is what a form field asks for.
type FieldKind string

const (
	FieldString  FieldKind = "string"
	FieldNumber  FieldKind = "number"
	FieldInteger FieldKind = "integer"
	FieldBoolean FieldKind = "boolean"
	FieldEnum    FieldKind = "enum"  // one of Options
	FieldMulti   FieldKind = "multi" // several of Options
)

// Option is one choice of an enum field.
type Option struct{ Value, Label string }

// Field is one field of an elicitation form, from a property of the spec's restricted
// schema (a flat object of strings, numbers, integers, booleans and enums).
type Field struct {
	Name, Title, Description string
	Kind                     FieldKind
	Format                   string // strings: email, uri, date or date-time; "" for none
	Required                 bool
	Min, Max                 *float64 // numbers and integers
	MinLen, MaxLen           int      // strings (MaxLen always set)
	MinItems, MaxItems       int      // multi (MaxItems 0: no limit)
	Options                  []Option // enum and multi
	Default                  []string // the default as the form shows it: one value, or the chosen options
}

// Form is an elicitation's requested schema as a list of fields: the required ones first.
type Form struct{ Fields []Field }

// ParseForm turns a requested schema into a form. It refuses, with a message for the
// server, a schema that is too large, nested, or outside the restricted schema.
func ParseForm(schema any) (*Form, error) {
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("the requested schema is not JSON")
	}
	if len(raw) > maxSchemaBytes {
		return nil, fmt.Errorf("the requested schema is %d bytes; Atrium shows forms of at most %d", len(raw), maxSchemaBytes)
	}
	var top struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("the requested schema must be an object schema")
	}
	if top.Type != "object" {
		return nil, fmt.Errorf("the requested schema must have \"type\": \"object\"")
	}
	names, props, err := orderedProperties(top.Properties)
	if err != nil {
		return nil, err
	}
	if len(names) > maxFields {
		return nil, fmt.Errorf("the form has %d fields; Atrium shows at most %d", len(names), maxFields)
	}
	f := &Form{}
	for _, name := range names {
		if name == "" || len(name) > maxFieldName || !utf8.ValidString(name) {
			return nil, fmt.Errorf("a field name must be 1–%d characters", maxFieldName)
		}
		fld, err := parseField(name, props[name])
		if err != nil {
			return nil, fmt.Errorf("field %q: %s", capString(name, maxFieldName), err)
		}
		fld.Required = slices.Contains(top.Required, name)
		f.Fields = append(f.Fields, fld)
	}
	// mcp-go hands the schema over as a map, so the server's order is lost by now:
	// required fields first, then the others, each by name.
	slices.SortStableFunc(f.Fields, func(a, b Field) int {
		switch {
		case a.Required == b.Required:
			return 0
		case a.Required:
			return -1
		}
		return 1
	})
	for _, r := range top.Required {
		if _, ok := props[r]; !ok {
			return nil, fmt.Errorf("the required field %q is not among the properties", capString(r, maxFieldName))
		}
	}
	return f, nil
}

// orderedProperties reads a "properties" object keeping the server's order.
func orderedProperties(raw json.RawMessage) ([]string, map[string]json.RawMessage, error) {
	props := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, props, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("\"properties\" must be an object")
	}
	var names []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("\"properties\" is malformed")
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("\"properties\" is malformed")
		}
		if _, dup := props[name]; dup {
			return nil, nil, fmt.Errorf("the field %q appears twice", capString(name, maxFieldName))
		}
		props[name] = v
		names = append(names, name)
	}
	return names, props, nil
}

type propSchema struct {
	Type        string            `json:"type"`
	Title       string            `json:"title"`
	Description string            `json:"description"`
	Format      string            `json:"format"`
	MinLength   *int              `json:"minLength"`
	MaxLength   *int              `json:"maxLength"`
	Minimum     *float64          `json:"minimum"`
	Maximum     *float64          `json:"maximum"`
	Enum        []json.RawMessage `json:"enum"`
	EnumNames   []string          `json:"enumNames"`
	OneOf       []constTitle      `json:"oneOf"`
	AnyOf       []constTitle      `json:"anyOf"`
	Items       *propSchema       `json:"items"`
	MinItems    *int              `json:"minItems"`
	MaxItems    *int              `json:"maxItems"`
	Default     json.RawMessage   `json:"default"`
	Properties  json.RawMessage   `json:"properties"`
}

type constTitle struct {
	Const json.RawMessage `json:"const"`
	Title string          `json:"title"`
}

func parseField(name string, raw json.RawMessage) (Field, error) {
	var p propSchema
	if err := json.Unmarshal(raw, &p); err != nil {
		return Field{}, fmt.Errorf("is not a schema Atrium can show")
	}
	if len(p.Properties) > 0 || p.Type == "object" {
		return Field{}, fmt.Errorf("is a nested object; forms hold only strings, numbers, booleans and enums")
	}
	f := Field{Name: name, Title: capString(strings.TrimSpace(p.Title), maxText), Description: capString(strings.TrimSpace(p.Description), maxText)}
	if f.Title == "" {
		f.Title = name
	}
	var err error
	switch p.Type {
	case "string":
		if len(p.Enum) > 0 || len(p.OneOf) > 0 || len(p.AnyOf) > 0 {
			f.Kind = FieldEnum
			if f.Options, err = options(&p); err != nil {
				return Field{}, err
			}
			if d, ok := stringDefault(p.Default); ok && hasOption(f.Options, d) {
				f.Default = []string{d}
			}
			return f, nil
		}
		f.Kind = FieldString
		switch p.Format {
		case "", "email", "uri", "date", "date-time":
			f.Format = p.Format
		default:
			return Field{}, fmt.Errorf("has the format %q; Atrium knows email, uri, date and date-time", capString(p.Format, 40))
		}
		f.MaxLen = maxAnswerString
		if p.MaxLength != nil && *p.MaxLength >= 0 && *p.MaxLength < f.MaxLen {
			f.MaxLen = *p.MaxLength
		}
		if p.MinLength != nil && *p.MinLength > 0 {
			f.MinLen = min(*p.MinLength, f.MaxLen)
		}
		if d, ok := stringDefault(p.Default); ok {
			f.Default = []string{capString(d, f.MaxLen)}
		}
	case "number", "integer":
		f.Kind = FieldNumber
		if p.Type == "integer" {
			f.Kind = FieldInteger
		}
		f.Min, f.Max = p.Minimum, p.Maximum
		var d float64
		if len(p.Default) > 0 && json.Unmarshal(p.Default, &d) == nil {
			f.Default = []string{strconv.FormatFloat(d, 'f', -1, 64)}
		}
	case "boolean":
		f.Kind = FieldBoolean
		var d bool
		if len(p.Default) > 0 && json.Unmarshal(p.Default, &d) == nil && d {
			f.Default = []string{"true"}
		}
	case "array":
		if p.Items == nil || (p.Items.Type != "" && p.Items.Type != "string") {
			return Field{}, fmt.Errorf("is a list of something other than enum strings")
		}
		f.Kind = FieldMulti
		if f.Options, err = options(p.Items); err != nil {
			return Field{}, err
		}
		if p.MinItems != nil && *p.MinItems > 0 {
			f.MinItems = *p.MinItems
		}
		if p.MaxItems != nil && *p.MaxItems > 0 {
			f.MaxItems = *p.MaxItems
		}
		var ds []string
		if len(p.Default) > 0 && json.Unmarshal(p.Default, &ds) == nil {
			for _, d := range ds {
				if hasOption(f.Options, d) && !slices.Contains(f.Default, d) {
					f.Default = append(f.Default, d)
				}
			}
		}
	default:
		return Field{}, fmt.Errorf("has the type %q; forms hold only strings, numbers, integers, booleans and enums", capString(p.Type, 40))
	}
	return f, nil
}

// options reads an enum: "enum" (with the legacy "enumNames"), or "oneOf"/"anyOf" of
// {const, title}.
func options(p *propSchema) ([]Option, error) {
	var out []Option
	add := func(raw json.RawMessage, label string) error {
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return fmt.Errorf("has an enum value that is not a string")
		}
		if len(v) > maxText {
			return fmt.Errorf("has an enum value longer than %d bytes", maxText)
		}
		if hasOption(out, v) {
			return nil
		}
		label = capString(strings.TrimSpace(label), maxText)
		if label == "" {
			label = v
		}
		out = append(out, Option{Value: v, Label: label})
		return nil
	}
	n := len(p.Enum) + len(p.OneOf) + len(p.AnyOf)
	if n == 0 {
		return nil, fmt.Errorf("has no choices")
	}
	if n > maxOptions {
		return nil, fmt.Errorf("has %d choices; Atrium shows at most %d", n, maxOptions)
	}
	for i, e := range p.Enum {
		label := ""
		if i < len(p.EnumNames) {
			label = p.EnumNames[i]
		}
		if err := add(e, label); err != nil {
			return nil, err
		}
	}
	for _, c := range append(slices.Clone(p.OneOf), p.AnyOf...) {
		if err := add(c.Const, c.Title); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func hasOption(opts []Option, v string) bool {
	return slices.ContainsFunc(opts, func(o Option) bool { return o.Value == v })
}

func stringDefault(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

var dateRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// Answer checks a submitted form (values by field name, as a browser sends them) and
// returns the content for the server, or a problem per field name. Empty optional
// fields are left out; an unchecked box is false.
func (f *Form) Answer(values map[string][]string) (map[string]any, map[string]string) {
	out := map[string]any{}
	problems := map[string]string{}
	for _, fld := range f.Fields {
		vals := values[fld.Name]
		first := ""
		if len(vals) > 0 {
			first = strings.TrimSpace(vals[0])
		}
		if fld.Kind == FieldBoolean {
			out[fld.Name] = first == "true" || first == "on"
			continue
		}
		if fld.Kind == FieldMulti {
			var chosen []string
			for _, v := range vals {
				if !hasOption(fld.Options, v) {
					problems[fld.Name] = "Choose from the listed options."
					break
				}
				if !slices.Contains(chosen, v) {
					chosen = append(chosen, v)
				}
			}
			switch {
			case problems[fld.Name] != "":
			case len(chosen) == 0 && !fld.Required: // left out: minItems applies to a given list
			case len(chosen) < max(fld.MinItems, 1):
				problems[fld.Name] = fmt.Sprintf("Choose at least %d.", max(fld.MinItems, 1))
			case fld.MaxItems > 0 && len(chosen) > fld.MaxItems:
				problems[fld.Name] = fmt.Sprintf("Choose at most %d.", fld.MaxItems)
			default:
				out[fld.Name] = chosen
			}
			continue
		}
		if first == "" {
			if fld.Required {
				problems[fld.Name] = "Required."
			}
			continue
		}
		if msg := fld.check(first, out); msg != "" {
			problems[fld.Name] = msg
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return out, nil
}

// check validates one non-empty answer and puts its typed value into out, or says
// what is wrong with it.
func (fld Field) check(v string, out map[string]any) string {
	switch fld.Kind {
	case FieldEnum:
		if !hasOption(fld.Options, v) {
			return "Choose one of the listed options."
		}
		out[fld.Name] = v
	case FieldNumber, FieldInteger:
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
			return "Enter a number."
		}
		if fld.Kind == FieldInteger && n != math.Trunc(n) {
			return "Enter a whole number."
		}
		if fld.Min != nil && n < *fld.Min {
			return "At least " + strconv.FormatFloat(*fld.Min, 'f', -1, 64) + "."
		}
		if fld.Max != nil && n > *fld.Max {
			return "At most " + strconv.FormatFloat(*fld.Max, 'f', -1, 64) + "."
		}
		if fld.Kind == FieldInteger {
			out[fld.Name] = int64(n)
		} else {
			out[fld.Name] = n
		}
	case FieldString:
		n := utf8.RuneCountInString(v)
		if n < fld.MinLen {
			return fmt.Sprintf("At least %d characters.", fld.MinLen)
		}
		if n > fld.MaxLen {
			return fmt.Sprintf("At most %d characters.", fld.MaxLen)
		}
		switch fld.Format {
		case "email":
			if a, err := mail.ParseAddress(v); err != nil || a.Address != v {
				return "Enter an email address (name@example.com)."
			}
		case "uri":
			if u, err := url.Parse(v); err != nil || u.Scheme == "" || (u.Host == "" && u.Opaque == "") {
				return "Enter a full address (https://…)."
			}
		case "date":
			if _, err := time.Parse(time.DateOnly, v); err != nil || !dateRE.MatchString(v) {
				return "Enter a date (YYYY-MM-DD)."
			}
		case "date-time":
			t, err := time.Parse("2006-01-02T15:04", v) // what <input type=datetime-local> sends
			if err == nil {
				v = t.Format(time.RFC3339)
			} else if _, err := time.Parse(time.RFC3339, v); err != nil {
				return "Enter a date and time."
			}
		}
		out[fld.Name] = v
	}
	return ""
}
