package cluster

import (
	"context"
	"encoding/json"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
)

// TestClusterSubagents: on workers, a run's task call and a harness
// phase's (its attempt run by whichever worker claims it) each get their
// sub-run, driven where the caller is, its events in the session's
// stream with subagent set, the answer back to the caller.
func TestClusterSubagents(t *testing.T) {
	t.Parallel()
	task := func(mark string) llmtest.Call {
		args, _ := json.Marshal(map[string]string{"description": "look it up", "prompt": mark + ": find the answer"})
		return llmtest.Call{Name: "task", Arguments: args}
	}
	planArgs := json.RawMessage(`{"objective":"Find it","phases":[
		{"id":"gather","instructions":"Find the answer and write notes.md.","evidence":{"type":"artifact","artifacts":["notes.md"]}}]}`)
	e := e2etest.New(t,
		llmtest.Turn{When: "RUN-MARK", ToolCalls: []llmtest.Call{task("SUB-OF-RUN")}},
		llmtest.Turn{When: "SUB-OF-RUN", Text: "The run's answer is 42."},
		llmtest.Turn{When: "RUN-MARK", Text: "The run is done."},
		llmtest.Turn{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}},
		llmtest.Turn{When: e2etest.PhaseMarker("gather"), ToolCalls: []llmtest.Call{task("SUB-OF-PHASE")}},
		llmtest.Turn{When: "SUB-OF-PHASE", Text: "The phase's answer is 43."},
		llmtest.Turn{When: e2etest.PhaseMarker("gather"), ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: json.RawMessage(`{"path":"notes.md","content":"43\n"}`)}}},
		llmtest.Turn{When: e2etest.PhaseMarker("gather"), Text: "notes.md has it."},
	)
	dsn, c, sid := e.SmallCluster(t)
	db := openCluster(t, dsn)
	for _, start := range []api.RunStartParams{
		{SessionID: sid, Input: "RUN-MARK: delegate"},
		{SessionID: sid, Input: "find it", Options: api.RunOptions{Harness: true}},
	} {
		run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, start)
		evs := e2etest.GwWait(t, c, run.RunID)
		if end := e2etest.LastFrame(evs); end.Event != event.RunCompleted {
			t.Fatalf("%q ended %s %s", start.Input, end.Event, end.Data)
		}
		subs, err := db.SubRuns(context.Background(), run.RunID)
		if err != nil || len(subs) != 1 || subs[0].Status != event.StatusCompleted {
			t.Fatalf("%q: sub-runs %+v, %v; want one, completed", start.Input, subs, err)
		}
		shown := false
		for _, f := range evs {
			shown = shown || f.Subagent == subs[0].ID && f.Event == event.MessageCompleted
		}
		if !shown {
			t.Errorf("%q: the sub-run's messages are not in the session's stream", start.Input)
		}
	}
	for _, r := range e.Srv.Requests() {
		if msgs := r.Messages(); len(msgs) > 0 && msgs[len(msgs)-1].Role == "tool" {
			if got := msgs[len(msgs)-1].Content; got != "The run's answer is 42." && got != "The phase's answer is 43." && got != "wrote 3 bytes to notes.md" {
				t.Errorf("a caller got %q", got)
			}
		}
	}
}
