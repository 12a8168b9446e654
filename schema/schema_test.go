package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const person = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name","age"],"additionalProperties":false}`

func TestParseRefusesWhatIsNoSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ schema, want string }{
		{`{"type":`, "not JSON"},
		{`"a string"`, "not a JSON Schema"},
		{`{"type":5}`, "not a JSON Schema"},
		{`{"type":"strnig"}`, `"strnig" is no JSON type`},
		{`{"properties":{"a":{"type":["string","nul"]}}}`, `/properties/a/type: "nul"`},
		{`{"required":"a"}`, "not a JSON Schema"},
		{`{"$schema":"http://json-schema.org/draft-04/schema#"}`, "draft 2020-12 or draft-07"},
		{`{"$ref":"https://example.com/other.json"}`, "not a valid JSON Schema"},
		{`{"pattern":"(?<=a)"}`, "not a valid JSON Schema"},
	} {
		if _, err := Parse([]byte(tc.schema)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", tc.schema, err, tc.want)
		}
	}
	// Data that merely looks like a bad type is no schema keyword.
	for _, ok := range []string{`{"const":{"type":"circle"}}`, `{"properties":{"type":{"type":"string"}}}`, `true`, `{}`} {
		if _, err := Parse([]byte(ok)); err != nil {
			t.Errorf("Parse(%s) = %v, want it accepted", ok, err)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(person))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ answer, want, err string }{
		{`{"name": "Ada", "age": 36}`, `{"name":"Ada","age":36}`, ""},
		{"```json\n{\"name\":\"Ada\",\"age\":36}\n```", `{"name":"Ada","age":36}`, ""},
		{"Here it is: {\"name\":\"Ada\",\"age\":36}", "", "not JSON"},
		{`{"name":"Ada","age":36} Hope that helps!`, "", "text after its JSON value"},
		{`{"name":"Ada"}`, "", `missing properties: ["age"]`},
		{`{"name":"Ada","age":-1}`, "", "minimum"},
		{`{"name":"Ada","age":36,"x":1}`, "", "additional properties"},
		{"", "", "empty"},
	} {
		got, err := s.Check(tc.answer)
		switch {
		case tc.err == "" && (err != nil || string(got) != tc.want):
			t.Errorf("Check(%q) = %s, %v; want %s", tc.answer, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Check(%q) = %s, %v; want an error with %q", tc.answer, got, err, tc.err)
		}
	}
}

func TestDraft07(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":{"type":"number"},"maxItems":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(`[1, 2]`); err != nil {
		t.Errorf("[1,2]: %v", err)
	}
	if _, err := s.Check(`[1, 2, 3]`); err == nil {
		t.Error("[1,2,3] passed maxItems 2")
	}
	if ok, _ := s.ResponseFormat(); ok {
		t.Error("an array schema is offered as response_format, whose root must be an object")
	}
}

func TestResponseFormatStrict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schema     string
		ok, strict bool
	}{
		{person, true, true},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, true, false},
		{`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}},"required":["a"],"additionalProperties":false}`, true, false},
		{`{"type":"string"}`, false, false},
	} {
		s, err := Parse([]byte(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		if ok, strict := s.ResponseFormat(); ok != tc.ok || strict != tc.strict {
			t.Errorf("ResponseFormat(%s) = %t, %t; want %t, %t", tc.schema, ok, strict, tc.ok, tc.strict)
		}
	}
}

func TestReadFileNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	if _, err := ReadFile(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{nope"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("bad file: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"description":"`+strings.Repeat("x", MaxBytes)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("big file: %v", err)
	}
	if _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

// BenchmarkCheck is what checking a final answer costs: a 1 KiB object
// against a schema of a few properties.
func BenchmarkCheck(b *testing.B) {
	s, err := Parse([]byte(`{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"age":{"type":"integer","minimum":0}},"required":["name","age"]}`))
	if err != nil {
		b.Fatal(err)
	}
	answer := `{"name":"Ada","age":36,"tags":[` + strings.Repeat(`"analytical engine",`, 50) + `"end"]}`
	for b.Loop() {
		if _, err := s.Check(answer); err != nil {
			b.Fatal(err)
		}
	}
}
