package plan

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// phaseJSON is a valid phase with fields overridden, as a JSON object.
// A nil value removes the field.
func phaseJSON(id string, over map[string]any) map[string]any {
	ph := map[string]any{
		"id":           id,
		"instructions": "do " + id,
		"evidence":     map[string]any{"type": "none"},
	}
	for k, v := range over {
		if v == nil {
			delete(ph, k)
			continue
		}
		ph[k] = v
	}
	return ph
}

// planJSON is a plan with the given phases, as JSON text.
func planJSON(t *testing.T, phases ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"objective": "ship it", "phases": phases})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	ev := func(e map[string]any) map[string]any { return map[string]any{"evidence": e} }
	tests := []struct {
		name  string
		input string
		field string
		msg   string
	}{
		// JSON problems.
		{name: "empty input", input: "", msg: "the input is empty"},
		{name: "not JSON", input: `{"objective": "x",}`, msg: "not valid JSON at byte 19: invalid character '}' looking for beginning of object key string"},
		{name: "cut short", input: `{"objective": "x", "phases": [`, msg: "not valid JSON: the input ends too early"},
		{name: "trailing data", input: planJSON(t, phaseJSON("a", nil)) + ` {}`, msg: "trailing data after the plan object"},
		{name: "unknown top-level field", input: `{"objective":"x","phase":[]}`, msg: `unknown field "phase"`},
		{name: "typo in a phase field", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", map[string]any{"depends": []string{"a"}})),
			field: "phases[1]", msg: `unknown field "depends"`},
		{name: "typo in an evidence field", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "programmatic", "cmd": "true"}))),
			field: "phases[0]", msg: `unknown field "cmd"`},
		{name: "objective not a string", input: `{"objective":5,"phases":[]}`, field: "objective", msg: "must be a string, not number"},
		{name: "phases not a list", input: `{"objective":"x","phases":{}}`, field: "phases", msg: "must be a list, not object"},
		{name: "max_attempts a string", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", map[string]any{"max_attempts": "3"})),
			field: "phases[1].max_attempts", msg: "must be an integer, not string"},
		{name: "max_attempts a fraction", input: planJSON(t, phaseJSON("a", map[string]any{"max_attempts": 2.5})),
			field: "phases[0].max_attempts", msg: "must be an integer, not number 2.5"},
		{name: "depends_on a string", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", map[string]any{"depends_on": "a"})),
			field: "phases[1].depends_on", msg: "must be a list, not string"},
		{name: "artifacts a string", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact", "artifacts": "a.md"}))),
			field: "phases[0].evidence.artifacts", msg: "must be a list, not string"},
		{name: "evidence a string", input: planJSON(t, phaseJSON("a", map[string]any{"evidence": "artifact"})),
			field: "phases[0].evidence", msg: "must be an object, not string"},

		// Plan-level rules.
		{name: "version", input: `{"version":2,"objective":"x","phases":[]}`, field: "version", msg: "unsupported version 2 (want 1)"},
		{name: "no objective", input: `{"phases":[]}`, field: "objective", msg: "is empty"},
		{name: "blank objective", input: `{"objective":"  \n","phases":[]}`, field: "objective", msg: "is empty"},
		{name: "no phases", input: `{"objective":"x"}`, field: "phases", msg: "a plan needs at least one phase"},
		{name: "empty phases", input: `{"objective":"x","phases":[]}`, field: "phases", msg: "a plan needs at least one phase"},

		// Ids.
		{name: "missing id", input: planJSON(t, phaseJSON("", nil)), field: "phases[0].id",
			msg: `"" is not a slug (lowercase letters, digits, - and _)`},
		{name: "uppercase id", input: planJSON(t, phaseJSON("a", nil), phaseJSON("Gather", nil)), field: "phases[1].id",
			msg: `"Gather" is not a slug (lowercase letters, digits, - and _)`},
		{name: "id with a space", input: planJSON(t, phaseJSON("write report", nil)), field: "phases[0].id",
			msg: `"write report" is not a slug (lowercase letters, digits, - and _)`},
		{name: "id starting with a dash", input: planJSON(t, phaseJSON("-a", nil)), field: "phases[0].id",
			msg: `"-a" is not a slug (lowercase letters, digits, - and _)`},
		{name: "id with a slash", input: planJSON(t, phaseJSON("../a", nil)), field: "phases[0].id",
			msg: `"../a" is not a slug (lowercase letters, digits, - and _)`},
		{name: "id too long", input: planJSON(t, phaseJSON(strings.Repeat("a", 65), nil)), field: "phases[0].id",
			msg: `"` + strings.Repeat("a", 65) + `" is not a slug (lowercase letters, digits, - and _)`},
		{name: "duplicate id", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", nil), phaseJSON("a", nil)),
			field: "phases[2].id", msg: `"a" repeats phases[0].id`},

		// Phase fields.
		{name: "no instructions", input: planJSON(t, phaseJSON("a", map[string]any{"instructions": nil})),
			field: "phases[0].instructions", msg: "is empty"},
		{name: "blank instructions", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", map[string]any{"instructions": " \t"})),
			field: "phases[1].instructions", msg: "is empty"},
		{name: "max_attempts negative", input: planJSON(t, phaseJSON("a", map[string]any{"max_attempts": -1})),
			field: "phases[0].max_attempts", msg: "-1 is out of range 1..20"},
		{name: "max_attempts too high", input: planJSON(t, phaseJSON("a", map[string]any{"max_attempts": 21})),
			field: "phases[0].max_attempts", msg: "21 is out of range 1..20"},
		{name: "max_iterations without until", input: planJSON(t, phaseJSON("a", map[string]any{"max_iterations": 5})),
			field: "phases[0].until", msg: "max_iterations needs until, the promise that marks the phase complete"},
		{name: "max_iterations with blank until", input: planJSON(t, phaseJSON("a", map[string]any{"max_iterations": 5, "until": " "})),
			field: "phases[0].until", msg: "max_iterations needs until, the promise that marks the phase complete"},
		{name: "max_iterations negative", input: planJSON(t, phaseJSON("a", map[string]any{"max_iterations": -1})),
			field: "phases[0].max_iterations", msg: "must not be negative"},
		{name: "until on two lines", input: planJSON(t, phaseJSON("a", map[string]any{"until": "DONE\nREALLY"})),
			field: "phases[0].until", msg: "must be a single line"},

		// Evidence rules.
		{name: "evidence missing", input: planJSON(t, phaseJSON("a", map[string]any{"evidence": nil})),
			field: "phases[0].evidence.type", msg: "is missing; use artifact, receipt, hybrid, programmatic or none"},
		{name: "evidence type unknown", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", ev(map[string]any{"type": "file"}))),
			field: "phases[1].evidence.type", msg: `"file" is not one of artifact, receipt, hybrid, programmatic, none`},
		{name: "artifact without files", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact"}))),
			field: "phases[0].evidence.artifacts", msg: "artifact evidence needs at least one file"},
		{name: "artifact with an empty path", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact", "artifacts": []string{"a.md", " "}}))),
			field: "phases[0].evidence.artifacts[1]", msg: "is empty"},
		{name: "artifact leaving the workspace", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact", "artifacts": []string{"../outside.md"}}))),
			field: "phases[0].evidence.artifacts[0]", msg: `"../outside.md" leaves the workspace; give a path inside it`},
		{name: "artifact leaving after cleaning", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", ev(map[string]any{"type": "hybrid", "artifacts": []string{"ok.md", "out/../../x.md"}, "receipts": []string{"email_sent"}}))),
			field: "phases[1].evidence.artifacts[1]", msg: `"out/../../x.md" leaves the workspace; give a path inside it`},
		{name: "artifact absolute", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact", "artifacts": []string{"/etc/passwd"}}))),
			field: "phases[0].evidence.artifacts[0]", msg: `"/etc/passwd" is absolute; give a path relative to the workspace`},
		{name: "artifact the workspace itself", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact", "artifacts": []string{"sub/.."}}))),
			field: "phases[0].evidence.artifacts[0]", msg: `"sub/.." is the workspace itself; give a file inside it`},
		{name: "artifact with a NUL byte", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "artifact", "artifacts": []string{"a\x00.md"}}))),
			field: "phases[0].evidence.artifacts[0]", msg: `"a\x00.md" contains a NUL byte`},
		{name: "artifact outside under evidence none", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "none", "artifacts": []string{".."}}))),
			field: "phases[0].evidence.artifacts[0]", msg: `".." leaves the workspace; give a path inside it`},
		{name: "receipt without types", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "receipt", "receipts": []string{}}))),
			field: "phases[0].evidence.receipts", msg: "receipt evidence needs at least one receipt type"},
		{name: "receipt with an empty type", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "receipt", "receipts": []string{""}}))),
			field: "phases[0].evidence.receipts[0]", msg: "is empty"},
		{name: "hybrid without receipts", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "hybrid", "artifacts": []string{"a.md"}}))),
			field: "phases[0].evidence", msg: "hybrid evidence needs both artifacts and receipts"},
		{name: "hybrid without artifacts", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "hybrid", "receipts": []string{"email_sent"}}))),
			field: "phases[0].evidence", msg: "hybrid evidence needs both artifacts and receipts"},
		{name: "programmatic without command", input: planJSON(t, phaseJSON("a", ev(map[string]any{"type": "programmatic", "command": "  "}))),
			field: "phases[0].evidence.command", msg: "programmatic evidence needs a command"},

		// Dependencies.
		{name: "unknown dependency", input: planJSON(t, phaseJSON("gather", nil), phaseJSON("report", map[string]any{"depends_on": []string{"gathr"}})),
			field: "phases[1].depends_on[0]", msg: `unknown phase "gathr"`},
		{name: "unknown second dependency", input: planJSON(t, phaseJSON("a", nil), phaseJSON("b", nil), phaseJSON("c", map[string]any{"depends_on": []string{"a", "z"}})),
			field: "phases[2].depends_on[1]", msg: `unknown phase "z"`},
		{name: "self dependency", input: planJSON(t, phaseJSON("a", map[string]any{"depends_on": []string{"a"}})),
			field: "phases[0].depends_on[0]", msg: `phase "a" depends on itself`},
		{name: "two-cycle", input: planJSON(t, phaseJSON("a", map[string]any{"depends_on": []string{"b"}}), phaseJSON("b", map[string]any{"depends_on": []string{"a"}})),
			field: "phases", msg: "dependency cycle: a -> b -> a"},
		{name: "three-cycle behind a clean phase", input: planJSON(t,
			phaseJSON("start", nil),
			phaseJSON("a", map[string]any{"depends_on": []string{"start", "c"}}),
			phaseJSON("b", map[string]any{"depends_on": []string{"a"}}),
			phaseJSON("c", map[string]any{"depends_on": []string{"b"}})),
			field: "phases", msg: "dependency cycle: a -> c -> b -> a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tt.input))
			if p != nil {
				t.Errorf("Parse returned a plan along with %v", err)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error = %v (%T), want *plan.Error", err, err)
			}
			if perr.Field != tt.field || perr.Msg != tt.msg {
				t.Errorf("error = {Field: %q, Msg: %q}\nwant    {Field: %q, Msg: %q}", perr.Field, perr.Msg, tt.field, tt.msg)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	e := &Error{Field: "phases[1].depends_on[0]", Msg: `unknown phase "gathr"`}
	if got := e.Error(); got != `invalid plan: phases[1].depends_on[0]: unknown phase "gathr"` {
		t.Errorf("Error() = %q", got)
	}
	e = &Error{Msg: "the input is empty"}
	if got := e.Error(); got != "invalid plan: the input is empty" {
		t.Errorf("Error() = %q", got)
	}
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
	}{
		{name: "every evidence type", input: planJSON(t,
			phaseJSON("a", map[string]any{"evidence": map[string]any{"type": "artifact", "artifacts": []string{"a.md"}}}),
			phaseJSON("b", map[string]any{"evidence": map[string]any{"type": "receipt", "receipts": []string{"email_sent"}}}),
			phaseJSON("c", map[string]any{"evidence": map[string]any{"type": "hybrid", "artifacts": []string{"c.md"}, "receipts": []string{"email_sent"}}}),
			phaseJSON("d", map[string]any{"evidence": map[string]any{"type": "programmatic", "command": "go test ./..."}}),
			phaseJSON("e", nil))},
		{name: "artifact paths inside the workspace", input: planJSON(t, phaseJSON("a", map[string]any{"evidence": map[string]any{"type": "artifact",
			"artifacts": []string{"./a.md", "out/b.md", "out/../c.md", "..d.md", ".hidden/e.md"}}}))},
		{name: "slug characters", input: planJSON(t, phaseJSON("0-step_two", nil), phaseJSON(strings.Repeat("x", 64), nil))},
		{name: "max_attempts bounds", input: planJSON(t, phaseJSON("a", map[string]any{"max_attempts": 1}), phaseJSON("b", map[string]any{"max_attempts": 20}))},
		{name: "ralph loop", input: planJSON(t, phaseJSON("a", map[string]any{"until": "ALL TESTS PASS", "max_iterations": 5}))},
		{name: "until without max_iterations", input: planJSON(t, phaseJSON("a", map[string]any{"until": "DONE"}))},
		{name: "dependency on a later phase", input: planJSON(t, phaseJSON("a", map[string]any{"depends_on": []string{"b"}}), phaseJSON("b", nil))},
		{name: "diamond", input: planJSON(t,
			phaseJSON("a", nil),
			phaseJSON("b", map[string]any{"depends_on": []string{"a"}}),
			phaseJSON("c", map[string]any{"depends_on": []string{"a"}}),
			phaseJSON("d", map[string]any{"depends_on": []string{"b", "c"}}))},
		{name: "explicit version and nulls", input: `{"version":1,"objective":"x","phases":[{"id":"a","title":null,"instructions":"i","depends_on":null,"evidence":{"type":"none","artifacts":null}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Parse([]byte(tt.input)); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`{"objective":"Produce a market report","phases":[
		{"id":"gather","instructions":"find sources","evidence":{"type":"none"}},
		{"id":"write","title":"Write it","instructions":"write","depends_on":["gather"],"max_attempts":5,
		 "evidence":{"type":"artifact","artifacts":["report.md"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Plan{
		Version:   1,
		Objective: "Produce a market report",
		Phases: []Phase{
			{ID: "gather", Title: "gather", Instructions: "find sources", DependsOn: []string{}, MaxAttempts: 3,
				Evidence: Evidence{Type: "none", Artifacts: []string{}, Receipts: []string{}}},
			{ID: "write", Title: "Write it", Instructions: "write", DependsOn: []string{"gather"}, MaxAttempts: 5,
				Evidence: Evidence{Type: "artifact", Artifacts: []string{"report.md"}, Receipts: []string{}}},
		},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("plan =\n  %+v\nwant\n  %+v", p, want)
	}

	// Every mission.json field is written, and lists are [] rather than null.
	var m struct {
		Version int              `json:"version"`
		Phases  []map[string]any `json:"phases"`
	}
	if err := json.Unmarshal(p.JSON(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Version != 1 {
		t.Errorf("version = %d", m.Version)
	}
	ph := m.Phases[0]
	for _, k := range []string{"id", "title", "instructions", "depends_on", "evidence", "max_attempts", "until", "max_iterations"} {
		if _, ok := ph[k]; !ok {
			t.Errorf("phase JSON lacks %q: %v", k, ph)
		}
	}
	if got, _ := json.Marshal(ph["depends_on"]); string(got) != "[]" {
		t.Errorf("depends_on = %s", got)
	}
	if got, _ := json.Marshal(ph["evidence"]); string(got) != `{"artifacts":[],"command":"","receipts":[],"type":"none"}` {
		t.Errorf("evidence = %s", got)
	}
}

// Validate fills defaults on a plan built in Go, as the planner tool does.
func TestValidateFillsDefaults(t *testing.T) {
	t.Parallel()
	p := &Plan{Objective: "x", Phases: []Phase{{ID: "a", Instructions: "i", Evidence: Evidence{Type: EvidenceNone}}}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	ph := p.Phases[0]
	if p.Version != 1 || ph.Title != "a" || ph.MaxAttempts != DefaultMaxAttempts ||
		ph.DependsOn == nil || ph.Evidence.Artifacts == nil || ph.Evidence.Receipts == nil {
		t.Errorf("plan after Validate = %+v", p)
	}
	if strings.Contains(string(p.JSON()), "null") {
		t.Errorf("JSON has nulls:\n%s", p.JSON())
	}
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(planJSON(t,
		phaseJSON("gather", map[string]any{"title": "Gather sources", "evidence": map[string]any{"type": "artifact", "artifacts": []string{"sources.md"}}}),
		phaseJSON("check", map[string]any{"depends_on": []string{"gather"}, "until": "OK", "max_iterations": 3,
			"evidence": map[string]any{"type": "programmatic", "command": "grep -q http sources.md"}}),
		phaseJSON("send", map[string]any{"depends_on": []string{"gather", "check"}, "max_attempts": 1,
			"evidence": map[string]any{"type": "hybrid", "artifacts": []string{"mail.txt"}, "receipts": []string{"email_sent"}}}),
	)))
	if err != nil {
		t.Fatal(err)
	}
	data := p.JSON()
	if !strings.HasPrefix(string(data), "{\n  \"version\": 1,\n") || !strings.HasSuffix(string(data), "}\n") {
		t.Errorf("JSON is not indented mission.json:\n%s", data)
	}
	again, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(JSON()): %v\n%s", err, data)
	}
	if !reflect.DeepEqual(again, p) {
		t.Fatalf("round trip changed the plan:\n  %+v\n  %+v", p, again)
	}
	if string(again.JSON()) != string(data) {
		t.Errorf("JSON not stable:\n%s\n%s", data, again.JSON())
	}
}

func TestPhase(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(planJSON(t, phaseJSON("a", nil), phaseJSON("b", map[string]any{"title": "Bee"}))))
	if err != nil {
		t.Fatal(err)
	}
	if ph, ok := p.Phase("b"); !ok || ph.Title != "Bee" {
		t.Errorf("Phase(b) = %+v, %v", ph, ok)
	}
	if _, ok := p.Phase("z"); ok {
		t.Error("Phase(z) found")
	}
}

func TestReady(t *testing.T) {
	t.Parallel()
	// report depends on both sources; "publish" is listed before what it
	// depends on, to show that plan order, not dependency order, decides.
	p, err := Parse([]byte(planJSON(t,
		phaseJSON("publish", map[string]any{"depends_on": []string{"report"}}),
		phaseJSON("web", nil),
		phaseJSON("papers", nil),
		phaseJSON("report", map[string]any{"depends_on": []string{"web", "papers"}}),
		phaseJSON("notes", nil),
	)))
	if err != nil {
		t.Fatal(err)
	}
	set := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	tests := []struct {
		name          string
		done, running map[string]bool
		want          []string
	}{
		{name: "start", want: []string{"web", "papers", "notes"}},
		{name: "nil maps are empty", done: nil, running: nil, want: []string{"web", "papers", "notes"}},
		{name: "running is not ready again", running: set("web"), want: []string{"papers", "notes"}},
		{name: "one dependency of two done", done: set("web"), want: []string{"papers", "notes"}},
		{name: "a running dependency is not done", done: set("web"), running: set("papers"), want: []string{"notes"}},
		{name: "all dependencies done", done: set("web", "papers"), want: []string{"report", "notes"}},
		{name: "chain", done: set("web", "papers", "report"), running: set("notes"), want: []string{"publish"}},
		{name: "everything done", done: set("web", "papers", "report", "notes", "publish"), want: nil},
		{name: "everything running or done", done: set("web", "papers"), running: set("report", "notes"), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, ph := range p.Ready(tt.done, tt.running) {
				got = append(got, ph.ID)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Ready = %q, want %q", got, tt.want)
			}
		})
	}
}

// A plan followed by anything, stray brackets included, is refused: a
// mission.json cut or pasted twice must not half-parse.
func TestParseRefusesTrailingData(t *testing.T) {
	t.Parallel()
	ok := `{"objective":"o","phases":[{"id":"a","instructions":"x","evidence":{"type":"none"}}]}`
	for _, tail := range []string{"]", "}}}", " {}", " x"} {
		if _, err := Parse([]byte(ok + tail)); err == nil || !strings.Contains(err.Error(), "trailing data") {
			t.Errorf("plan followed by %q: %v, want trailing data refused", tail, err)
		}
	}
	if _, err := Parse([]byte(ok + "\n")); err != nil {
		t.Errorf("a trailing newline: %v", err)
	}
}
