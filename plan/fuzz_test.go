package plan_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"agent/plan"
)

// FuzzParse feeds arbitrary bytes to plan.Parse. Invariants:
//   - it never panics, and returns exactly one of a plan and an error;
//   - an error is a *plan.Error with a Field or a Msg, reading "invalid plan: …";
//   - an accepted plan validates again, unchanged (Validate is idempotent);
//   - its JSON() parses back to an equal plan, and that plan's JSON is the same.
//   - an accepted input is one JSON value, with nothing after it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"objective":"ship it","phases":[{"id":"gather","instructions":"read the docs","evidence":{"type":"none"}}]}`,
		`{"objective":"build","phases":[
			{"id":"a","title":"First","instructions":"do a","evidence":{"type":"artifact","artifacts":["out/a.txt"]},"max_attempts":5},
			{"id":"b","instructions":"do b","depends_on":["a"],"evidence":{"type":"receipt","receipts":["email"]}},
			{"id":"c_1","instructions":"do c","depends_on":["a","b"],"evidence":{"type":"hybrid","artifacts":["x"],"receipts":["y"]},"until":"DONE","max_iterations":4},
			{"id":"d-2","instructions":"test","depends_on":["c_1"],"evidence":{"type":"programmatic","command":"go test ./..."}}]}`,
		`{"objective":"cycle","phases":[{"id":"a","instructions":"x","depends_on":["b"],"evidence":{"type":"none"}},{"id":"b","instructions":"y","depends_on":["a"],"evidence":{"type":"none"}}]}`,
		`{"objective":"typo","phases":[{"id":"a","instructions":"x","evidence":{"type":"none"},"max_attempt":2}]}`,
		`{"objective":"types","phases":[{"id":"a","instructions":"x","evidence":{"type":"none"},"max_attempts":"3"}]}`,
		`{"objective":"self","phases":[{"id":"a","instructions":"x","depends_on":["a"],"evidence":{"type":"none"}}]}`,
		`{"version":2,"objective":"o","phases":[]}`,
		`{"objective":"o","phases":[{"id":"Bad ID","instructions":"x","evidence":{"type":"none"}}]} {"trailing":true}`,
		`{"objective":"o","phases":[{"id":"a","instructions":"x","evidence":{"type":"none"}}]}]`,
		`{"objective":"o","phases":[{"id":"a","instructions":"x","evidence":{"type":"none"}}]}}}`,
		`{"objective":"o","phases":[{"id":"a","instructions":"x","evidence":{"type":"bogus"}}]`,
		`[]`,
		``,
		"\xef\xbb\xbf{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := plan.Parse(data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned both a plan and an error: %v", err)
			}
			var pe *plan.Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse error is %T, not *plan.Error: %v", err, err)
			}
			if pe.Field == "" && pe.Msg == "" {
				t.Fatalf("plan.Error names neither a field nor a problem: %#v", pe)
			}
			if !strings.HasPrefix(err.Error(), "invalid plan: ") {
				t.Fatalf("error text %q", err.Error())
			}
			return
		}
		if p == nil {
			t.Fatal("Parse returned neither a plan nor an error")
		}
		if !json.Valid(data) {
			t.Fatalf("Parse accepted what is not one JSON value: %q", data)
		}
		before := p.JSON()
		if err := p.Validate(); err != nil {
			t.Fatalf("an accepted plan does not validate: %v", err)
		}
		if after := p.JSON(); string(after) != string(before) {
			t.Fatalf("Validate changed an accepted plan:\n%s\n%s", before, after)
		}
		q, err := plan.Parse(before)
		if err != nil {
			t.Fatalf("the JSON of an accepted plan does not parse: %v\n%s", err, before)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("JSON round trip changed the plan:\n got %#v\nwant %#v", q, p)
		}
		if again := q.JSON(); string(again) != string(before) {
			t.Fatalf("JSON is not stable:\n%s\n%s", before, again)
		}
		if len(p.Ready(map[string]bool{}, nil)) == 0 {
			t.Fatal("an accepted (acyclic) plan has no phase ready to start")
		}
	})
}
