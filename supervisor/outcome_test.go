package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/llm"
	"agent/orchestrator"
	"agent/plan"
	"agent/schema"
	"agent/store"
)

// Every way a run can end, as the loop, a child, a harness or a stop
// from outside says it, gives one terminal event, reason and exit code.
func TestEnding(t *testing.T) {
	t.Parallel()
	completed := &event.RunnerResultData{Status: event.StatusCompleted, Output: "done", Reason: event.ReasonCompleted, Turns: 2,
		Usage: event.Usage{PromptTokens: 10, CompletionTokens: 3}}
	maxTurns := &event.RunnerResultData{Status: event.StatusFailed, Output: "so far", Reason: event.ReasonMaxTurns, Detail: "stopped at the turn limit", Turns: 50}
	provider := &event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonProvider, Detail: "model provider: unauthorized (401)"}
	cancelled := &event.RunnerResultData{Status: event.StatusCancelled, Output: "half", Reason: event.ReasonInterrupted, Detail: "cancelled by the parent", Turns: 1}
	planned := &event.RunnerResultData{Status: event.StatusPlanned, Reason: event.ReasonPlanned, Detail: "planned: review mission.json"}
	tests := []struct {
		name   string
		out    Outcome
		typ    string
		status string
		reason string
		detail string
		exit   int
		result string
		turns  int
	}{
		{"completed", Outcome{Report: completed}, event.RunCompleted, event.StatusCompleted, event.ReasonCompleted, "", 0, "done", 2},
		{"completed even as a stop came", Outcome{Report: completed, Cause: Interrupt("ctrl-c")}, event.RunCompleted, event.StatusCompleted, event.ReasonCompleted, "", 0, "done", 2},
		{"max turns", Outcome{Report: maxTurns}, event.RunFailed, event.StatusFailed, event.ReasonMaxTurns, "stopped at the turn limit", 1, "so far", 50},
		{"provider in runner.result", Outcome{Report: provider}, event.RunFailed, event.StatusFailed, event.ReasonProvider, "model provider: unauthorized (401)", 3, "", 0},
		{"provider error in this process", Outcome{Err: fmt.Errorf("ask: %w", &llm.Error{Kind: llm.KindAuth, Status: 401})}, event.RunFailed, event.StatusFailed, event.ReasonProvider, "", 3, "", 0},
		{"interrupt", Outcome{Report: cancelled, Cause: Interrupt("interrupted by signal; resume to continue")}, event.RunInterrupted, event.StatusInterrupted, event.ReasonInterrupted, "interrupted by signal; resume to continue", 130, "half", 1},
		{"interrupt of a failing loop", Outcome{Report: maxTurns, Cause: Interrupt("i")}, event.RunInterrupted, event.StatusInterrupted, event.ReasonInterrupted, "i", 130, "so far", 50},
		{"interrupt before any result", Outcome{Err: errors.New("context canceled"), Cause: Interrupt("gateway stopped; resumable")}, event.RunInterrupted, event.StatusInterrupted, event.ReasonInterrupted, "gateway stopped; resumable", 130, "", 0},
		{"cancel", Outcome{Report: cancelled, Cause: Cancel("cancelled by a client")}, event.RunCancelled, event.StatusCancelled, event.ReasonCancelled, "cancelled by a client", 130, "half", 1},
		{"timeout", Outcome{Report: cancelled, Cause: Timeout(300 * time.Millisecond)}, event.RunFailed, event.StatusFailed, event.ReasonTimeout, "timed out after 300ms", 1, "half", 1},
		{"lease lost", Outcome{Cause: errLeaseLost}, event.RunInterrupted, event.StatusInterrupted, event.ReasonLeaseLost, "lost the run lease to another process", 4, "", 0},
		{"child crashed", Outcome{Err: &childError{reason: event.ReasonCrashed, detail: "runner killed (signal: killed) without a result"}}, event.RunFailed, event.StatusFailed, event.ReasonCrashed, "runner killed (signal: killed) without a result", 1, "", 0},
		{"reclaim fails a run", Outcome{Err: Crashed("the gateway died during this run")}, event.RunFailed, event.StatusFailed, event.ReasonCrashed, "the gateway died during this run", 1, "", 0},
		{"invalid plan", Outcome{Err: fmt.Errorf("mission.json: %w", &plan.Error{Field: "phases[0].id", Msg: "is required"})}, event.RunFailed, event.StatusFailed, event.ReasonInvalidPlan, "", 2, "", 0},
		{"planner failed", Outcome{Err: &orchestrator.PlanError{Reason: "no plan"}}, event.RunFailed, event.StatusFailed, event.ReasonPlanning, "planning failed: no plan", 1, "", 0},
		{"planner's provider failed", Outcome{Err: &orchestrator.PlanError{Reason: "401", Stop: event.ReasonProvider}}, event.RunFailed, event.StatusFailed, event.ReasonProvider, "planning failed: 401", 3, "", 0},
		{"planned", Outcome{Report: planned}, event.RunInterrupted, event.StatusPlanned, event.ReasonPlanned, "planned: review mission.json", 0, "", 0},
		{"store failure", Outcome{Err: errors.New("disk I/O error")}, event.RunFailed, event.StatusFailed, event.ReasonError, "disk I/O error", 1, "", 0},
		{"disk full", Outcome{Err: fmt.Errorf("emit tool.started: %w", &store.UnusableError{Path: "/h/agent.db", Problem: "the disk is full", Fix: "free some space on it"})},
			event.RunFailed, event.StatusFailed, event.ReasonEnvironment, "emit tool.started: cannot use the store /h/agent.db: the disk is full; free some space on it", 5, "", 0},
		{"a child cancelled by another hand", Outcome{Report: cancelled}, event.RunInterrupted, event.StatusInterrupted, event.ReasonInterrupted, "cancelled by the parent", 130, "half", 1},
		{"failed without a reason", Outcome{Report: &event.RunnerResultData{Status: event.StatusFailed}}, event.RunFailed, event.StatusFailed, event.ReasonError, "error", 1, "", 0},
		{"nothing said", Outcome{}, event.RunFailed, event.StatusFailed, event.ReasonError, "the run ended without saying how", 1, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			typ, fin := Ending(tt.out)
			if typ != tt.typ || fin.Status != tt.status || fin.Reason != tt.reason || fin.ExitCode != tt.exit {
				t.Errorf("Ending = %s %+v, want %s status %s reason %s exit %d", typ, fin, tt.typ, tt.status, tt.reason, tt.exit)
			}
			if tt.detail != "" && fin.Detail != tt.detail {
				t.Errorf("detail %q, want %q", fin.Detail, tt.detail)
			}
			if fin.Reason != event.ReasonCompleted && fin.Detail == "" {
				t.Errorf("no detail for people: %+v", fin)
			}
			if fin.Result != tt.result || fin.Turns != tt.turns {
				t.Errorf("result %q turns %d, want %q %d", fin.Result, fin.Turns, tt.result, tt.turns)
			}
		})
	}
}

