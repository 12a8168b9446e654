package harness

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// A harness phase's child may delegate with the task tool: its sub-run is
// driven by the harness, its events are in the harness's stream under the
// phase with subagent set, and the phase gets the answer.
func TestHarnessPhaseUsesASubagent(t *testing.T) {
	t.Parallel()
	const sub = "SUB-MARK"
	task, _ := json.Marshal(map[string]string{"description": "look it up", "prompt": sub + ": find the answer"})
	turns := e2etest.ForPhase("gather",
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "task", Arguments: task}}},
		e2etest.WriteTurn("notes.md", "the answer is 42\n"),
		llmtest.Turn{Text: "notes.md has the answer."},
	)
	turns = append(turns, llmtest.Turn{When: sub, Text: "The answer is 42."})
	e := e2etest.NewHarness(t, turns...)
	planPath := e.WritePlan(t, `{"objective":"Find the answer","phases":[
		{"id":"gather","instructions":"Find the answer and write notes.md.","evidence":{"type":"artifact","artifacts":["notes.md"]}}]}`)
	res := e.Run("harness", "--json", "--plan-file", planPath)
	if res.Code != 0 {
		t.Fatalf("harness exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" {
		t.Fatalf("final = %+v", fin)
	}
	var subID string
	for _, ev := range evs {
		if ev.Subagent != "" && ev.Type == event.MessageCompleted {
			if ev.PhaseID != "gather" || ev.Attempt != 1 {
				t.Errorf("a subagent's event is shown under phase %q attempt %d, want gather 1", ev.PhaseID, ev.Attempt)
			}
			subID = ev.Subagent
		}
	}
	if subID == "" {
		t.Fatalf("no subagent event in the harness's stream:\n%s", res.Stdout)
	}
	answered := false
	for _, r := range e.Srv.Requests() {
		msgs := r.Messages()
		if len(msgs) > 0 && strings.Contains(msgs[len(msgs)-1].Content, "The answer is 42.") {
			answered = true
		}
		if strings.Contains(msgs[1].Content, sub) && slices.Contains(r.ToolNames(), "task") {
			t.Errorf("the subagent was offered the task tool: %v", r.ToolNames())
		}
	}
	if !answered {
		t.Error("the phase never got the subagent's answer")
	}
	show := e.Run("runs", "show", subID)
	if !strings.Contains(show.Stdout, "status    completed") || !strings.Contains(show.Stdout, "look it up") {
		t.Errorf("runs show of the sub-run:\n%s", show.Stdout)
	}
}
