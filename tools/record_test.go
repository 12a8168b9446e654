package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"agent/event"
)

func TestRecordTools(t *testing.T) {
	t.Parallel()
	ws, err := NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := NewSet(ws, Options{}, RecordTools()...)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool, args string
		wantType   string
		wantData   string
		wantErr    string
	}{
		{"record_learning", `{"text":"  tests live in ./e2e  "}`, event.LearningRecorded, `{"text":"tests live in ./e2e"}`, ""},
		{"record_learning", `{"text":" "}`, "", "", "text is empty"},
		{"record_failed_approach", `{"approach":"pip install","why":"no network"}`, event.ApproachFailed, `{"approach":"pip install","why":"no network"}`, ""},
		{"record_failed_approach", `{"approach":"x"}`, "", "", "why"},
	}
	for _, tt := range tests {
		res := set.Run(context.Background(), tt.tool, tt.args)
		if tt.wantErr != "" {
			if !res.IsError || !strings.Contains(res.Output, tt.wantErr) || len(res.Events) != 0 {
				t.Errorf("%s %s = %+v, want error %q and no event", tt.tool, tt.args, res, tt.wantErr)
			}
			continue
		}
		if res.IsError || len(res.Events) != 1 || res.Events[0].Type != tt.wantType || string(res.Events[0].Data) != tt.wantData {
			t.Errorf("%s %s = %+v", tt.tool, tt.args, res)
		}
	}
}

func TestSubmitPlan(t *testing.T) {
	t.Parallel()
	ws, err := NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sp := NewSubmitPlan()
	set, err := NewSet(ws, Options{Allow: []string{"read_file", SubmitPlanName}}, sp)
	if err != nil {
		t.Fatal(err)
	}
	valid := `{"objective":"ship","phases":[{"id":"a","instructions":"do a","evidence":{"type":"none"}}]}`
	cyclic := `{"objective":"ship","phases":[{"id":"a","instructions":"x","depends_on":["a"],"evidence":{"type":"none"}}]}`

	res := set.Run(context.Background(), SubmitPlanName, cyclic)
	if !res.IsError || res.Stop || !strings.Contains(res.Output, "phases[0].depends_on[0]") || !strings.Contains(res.Output, "2 of 3 submissions left") {
		t.Fatalf("first invalid plan = %+v, want a correctable error naming the field", res)
	}
	if sp.Plan() != nil {
		t.Fatal("invalid plan accepted")
	}
	res = set.Run(context.Background(), SubmitPlanName, valid)
	if res.IsError || !res.Stop || res.Output != "plan accepted: a" {
		t.Fatalf("valid plan = %+v", res)
	}
	p := sp.Plan()
	if p == nil || p.Phases[0].MaxAttempts != 3 {
		t.Fatalf("accepted plan = %+v, want defaults filled", p)
	}
	var round map[string]any
	if err := json.Unmarshal(p.JSON(), &round); err != nil {
		t.Fatal(err)
	}

	// Three invalid submissions end the planner's loop as failed.
	sp2 := NewSubmitPlan()
	set2, err := NewSet(ws, Options{}, sp2)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		res = set2.Run(context.Background(), SubmitPlanName, cyclic)
		if res.Stop != (i == 3) || !res.IsError || sp2.Rejected() != (i == 3) {
			t.Fatalf("invalid submission %d = %+v, rejected %v", i, res, sp2.Rejected())
		}
	}
	if !strings.Contains(res.Output, "submitted 3 invalid plans") {
		t.Errorf("final failure = %q", res.Output)
	}
	if sp.Rejected() {
		t.Error("a planner whose plan was accepted is said rejected")
	}
}