// The exit code is a function of the reason alone: the same reason gives
// the same code whichever front-end ran the run.
func TestExitCodeByReason(t *testing.T) {
	t.Parallel()
	want := map[string]int{
		event.ReasonCompleted: 0, event.ReasonPlanned: 0, event.ReasonMaxTurns: 1, event.ReasonMaxIterations: 1,
		event.ReasonToolLoop: 1, event.ReasonTimeout: 1, event.ReasonVerification: 1, event.ReasonCrashed: 1,
		event.ReasonError: 1, event.ReasonPlanning: 1, event.ReasonInvalidPlan: 2, event.ReasonInvalidOptions: 2, event.ReasonProvider: 3,
		event.ReasonLeaseLost: 4, event.ReasonEnvironment: 5, event.ReasonInterrupted: 130, event.ReasonCancelled: 130,
	}
	for reason, code := range want {
		if got := exitCode(reason); got != code {
			t.Errorf("exitCode(%s) = %d, want %d", reason, got, code)
		}
	}
}

// A completed run with an output schema ends with its answer as output,
// or, when the answer does not satisfy it (a child that says otherwise is
// not believed), failed with reason schema and exit 1.
func TestEndingOutputSchema(t *testing.T) {
	t.Parallel()
	s, err := schema.Parse([]byte(`{"type":"object","required":["ok"]}`))
	if err != nil {
		t.Fatal(err)
	}
	good := &event.RunnerResultData{Status: event.StatusCompleted, Output: `{"ok": true}`, Turns: 1}
	if typ, fin := Ending(Outcome{Report: good, Schema: s}); typ != event.RunCompleted || string(fin.Output) != `{"ok":true}` || fin.ExitCode != 0 {
		t.Errorf("a valid answer ends %s %+v", typ, fin)
	}
	bad := &event.RunnerResultData{Status: event.StatusCompleted, Output: `{}`, Turns: 3}
	typ, fin := Ending(Outcome{Report: bad, Schema: s})
	if typ != event.RunFailed || fin.Reason != event.ReasonSchema || fin.ExitCode != 1 || fin.Output != nil || !strings.Contains(fin.Detail, `missing properties: ["ok"]`) {
		t.Errorf("an invalid answer ends %s %+v", typ, fin)
	}
	if _, fin := Ending(Outcome{Report: good}); fin.Output != nil {
		t.Errorf("a run without a schema has output %s", fin.Output)
	}
}
