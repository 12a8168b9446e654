package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/prompts"
)

// personSchema is the output schema of these tests: strict enough for
// OpenAI's strict mode.
const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name","age"],"additionalProperties":false}`

// writeSchema puts schema in a file of the test's and returns its path.
func writeSchema(t *testing.T, schema string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "person.schema.json")
	if err := os.WriteFile(path, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// schemaFixes are the requests' messages that sent an answer back.
func schemaFixes(msgs []llmtest.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == "user" && strings.HasPrefix(m.Content, prompts.SchemaFixHeading) {
			out = append(out, m.Content)
		}
	}
	return out
}

// TestOutputSchemaFirstTime: an answer valid against --output-schema
// completes the run with it as data.output; the model was shown the
// schema; a local endpoint is sent no response_format; without --json,
// stdout is the JSON value alone.
func TestOutputSchemaFirstTime(t *testing.T) {
	t.Parallel()
	answer := llmtest.Turn{Text: `{"name": "Ada", "age": 36}`}
	e := e2etest.New(t, answer, answer)
	file := writeSchema(t, personSchema)

	res := e.Run("run", "--json", "--output-schema", file, "who wrote the first program?")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	fin := e2etest.LastFinished(t, evs)
	if evs[len(evs)-1].Type != event.RunCompleted || string(fin.Output) != `{"name":"Ada","age":36}` || fin.Turns != 1 {
		t.Errorf("end = %s %+v, want completed with output {\"name\":\"Ada\",\"age\":36} in 1 turn", evs[len(evs)-1].Type, fin)
	}
	var started event.RunStartedData
	if err := evs[0].Decode(&started); err != nil || !started.OutputSchema {
		t.Errorf("run.started = %+v (%v), want output_schema true", started, err)
	}
	req := e.Srv.Requests()[0]
	if sys := req.Messages()[0]; sys.Role != "system" || !strings.Contains(sys.Content, personSchema) {
		t.Errorf("system prompt does not show the schema:\n%s", sys.Content)
	}
	var body map[string]json.RawMessage
	if err := req.Decode(&body); err != nil || body["response_format"] != nil {
		t.Errorf("a local endpoint was sent response_format %s (%v)", body["response_format"], err)
	}

	plain := e.Run("run", "--output-schema", file, "again")
	if plain.Code != 0 || plain.Stdout != "{\"name\":\"Ada\",\"age\":36}\n" {
		t.Errorf("plain run: exit %d, stdout %q, want the JSON value alone; stderr: %s", plain.Code, plain.Stdout, plain.Stderr)
	}
}

// TestOutputSchemaAfterOneFix: an answer that is not the JSON value asked
// for is sent back with what is wrong, once; the fixed answer completes
// the run, the fix counted as a turn.
func TestOutputSchemaAfterOneFix(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: `Sure! Here it is: {"name": "Ada", "age": 36}`},
		llmtest.Turn{Text: "```json\n{\"name\": \"Ada\", \"age\": 36}\n```"},
	)
	res := e.Run("run", "--json", "--output-schema", writeSchema(t, personSchema), "who?")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, res.Stdout))
	if string(fin.Output) != `{"name":"Ada","age":36}` || fin.Turns != 2 {
		t.Errorf("end = %+v, want the output after 2 turns", fin)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	fixes := schemaFixes(reqs[1].Messages())
	if len(fixes) != 1 || !strings.Contains(fixes[0], "not JSON") {
		t.Errorf("the second request's fixes = %q, want one saying the answer is not JSON", fixes)
	}
	if last := reqs[1].LastMessage(); !strings.HasPrefix(last.Content, prompts.SchemaFixHeading) {
		t.Errorf("the second request ends with %+v, want the fix", last)
	}
}

// TestOutputSchemaNever: a model that never gives a valid answer is asked
// to fix it twice, then the run fails with reason schema, exit 1, the
// detail naming what is wrong.
func TestOutputSchemaNever(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: `{"name": "Ada"}`},
		llmtest.Turn{Text: `{"name": "Ada", "age": "36"}`},
		llmtest.Turn{Text: `{"name": "Ada", "age": -1}`},
		llmtest.Turn{Text: `{"name": "Ada", "age": 36}`}, // only after a resume
	)
	res := e.Run("run", "--json", "--output-schema", writeSchema(t, personSchema), "who?")
	if res.Code != 1 {
		t.Fatalf("exit %d, want 1: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	fin := e2etest.LastFinished(t, evs)
	if evs[len(evs)-1].Type != event.RunFailed || fin.Reason != event.ReasonSchema || !strings.Contains(fin.Detail, "minimum") || fin.Output != nil || fin.Turns != 3 {
		t.Errorf("end = %s %+v, want run.failed reason schema naming the minimum, no output, 3 turns", evs[len(evs)-1].Type, fin)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3: the answer and two fixes", len(reqs))
	}
	if fixes := schemaFixes(reqs[2].Messages()); len(fixes) != 2 || !strings.Contains(fixes[0], `"age"`) || !strings.Contains(fixes[1], "last attempt") {
		t.Errorf("fixes asked = %q", fixes)
	}
	if !strings.Contains(res.Stderr, "output schema") {
		t.Errorf("stderr does not say why: %s", res.Stderr)
	}

	// Resumed, it has two fixes more: the first gets a valid answer.
	again := e.Run("resume", evs[0].RunID, "--json")
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, again.Stdout)); again.Code != 0 || string(fin.Output) != `{"name":"Ada","age":36}` {
		t.Errorf("resume: exit %d, end %+v; want the output", again.Code, fin)
	}
}

