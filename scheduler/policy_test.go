package scheduler

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json string
		want Policy
	}{
		{``, DefaultPolicy()},
		{`{}`, DefaultPolicy()},
		{`{"overlap":"parallel","missed":"run_once_on_recovery","timeout":"90s","tools":["bash"],"retry":{"max_attempts":3}}`,
			Policy{Overlap: OverlapParallel, Missed: MissedRunOnceOnRecovery, Timeout: 90 * time.Second, Tools: []string{"bash"},
				Retry: Retry{MaxAttempts: 3, Base: DefaultRetryBase, Cap: DefaultRetryCap}}},
		{`{"timeout":600,"retry":{"base":"1s","cap":"5"}}`, // numbers are seconds
			Policy{Overlap: OverlapSkipIfRunning, Timeout: 10 * time.Minute, Retry: Retry{MaxAttempts: 1, Base: time.Second, Cap: 5 * time.Second}}},
	}
	for _, tt := range tests {
		got, err := ParsePolicy([]byte(tt.json))
		if err != nil {
			t.Errorf("ParsePolicy(%s): %v", tt.json, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePolicy(%s) = %+v, want %+v", tt.json, got, tt.want)
		}
	}

	p := tests[2].want
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"overlap":"parallel","missed":"run_once_on_recovery","retry":{"max_attempts":3,"base":"30s","cap":"10m0s"},"timeout":"1m30s","tools":["bash"]}`; string(data) != want {
		t.Errorf("Marshal = %s\nwant %s", data, want)
	}
	back, err := ParsePolicy(data)
	if err != nil || !reflect.DeepEqual(back, p) {
		t.Errorf("round trip = %+v, %v", back, err)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json, want string
	}{
		{`{"overlap":"always"}`, `invalid policy: overlap "always": want skip_if_running, queue_one or parallel`},
		{`{"overlap":""}`, `overlap ""`},
		{`{"missed":"later"}`, `missed "later"`},
		{`{"timeout":"0s"}`, "timeout must be positive, got 0s"},
		{`{"timeout":"-1m"}`, "timeout must be positive"},
		{`{"retry":{"max_attempts":0}}`, "max_attempts must be at least 1, got 0"},
		{`{"retry":{"base":"0s"}}`, "retry base must be positive"},
		{`{"retry":{"base":"1m","cap":"30s"}}`, "retry cap 30s is below base 1m0s"},
		{`{"tools":["bash","bash"]}`, "bash listed twice"},
		{`{"tools":[""]}`, "empty tool name"},
		{`{"timeout":"soon"}`, `duration "soon"`},
		{`{"timeout":true}`, "want a string"},
		{`[`, "invalid policy"},
	}
	for _, tt := range tests {
		_, err := ParsePolicy([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParsePolicy(%s): err = %v, want %q", tt.json, err, tt.want)
		}
	}
	// Decoding into a zero Policy, as into a JobSpec, fills in defaults.
	var spec JobSpec
	if err := json.Unmarshal([]byte(`{"name":"n","policy":{"overlap":"queue_one"}}`), &spec); err != nil {
		t.Fatal(err)
	}
	want := DefaultPolicy()
	want.Overlap = OverlapQueueOne
	if spec.Policy == nil || !reflect.DeepEqual(*spec.Policy, want) {
		t.Errorf("decoded JobSpec policy %+v, want %+v", spec.Policy, want)
	}
	if err := (Policy{}).Validate(); err == nil {
		t.Error("the zero Policy is valid; its timeout is mandatory")
	}
}

// A job's runs take the sandbox and budget options every run takes.
func TestPolicySandboxAndBudget(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"sandbox":"read-only","network":true,"max_tokens":5000,"max_cost":0.25}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Sandbox != "read-only" || !p.Network || p.MaxTokens != 5000 || p.MaxCost != 0.25 {
		t.Errorf("policy = %+v", p)
	}
	raw, _ := json.Marshal(p)
	var back Policy
	if err := json.Unmarshal(raw, &back); err != nil || back.Sandbox != p.Sandbox || back.MaxTokens != p.MaxTokens || back.MaxCost != p.MaxCost {
		t.Errorf("round trip: %s → %+v %v", raw, back, err)
	}
	for _, bad := range []string{`{"sandbox":"none"}`, `{"max_tokens":-1}`} {
		if p, err := ParsePolicy([]byte(bad)); err == nil {
			if err = p.Validate(); err == nil {
				t.Errorf("%s accepted", bad)
			}
		}
	}
}

// A job's runs take its approval rules, checked when the job is saved.
func TestPolicyAsk(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy([]byte(`{"ask":["bash(git push*)","effects"]}`))
	if err != nil || !reflect.DeepEqual(p.Ask, []string{"bash(git push*)", "effects"}) || p.Validate() != nil {
		t.Fatalf("policy = %+v, %v", p, err)
	}
	raw, _ := json.Marshal(p)
	if back, err := ParsePolicy(raw); err != nil || !reflect.DeepEqual(back, p) {
		t.Errorf("round trip: %s → %+v %v", raw, back, err)
	}
	bad, err := ParsePolicy([]byte(`{"ask":["bash(git push*"]}`))
	if err == nil {
		err = bad.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "invalid policy: ask") {
		t.Errorf("an unclosed rule: %v, want refused", err)
	}
}

// What a job change gives is checked without the job where it can be:
// a bad value at once, a value that depends on the job's others not.
func TestCheckChange(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	patch := func(given map[string]any) json.RawMessage { return PolicyPatch(given) }
	tests := []struct {
		name     string
		cron, tz *string
		patch    json.RawMessage
		want     string // "" for none
	}{
		{"nothing given", nil, nil, nil, ""},
		{"an unknown overlap", nil, nil, patch(map[string]any{"overlap": "bogus"}), `invalid policy: overlap "bogus": want skip_if_running, queue_one or parallel`},
		{"an unknown missed policy", nil, nil, patch(map[string]any{"missed": "later"}), `missed "later"`},
		{"no attempt", nil, nil, patch(map[string]any{"retry.max_attempts": 0}), "max_attempts must be at least 1"},
		{"a zero timeout", nil, nil, patch(map[string]any{"timeout": "0s"}), "timeout must be positive"},
		{"an unknown sandbox", nil, nil, patch(map[string]any{"sandbox": "none"}), "sandbox"},
		{"a bad schedule", str("every day"), nil, nil, `invalid cron expression "every day"`},
		{"an unknown zone", nil, str("Mars/Olympus"), nil, `unknown timezone "Mars/Olympus"`},
		{"a good change", str("*/5 * * * *"), str("Europe/Berlin"), patch(map[string]any{"overlap": "parallel", "timeout": "5m"}), ""},
		// The job may have a larger base or a smaller cap: the gateway checks.
		{"a cap alone", nil, nil, patch(map[string]any{"retry.cap": "10s"}), ""},
		{"a base alone", nil, nil, patch(map[string]any{"retry.base": "1h"}), ""},
		{"a cap below its base", nil, nil, patch(map[string]any{"retry.base": "1m", "retry.cap": "10s"}), "retry cap 10s is below base 1m0s"},
	}
	for _, tt := range tests {
		err := CheckChange(tt.cron, tt.tz, tt.patch)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// A job's output schema is kept, checked as a JSON Schema when the job
// is saved, and taken away by null (update --output-schema "").
func TestPolicyOutputSchema(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy([]byte(`{"output_schema":{"type":"object","required":["ok"]}}`))
	if err != nil || string(p.OutputSchema) != `{"type":"object","required":["ok"]}` {
		t.Fatalf("policy = %+v, %v", p, err)
	}
	raw, _ := json.Marshal(p)
	if back, err := ParsePolicy(raw); err != nil || !reflect.DeepEqual(back, p) {
		t.Errorf("round trip: %s → %+v %v", raw, back, err)
	}
	if err := json.Unmarshal([]byte(`{"output_schema":null}`), &p); err != nil || p.OutputSchema != nil {
		t.Errorf("null: %s %v, want no schema", p.OutputSchema, err)
	}
	if _, err := ParsePolicy([]byte(`{"output_schema":{"type":"objekt"}}`)); err == nil || !strings.Contains(err.Error(), "invalid policy: output_schema") {
		t.Errorf("a bad schema: %v, want refused", err)
	}
}
