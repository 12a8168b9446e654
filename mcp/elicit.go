package mcp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// form is an elicitation's requested schema as a person answers it in
// one line: a JSON object of its fields, or the value of its one field
// (or of its one required field) alone. Answers are checked against the
// schema with the library the SDK checks them with.
type form struct {
	message  string
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
	names    []string // required first, then by name
}

// maxQuestion bounds the question a server makes a person read.
const maxQuestion = 4000

func newForm(message string, requested any) (*form, error) {
	raw, err := json.Marshal(requested)
	if err != nil {
		return nil, err
	}
	f := &form{message: message, schema: &jsonschema.Schema{}}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, f.schema); err != nil {
			return nil, err
		}
	}
	if f.resolved, err = f.schema.Resolve(nil); err != nil {
		return nil, err
	}
	for name := range f.schema.Properties {
		f.names = append(f.names, name)
	}
	slices.SortFunc(f.names, func(a, b string) int {
		ra, rb := f.required(a), f.required(b)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return strings.Compare(a, b)
	})
	return f, nil
}

func (f *form) required(name string) bool { return slices.Contains(f.schema.Required, name) }

// single is the field a bare answer fills: the form's one field, or its
// one required field; "" when an answer must name its fields.
func (f *form) single() string {
	if len(f.names) == 1 {
		return f.names[0]
	}
	if len(f.schema.Required) == 1 {
		return f.schema.Required[0]
	}
	return ""
}

// question is the form for people: the server's message, each field with
// its type, limits and description, and how to answer; problem says why
// the last answer did not fit.
func (f *form) question(tool, problem string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (asked while %s runs)", strings.TrimSpace(f.message), tool)
	if len(f.names) > 0 {
		b.WriteString("\nFields:")
	}
	for _, name := range f.names {
		fmt.Fprintf(&b, "\n  %s (%s)", name, describe(f.schema.Properties[name], f.required(name)))
		p := f.schema.Properties[name]
		if about := strings.Join(slices.DeleteFunc([]string{p.Title, p.Description}, func(s string) bool { return s == "" }), ": "); about != "" {
			fmt.Fprintf(&b, ": %s", about)
		}
	}
	switch one := f.single(); {
	case len(f.names) == 0:
		b.WriteString("\nAnswer anything to accept")
	case one != "":
		fmt.Fprintf(&b, "\nAnswer with the value of %s, or a JSON object of the fields", one)
	default:
		b.WriteString("\nAnswer with a JSON object of the fields")
	}
	b.WriteString(`; "decline" refuses.`)
	if problem != "" {
		fmt.Fprintf(&b, "\nYour last answer did not fit: %s", problem)
	}
	return clip(b.String(), maxQuestion)
}

// describe is a field's type and limits, e.g. "integer 1–100, default 42".
func describe(s *jsonschema.Schema, required bool) string {
	parts := []string{s.Type}
	if s.Type == "" {
		parts[0] = strings.Join(s.Types, " or ")
	}
	if choices := enumOf(s); len(choices) > 0 {
		parts[0] = "one of " + strings.Join(choices, ", ")
	}
	if s.Items != nil {
		if choices := enumOf(s.Items); len(choices) > 0 {
			parts[0] = "a list of " + strings.Join(choices, ", ")
		}
	}
	if s.Format != "" {
		parts = append(parts, s.Format)
	}
	if s.Minimum != nil || s.Maximum != nil {
		parts = append(parts, fmt.Sprintf("%s–%s", number(s.Minimum), number(s.Maximum)))
	}
	if required {
		parts = append(parts, "required")
	}
	if len(s.Default) > 0 {
		parts = append(parts, "default "+string(s.Default))
	}
	return strings.Join(parts, ", ")
}

func number(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'f', -1, 64)
}

// enumOf is the values a field may take, from enum or from oneOf/anyOf
// consts.
func enumOf(s *jsonschema.Schema) []string {
	var out []string
	for _, v := range s.Enum {
		out = append(out, fmt.Sprint(v))
	}
	for _, alt := range append(slices.Clone(s.OneOf), s.AnyOf...) {
		if alt.Const != nil {
			out = append(out, fmt.Sprint(*alt.Const))
		}
	}
	return out
}

// options are the answers to suggest: the values of the one field.
func (f *form) options() []string {
	if one := f.single(); one != "" && len(f.names) == 1 {
		return enumOf(f.schema.Properties[one])
	}
	return nil
}

// parse turns an answer into the form's content, or says why it does not
// fit.
func (f *form) parse(answer string) (map[string]any, string) {
	answer = strings.TrimSpace(answer)
	content := map[string]any{}
	switch one := f.single(); {
	case strings.HasPrefix(answer, "{"):
		if err := json.Unmarshal([]byte(answer), &content); err != nil {
			return nil, fmt.Sprintf("it is not a JSON object (%v)", err)
		}
	case len(f.names) == 0:
	case one == "":
		return nil, "this form has several fields: answer with a JSON object of them"
	default:
		v, problem := coerce(answer, f.schema.Properties[one])
		if problem != "" {
			return nil, one + ": " + problem
		}
		content[one] = v
	}
	if err := f.resolved.Validate(content); err != nil {
		return nil, clip(err.Error(), 300)
	}
	return content, ""
}

// coerce reads a bare answer as the field's type.
func coerce(answer string, s *jsonschema.Schema) (any, string) {
	switch s.Type {
	case "integer", "number":
		n, err := strconv.ParseFloat(answer, 64)
		if err != nil {
			return nil, fmt.Sprintf("%q is not a number", answer)
		}
		return n, ""
	case "boolean":
		switch strings.ToLower(answer) {
		case "y", "yes", "true":
			return true, ""
		case "n", "no", "false":
			return false, ""
		}
		return nil, fmt.Sprintf("%q is not yes or no", answer)
	case "array":
		var items []any
		for _, it := range strings.Split(answer, ",") {
			items = append(items, strings.TrimSpace(it))
		}
		return items, ""
	}
	return answer, ""
}
