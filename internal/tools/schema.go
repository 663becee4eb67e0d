package tools

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaBase is where a tool's schema "lives" for resolving $ref. Nothing is
// ever loaded from it: refLoader refuses every URL, so a schema (for instance
// one sent by an MCP server) cannot make the compiler read files or the network.
const schemaBase = "https://atrium.invalid/tools/"

type refLoader struct{}

func (refLoader) Load(url string) (any, error) {
	return nil, errors.New("external $ref is not supported; put definitions in $defs")
}

// compileSchema compiles a tool's argument schema (draft 2020-12 unless it
// declares another draft). The top level must be an object schema.
func compileSchema(name string, raw []byte) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("schema is required")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok || obj["type"] != "object" {
		return nil, errors.New(`schema must have "type": "object" at the top level`)
	}
	sch, err := compileDraft(name, doc, jsonschema.Draft2020)
	if _, declared := obj["$schema"]; err != nil && !declared {
		// Many tools are written for draft-07 without saying so (tuple "items", say).
		if sch7, err7 := compileDraft(name, doc, jsonschema.Draft7); err7 == nil {
			return sch7, nil
		}
	}
	return sch, err
}

func compileDraft(name string, doc any, draft *jsonschema.Draft) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(draft)
	c.UseLoader(refLoader{})
	loc := schemaBase + name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

var printer = message.NewPrinter(language.English)

// validationDetail turns a schema validation failure into one line of at most
// maxDetail bytes: "path: reason", plus a count of further problems. The path
// is the instance location joined with "." (root for the whole document).
func validationDetail(err error, root string) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "the arguments do not match the schema"
	}
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, describe(e, root))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.Sort(leaves) // the validator's order follows Go map iteration
	leaves = slices.Compact(leaves)
	if len(leaves) == 0 {
		return "the arguments do not match the schema"
	}
	d := leaves[0]
	if n := len(leaves) - 1; n == 1 {
		d += " (and 1 more problem)"
	} else if n > 1 {
		d += fmt.Sprintf(" (and %d more problems)", n)
	}
	return capText(oneLine(d), maxDetail)
}

func describe(e *jsonschema.ValidationError, root string) string {
	loc := e.InstanceLocation
	var reason string
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		reason = fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		if len(k.Missing) == 1 {
			loc, reason = append(slices.Clip(loc), k.Missing[0]), "is required"
		} else {
			reason = "missing required properties " + strings.Join(k.Missing, ", ")
		}
	case *kind.AdditionalProperties:
		if len(k.Properties) == 1 {
			loc, reason = append(slices.Clip(loc), k.Properties[0]), "is not an allowed property"
		} else {
			reason = "properties not allowed: " + strings.Join(k.Properties, ", ")
		}
	case *kind.MaxLength:
		reason = fmt.Sprintf("must be at most %d characters, got %d", k.Want, k.Got)
	case *kind.MinLength:
		reason = fmt.Sprintf("must be at least %d characters, got %d", k.Want, k.Got)
	case *kind.FalseSchema:
		reason = "is not allowed"
	default:
		reason = e.ErrorKind.LocalizedString(printer)
	}
	path := root
	if len(loc) > 0 {
		path = strings.Join(loc, ".")
	}
	return path + ": " + reason
}
