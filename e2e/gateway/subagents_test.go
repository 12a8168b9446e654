package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/supervisor"
)

// TestGatewaySubagentWaitsForApproval: a gateway session's run delegates
// with the task tool; its sub-run's bash call needs an approval (the
// run's --ask rules are the sub-run's too). The sub-run parks and so does
// its parent: the session's clients get the parent's run.waiting for the
// sub-run's call, and nothing has run. wait.answer on the parent allows
// it: the gateway wakes the parent, whose task call continues the same
// sub-run where it stopped; the call runs once, the parent completes,
// and the sub-run's events are in the session's stream with subagent set.
func TestGatewaySubagentWaitsForApproval(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: "PARENT-MARK", ToolCalls: []llmtest.Call{e2etest.ToolCall("task",
			jsonString(map[string]string{"description": "touch a file", "prompt": "SUB-MARK: touch the file approved"}))}},
		llmtest.Turn{When: "SUB-MARK", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", jsonString(map[string]string{"command": "touch approved"}))}},
		llmtest.Turn{When: "SUB-MARK", Text: "Touched it."},
		llmtest.Turn{When: "PARENT-MARK", Text: "The subagent touched it."},
	)
	srv, db := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	run, _ := startAsking(t, c, "PARENT-MARK: have a subagent touch a file", api.RunOptions{Ask: []string{"bash(touch *)"}})
	waiting, w := e2etest.GwWaiting(t, c, run.RunID, 0)
	if w.Kind != event.WaitApproval || w.Tool != "bash" {
		t.Fatalf("run.waiting = %+v, want the sub-run's approval of bash", w)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "approved")); err == nil {
		t.Fatal("the call ran before anyone approved it")
	}
	subs, err := db.SubRuns(t.Context(), run.RunID)
	if err != nil || len(subs) != 1 || subs[0].Status != event.StatusWaiting {
		t.Fatalf("sub-runs = %+v, %v; want one, waiting", subs, err)
	}

	info, code := e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: run.RunID, WaitID: w.WaitID, Decision: supervisor.DecideAllow})
	if code != "" || info.Resolution == nil {
		t.Fatalf("wait.answer: %s %+v", code, info)
	}
	evs := e2etest.GwWait(t, c, run.RunID)
	end := e2etest.LastFrame(evs)
	if end.Event != event.RunCompleted || e2etest.FinishedFrame(t, end).Result != "The subagent touched it." {
		t.Fatalf("after the answer the run ended %s %s", end.Event, end.Data)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "approved")); err != nil {
		t.Error("the approved call did not run")
	}
	again, err := db.SubRuns(t.Context(), run.RunID)
	if err != nil || len(again) != 1 || again[0].ID != subs[0].ID || again[0].Status != event.StatusCompleted {
		t.Errorf("sub-runs after = %+v, %v; want the same one, completed", again, err)
	}
	ran := 0
	for _, f := range after(evs, waiting.Seq) {
		if f.Subagent == subs[0].ID && f.Event == event.ToolCompleted {
			ran++
		}
	}
	if ran != 1 {
		t.Errorf("the session's stream has %d completed tool calls of the sub-run after the answer, want 1", ran)
	}
}
