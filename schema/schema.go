// Package schema is a run's output schema (--output-schema): a JSON Schema
// the final answer must satisfy, read and checked once, and the answer
// checked against it (README.md#structured-output). Validation is
// github.com/google/jsonschema-go, which runs the JSON-Schema-Test-Suite
// for drafts 2020-12 and 07.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// MaxBytes bounds a schema: it goes into every request's system prompt.
const MaxBytes = 256 << 10

// Schema is an output schema, checked as a JSON Schema.
type Schema struct {
	raw      json.RawMessage // compacted
	resolved *jsonschema.Resolved
	object   bool // its root says "type": "object"
}

// drafts are the $schema values jsonschema-go validates ("" is 2020-12).
var drafts = []string{
	"",
	"https://json-schema.org/draft/2020-12/schema",
	"http://json-schema.org/draft-07/schema#",
	"https://json-schema.org/draft-07/schema#",
}

// typeNames are the words of the "type" keyword.
var typeNames = []string{"null", "boolean", "object", "array", "number", "integer", "string"}

// Parse checks raw as a JSON Schema: one JSON object (or boolean), of a
// draft that can be validated, whose keywords make sense and whose $refs
// stay inside it (nothing is fetched).
func Parse(raw json.RawMessage) (*Schema, error) {
	if len(raw) > MaxBytes {
		return nil, fmt.Errorf("the schema is %d bytes; at most %d are allowed", len(raw), MaxBytes)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(compact.Bytes(), &s); err != nil {
		return nil, fmt.Errorf("not a JSON Schema: %w", err)
	}
	if !slices.Contains(drafts, s.Schema) {
		return nil, fmt.Errorf("not a JSON Schema this version checks: $schema %q; use draft 2020-12 or draft-07", s.Schema)
	}
	var doc any
	if err := json.Unmarshal(compact.Bytes(), &doc); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if err := checkTypes(doc, ""); err != nil {
		return nil, fmt.Errorf("not a valid JSON Schema: %w", err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("not a valid JSON Schema: %w", err)
	}
	return &Schema{raw: compact.Bytes(), resolved: resolved, object: s.Type == "object"}, nil
}

// checkTypes refuses a "type" that names no JSON type ("strnig"), which
// jsonschema-go would take and then fail every answer on. Values that are
// data, not schemas (const, enum, default, examples), are not looked into.
func checkTypes(v any, at string) error {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			switch k {
			case "const", "enum", "default", "examples":
				continue
			case "type":
				if err := checkType(sub, at); err != nil {
					return err
				}
				if _, ok := sub.(map[string]any); !ok {
					continue // a property named "type" is a schema, looked into below
				}
			}
			if err := checkTypes(sub, at+"/"+k); err != nil {
				return err
			}
		}
	case []any:
		for i, sub := range v {
			if err := checkTypes(sub, fmt.Sprintf("%s/%d", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkType(v any, at string) error {
	names, ok := v.([]any)
	if !ok {
		names = []any{v}
	}
	for _, n := range names {
		if s, ok := n.(string); ok && !slices.Contains(typeNames, s) {
			return fmt.Errorf("%s/type: %q is no JSON type (%s)", at, s, strings.Join(typeNames, ", "))
		}
	}
	return nil
}

// ReadFile reads and parses the schema in path; the error names the file.
func ReadFile(path string) (*Schema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("output schema %s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("output schema %s: not a regular file", path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("output schema %s: %w", path, unwrapPath(err))
	}
	s, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("output schema %s: %w", path, err)
	}
	return s, nil
}

// unwrapPath is the cause of a file error, without the path said twice.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// JSON is the schema as the run keeps it and the model is shown it.
func (s *Schema) JSON() json.RawMessage { return s.raw }

// Error is an answer the schema refuses; Why says what to fix.
type Error struct{ Why string }

func (e *Error) Error() string {
	return "the final answer does not satisfy the output schema (--output-schema): " + e.Why
}

// Check takes answer as the one JSON value the schema asks for and
// returns it compacted. A code fence around the whole answer (```json …
// ```) is taken off first; anything else around the value is an error,
// as is a value the schema refuses: an *Error.
func (s *Schema) Check(answer string) (json.RawMessage, error) {
	text := unfence(strings.TrimSpace(answer))
	if text == "" {
		return nil, &Error{Why: "the answer is empty: it must be one JSON value"}
	}
	dec := json.NewDecoder(strings.NewReader(text))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, &Error{Why: fmt.Sprintf("the answer is not JSON: %v", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Error{Why: "the answer has text after its JSON value: it must be that value alone"}
	}
	var value any
	if err := json.Unmarshal(raw, &value); err != nil {
		return nil, &Error{Why: fmt.Sprintf("the answer is not JSON: %v", err)}
	}
	if err := s.resolved.Validate(value); err != nil {
		return nil, &Error{Why: strings.TrimPrefix(err.Error(), "validating root: ")}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, &Error{Why: fmt.Sprintf("the answer is not JSON: %v", err)}
	}
	return compact.Bytes(), nil
}

// unfence takes a Markdown code fence off text that is nothing else.
func unfence(text string) string {
	if !strings.HasPrefix(text, "```") || !strings.HasSuffix(text, "```") || len(text) < 6 {
		return text
	}
	body := text[3 : len(text)-3]
	first, rest, ok := strings.Cut(body, "\n")
	if !ok || strings.ContainsAny(strings.TrimSpace(first), " \t{[\"") {
		return text // the first line is not a language tag
	}
	return strings.TrimSpace(rest)
}

// ResponseFormat reports whether the schema can be sent as a provider's
// response_format json_schema (its root must be an object), and whether
// strictly: OpenAI's strict mode wants every object closed
// (additionalProperties false) with all its properties required.
func (s *Schema) ResponseFormat() (ok, strict bool) {
	if !s.object {
		return false, false
	}
	var doc any
	if json.Unmarshal(s.raw, &doc) != nil {
		return false, false
	}
	return true, strictObjects(doc)
}

// strictObjects reports whether every schema in v with properties is
// closed and requires them all.
func strictObjects(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok {
			if v["additionalProperties"] != false {
				return false
			}
			req, _ := v["required"].([]any)
			for name := range props {
				if !slices.Contains(req, any(name)) {
					return false
				}
			}
		}
		for k, sub := range v {
			if k == "const" || k == "enum" || k == "default" || k == "examples" {
				continue
			}
			if !strictObjects(sub) {
				return false
			}
		}
	case []any:
		for _, sub := range v {
			if !strictObjects(sub) {
				return false
			}
		}
	}
	return true
}
