package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/store"
)

// A harness phase can wait (docs/PROTOCOL.md#waits): the phases that can
// go on do, then the harness parks (exit 6); once answered, a resume
// continues the waiting phase where it stopped, as the same attempt.

// askFor makes every run of e ask before calls that rule names:
// config.toml's [approvals], which --ask adds to.
func askFor(t *testing.T, e *e2etest.Env, rule string) {
	t.Helper()
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte("[approvals]\nask = [\""+rule+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// approve allows the run's one open approval with agent approve, a
// process of its own, and returns what it printed.
func approve(t *testing.T, e *e2etest.Env, runID string, flags ...string) e2etest.Result {
	t.Helper()
	res := e.Run(append([]string{"approve", runID}, flags...)...)
	if res.Code != 0 {
		t.Fatalf("approve: exit %d; stderr: %s", res.Code, res.Stderr)
	}
	return res
}

// parked checks a drive that parked: exit 6, its last event the
// harness's run.waiting (no phase), for the open approval phase's first
// attempt asked.
func parked(t *testing.T, e *e2etest.Env, res e2etest.Result, phase string) []event.Event {
	t.Helper()
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6 (waiting); stderr: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	last := evs[len(evs)-1]
	var w event.RunWaitingData
	if last.Type != event.RunWaiting || last.PhaseID != "" || last.Decode(&w) != nil || w.Kind != event.WaitApproval {
		t.Fatalf("last event %s (phase %q) %s, want the harness's run.waiting", last.Type, last.PhaseID, last.Data)
	}
	db := e.OpenStore(t)
	defer db.Close()
	ws, err := db.Waits(context.Background(), last.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var asked *store.Wait
	for i := range ws {
		if ws[i].Waiting.WaitID == w.WaitID {
			asked = &ws[i]
		}
	}
	if asked == nil || asked.PhaseID != phase || asked.Attempt != 1 || asked.Resolution != nil {
		t.Fatalf("the harness waits for %+v, want phase %s's open wait", asked, phase)
	}
	if !strings.Contains(res.Stderr, "agent approve "+last.RunID) {
		t.Errorf("stderr does not say how to answer:\n%s", res.Stderr)
	}
	return evs
}

func deployPlan(t *testing.T, e *e2etest.Env, other string) string {
	return e.WritePlan(t, `{"objective":"Deploy and document","phases":[
		{"id":"deploy","instructions":"Deploy.","evidence":{"type":"programmatic","command":"test -e deployed"}},
		{"id":"`+other+`","instructions":"Write docs.md.","evidence":{"type":"artifact","artifacts":["docs.md"]}}]}`)
}

// TestHarnessPhaseWaitsForApproval: of two parallel phases, one waits for
// approval of its bash call (--ask); the other finishes, and the harness
// parks. agent approve --resume continues only the waiting phase, as the
// same attempt with its conversation, and the run completes verified.
func TestHarnessPhaseWaitsForApproval(t *testing.T) {
	t.Parallel()
	turns := e2etest.ForPhase("deploy", e2etest.BashTurn("touch deployed"), llmtest.Turn{Text: "deployed"})
	turns = append(turns, e2etest.ForPhase("docs", e2etest.WriteTurn("docs.md", "# Docs\n"), llmtest.Turn{Text: "docs.md written"})...)
	e := e2etest.NewHarness(t, turns...)

	evs := parked(t, e, e.Run("harness", "--json", "--ask", "bash(touch *)", "--parallel", "2", "--plan-file", deployPlan(t, e, "docs")), "deploy")
	runID := evs[0].RunID
	if n := len(e2etest.OfType(evs, event.ToolStarted)); n != 1 { // docs' write_file only
		t.Errorf("%d tool.started before the approval, want docs' write_file alone", n)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err == nil {
		t.Fatal("the bash call ran unapproved")
	}
	done := e2etest.OfType(evs, event.PhaseCompleted)
	if len(done) != 1 || done[0].PhaseID != "docs" || len(e2etest.OfType(evs, event.PhaseFailed)) != 0 {
		t.Errorf("phase ends %v, want docs completed and nothing failed", done)
	}
	db := e.OpenStore(t)
	defer db.Close()
	if r, err := db.GetRun(context.Background(), runID); err != nil || r.Status != event.StatusWaiting {
		t.Fatalf("run = %+v, %v; want waiting", r, err)
	}
	deployBefore, docsBefore := requestsFor(e.Srv, e2etest.PhaseMarker("deploy")), requestsFor(e.Srv, e2etest.PhaseMarker("docs"))

	// Its first line is the wait it answered; the run's events follow.
	res := approve(t, e, runID[:8], "--resume", "--json")
	answered, stream, _ := strings.Cut(res.Stdout, "\n")
	if !strings.Contains(answered, `"outcome":"allowed"`) {
		t.Errorf("approve printed %q, want the wait it allowed", answered)
	}
	evs = e2etest.DecodeEvents(t, stream)
	starts := e2etest.OfType(evs, event.PhaseStarted)
	if len(starts) != 1 || starts[0].PhaseID != "deploy" || starts[0].Attempt != 1 {
		t.Errorf("resume started %+v, want deploy's attempt 1 again, and nothing else", starts)
	}
	if fin := e2etest.LastFinished(t, evs); fin.Status != event.StatusCompleted {
		t.Fatalf("final = %+v", fin)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err != nil {
		t.Errorf("the approved call did not run: %v", err)
	}
	if n := requestsFor(e.Srv, e2etest.PhaseMarker("docs")); n != docsBefore {
		t.Errorf("docs was asked again: %d requests, %d before", n, docsBefore)
	}
	// One more request for deploy, which carries its conversation: the
	// call it asked about and its result.
	if n := requestsFor(e.Srv, e2etest.PhaseMarker("deploy")); n != deployBefore+1 {
		t.Errorf("deploy made %d requests, %d before the resume: want one more", n, deployBefore)
	}
	reqs := e.Srv.Requests()
	if msgs := reqs[len(reqs)-1].Messages(); len(msgs) != 4 || msgs[2].Role != "assistant" || msgs[3].Role != "tool" {
		t.Errorf("deploy went on with %+v, want its prompt, its call and the call's result", msgs)
	}
	attempts, err := db.Attempts(context.Background(), runID)
	if err != nil || len(attempts) != 2 {
		t.Fatalf("attempts %+v, %v; want one per phase", attempts, err)
	}
	for _, a := range attempts {
		if a.Attempt != 1 || a.Status != event.StatusPassed {
			t.Errorf("attempt %s/%d is %s, want 1 passed", a.PhaseID, a.Attempt, a.Status)
		}
	}
	if resolved := e2etest.OfType(evs, event.WaitResolved); len(resolved) != 1 || resolved[0].PhaseID != "deploy" {
		t.Errorf("wait.resolved = %v, want deploy's", resolved)
	}
}

// TestHarnessKill9WhileAPhaseWaits: the harness is kill -9'd while one
// phase waits for approval ([approvals] in config.toml) and the other
// runs. The resume interrupts the running one (a new attempt) and leaves
// the waiting one waiting: no child, no new attempt, and the harness
// parks again; once approved, the next resume continues it and the run
// completes.
func TestHarnessKill9WhileAPhaseWaits(t *testing.T) {
	t.Parallel()
	turns := e2etest.ForPhase("deploy", e2etest.BashTurn("touch deployed"), llmtest.Turn{Text: "deployed"})
	turns = append(turns, e2etest.ForPhase("slow",
		e2etest.BashTurn(e2etest.MarkThenSleep),
		e2etest.WriteTurn("docs.md", "# Docs\n"),
		llmtest.Turn{Text: "docs.md written after the restart"},
	)...)
	e := e2etest.NewHarness(t, turns...)
	askFor(t, e, "bash(touch *)")

	b := e.Start("harness", "--json", "--parallel", "2", "--plan-file", deployPlan(t, e, "slow"))
	runID := b.WaitEvent(t, event.RunStarted).RunID
	if w := b.WaitEvent(t, event.RunWaiting); w.PhaseID != "deploy" {
		t.Fatalf("run.waiting of %q, want deploy's", w.PhaseID)
	}
	_, runner := e2etest.WaitSandboxed(t, e.Workspace) // slow's bash
	b.Kill9(t)
	e2etest.WaitFor(t, "the orphaned runner to exit", func() bool { return !e2etest.Alive(runner) })
	deployBefore := requestsFor(e.Srv, e2etest.PhaseMarker("deploy"))

	evs := parked(t, e, e.Run("resume", runID, "--json"), "deploy")
	starts := e2etest.OfType(evs, event.PhaseStarted)
	if len(starts) != 1 || starts[0].PhaseID != "slow" || starts[0].Attempt != 2 {
		t.Errorf("resume started %+v, want slow's attempt 2 alone", starts)
	}
	if n := requestsFor(e.Srv, e2etest.PhaseMarker("deploy")); n != deployBefore {
		t.Errorf("the waiting phase asked the model again: %d requests, %d before", n, deployBefore)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err == nil {
		t.Fatal("the bash call ran unapproved")
	}

	approve(t, e, runID)
	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	evs = e2etest.DecodeEvents(t, res.Stdout)
	if starts := e2etest.OfType(evs, event.PhaseStarted); len(starts) != 1 || starts[0].PhaseID != "deploy" || starts[0].Attempt != 1 {
		t.Errorf("resume started %+v, want deploy's attempt 1 again", starts)
	}
	if fin := e2etest.LastFinished(t, evs); fin.Status != event.StatusCompleted {
		t.Fatalf("final = %+v", fin)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err != nil {
		t.Errorf("the approved call did not run: %v", err)
	}
}

// TestHarnessPlannerAsksFirst: with ask_human (run option ask_human, as
// --ask-human sets it), the planner interviews the person before it
// plans. Through a gateway, the harness parks on the planner's question;
// the answer (wait.answer) resumes it by itself, the same planning goes
// on with the answer in its conversation, and the run completes.
func TestHarnessPlannerAsksFirst(t *testing.T) {
	t.Parallel()
	ask, _ := json.Marshal(map[string]any{"question": "Which cloud?", "options": []string{"aws", "gcp"}})
	planArgs := json.RawMessage(`{"objective":"Deploy to the chosen cloud","phases":[
		{"id":"deploy","instructions":"Write cloud.txt.","evidence":{"type":"artifact","artifacts":["cloud.txt"]}}]}`)
	turns := []llmtest.Turn{
		{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "ask_human", Arguments: ask}}},
		{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}},
	}
	turns = append(turns, e2etest.ForPhase("deploy", e2etest.WriteTurn("cloud.txt", "gcp\n"), llmtest.Turn{Text: "cloud.txt says gcp"})...)
	e := e2etest.NewHarness(t, turns...)
	srv, db := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "deploy it",
		Options: api.RunOptions{Harness: true}}) // a gateway session offers ask_human

	ctx := context.Background()
	e2etest.WaitFor(t, "the harness to park on the planner's question", func() bool {
		r, err := db.GetRun(ctx, run.RunID)
		return err == nil && r.Status == event.StatusWaiting
	})
	ws, err := db.Waits(ctx, run.RunID)
	if err != nil || len(ws) != 1 || ws[0].PhaseID != event.PlannerPhaseID || ws[0].Waiting.Question != "Which cloud?" {
		t.Fatalf("waits = %+v, %v; want the planner's question", ws, err)
	}
	if offered := e.Srv.Requests()[0].ToolNames(); !slices.Contains(offered, "ask_human") {
		t.Errorf("the planner was offered %v, want ask_human among them", offered)
	}

	if _, code := e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: run.RunID, WaitID: ws[0].Waiting.WaitID, Decision: "answer", Text: "gcp"}); code != "" {
		t.Fatalf("wait.answer: %s", code)
	}
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, run.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("the harness ended %s %+v", end.Event, e2etest.FinishedFrame(t, end))
	}
	planned := e.Srv.Requests()[1].Messages()
	if last := planned[len(planned)-1]; last.Role != "tool" || !strings.Contains(last.Content, "gcp") {
		t.Errorf("the planning went on from %+v, want the answer last", last)
	}
	evs, err := db.ListEvents(ctx, run.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.PhaseID == event.PlannerPhaseID && ev.Attempt != 1 {
			t.Errorf("planner event %s of attempt %d, want one planning", ev.Type, ev.Attempt)
		}
	}
}