// TestOutputSchemaResumedMidFix: a kill -9 while the model answers the
// first fix loses nothing: resume asks again, and only one more fix, as
// the fixes are counted from the journal.
func TestOutputSchemaResumedMidFix(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: `not json`},
		llmtest.Turn{Text: `{"na`, Hang: true},
		llmtest.Turn{Text: `{"name": "Ada"}`},
		llmtest.Turn{Text: `{"name": "Ada", "age": 1.5}`},
		llmtest.Turn{Text: `{"name": "Ada", "age": 36}`}, // a third fix would get it
	)
	file := writeSchema(t, personSchema)
	b := e.Start("run", "--json", "--output-schema", file, "who?")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the model to answer the fix", func() bool { return e.Srv.RequestCount() == 2 })
	b.Kill9(t)

	res := e.Run("resume", runID, "--json")
	if res.Code != 1 {
		t.Fatalf("resume exit %d, want 1: %s", res.Code, res.Stderr)
	}
	fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, res.Stdout))
	if fin.Reason != event.ReasonSchema || !strings.Contains(fin.Detail, "integer") {
		t.Errorf("end = %+v, want reason schema about the integer", fin)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4: the answer, the fix killed, it again, the second fix", len(reqs))
	}
	if !e2etest.EqualJSON(t, reqs[1].Messages(), reqs[2].Messages()) {
		t.Errorf("the resumed request differs from the one the kill interrupted")
	}
	if n := len(schemaFixes(reqs[3].Messages())); n != 2 {
		t.Errorf("the last request has %d fixes, want 2", n)
	}
}

// TestOutputSchemaResponseFormat: an endpoint that takes response_format
// (config.toml's structured_outputs) is sent the schema as json_schema,
// strict as the schema allows; one that refuses it with a 400 is asked
// again without it, with a warning, and the answer is still checked.
func TestOutputSchemaResponseFormat(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: `{"name": "Ada", "age": 36}`},
		llmtest.Turn{Status: 400, Body: `{"error":{"message":"This model does not support response format json_schema","type":"invalid_request_error"}}`},
		llmtest.Turn{Text: `{"name": "Ada", "age": 36}`},
	)
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte("structured_outputs = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeSchema(t, personSchema)
	if res := e.Run("run", "--json", "--output-schema", file, "who?"); res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var body struct {
		ResponseFormat struct {
			Type       string `json:"type"`
			JSONSchema struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
				Strict bool            `json:"strict"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	if err := e.Srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	f := body.ResponseFormat
	if f.Type != "json_schema" || f.JSONSchema.Name != "output" || !f.JSONSchema.Strict || string(f.JSONSchema.Schema) != personSchema {
		t.Errorf("response_format = %+v, want json_schema %q strict with the schema", f, "output")
	}

	res := e.Run("run", "--json", "--output-schema", file, "again")
	if res.Code != 0 {
		t.Fatalf("exit %d after a refused response_format: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	warned := false
	for _, ev := range e2etest.OfType(evs, event.Warning) {
		warned = warned || strings.Contains(string(ev.Data), "refused response_format")
	}
	if !warned || string(e2etest.LastFinished(t, evs).Output) != `{"name":"Ada","age":36}` {
		t.Errorf("warned %t, end %+v; want a warning and the output", warned, e2etest.LastFinished(t, evs))
	}
	reqs := e.Srv.Requests()
	var retried map[string]json.RawMessage
	if err := reqs[len(reqs)-1].Decode(&retried); err != nil || retried["response_format"] != nil {
		t.Errorf("the request after the refusal still has response_format %s", retried["response_format"])
	}
}

// TestOutputSchemaChat: each message of a scripted agent chat is a run
// with the output schema.
func TestOutputSchemaChat(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: `{"name": "Ada", "age": 36}`})
	cmd := e.Command("chat", "--json", "--output-schema", writeSchema(t, personSchema))
	cmd.Stdin = strings.NewReader("who wrote the first program?\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent chat: %v", err)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, string(out))); string(fin.Output) != `{"name":"Ada","age":36}` {
		t.Errorf("end = %+v, want the output", fin)
	}
}

// TestOutputSchemaBadFile: a schema file that is missing, not JSON or no
// JSON Schema is a usage error (exit 2) naming the file, before any model
// request or run.
func TestOutputSchemaBadFile(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	dir := t.TempDir()
	notJSON, notSchema := filepath.Join(dir, "broken.json"), filepath.Join(dir, "typo.json")
	if err := os.WriteFile(notJSON, []byte(`{"type": "object",`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notSchema, []byte(`{"type": "objcet"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.json"), "no such file"},
		{notJSON, "not JSON"},
		{notSchema, `"objcet" is no JSON type`},
	} {
		for _, cmd := range [][]string{{"run", "--output-schema", tc.file, "hi"}, {"chat", "--output-schema", tc.file},
			{"jobs", "create", "--name", "n", "--cron", "@hourly", "--prompt", "p", "--output-schema", tc.file}} {
			res := e.Run(cmd...)
			if res.Code != 2 || !strings.Contains(res.Stderr, "--output-schema") || !strings.Contains(res.Stderr, tc.file) || !strings.Contains(res.Stderr, tc.want) {
				t.Errorf("agent %s: exit %d, stderr %q; want 2 naming the flag, the file and %q", cmd[0], res.Code, res.Stderr, tc.want)
			}
		}
	}
	if res := e.Run("run", "--output-schema", writeSchema(t, personSchema), "--until", "DONE", "hi"); res.Code != 2 || !strings.Contains(res.Stderr, "--until") {
		t.Errorf("--output-schema with --until: exit %d %s", res.Code, res.Stderr)
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests for bad input", n)
	}
}
