package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// People in the loop from the CLI (docs/PROTOCOL.md#waits): a run that a
// rule makes wait parks (exit 6) without running the call, is listed by
// agent waiting, and goes on once answered, from this or another process.

func touchTurn(file string) llmtest.Turn {
	args, _ := json.Marshal(map[string]string{"command": "touch " + file})
	return llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "bash", Arguments: args}}}
}

// parkedRun runs prompt with --json --ask rule and expects it to park.
func parkedRun(t *testing.T, e *e2etest.Env, rule, prompt string) (runID string, w event.RunWaitingData) {
	t.Helper()
	res := e.Run("run", "--json", "--ask", rule, prompt)
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6 (waiting); stderr: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	last := evs[len(evs)-1]
	if last.Type != event.RunWaiting || last.Decode(&w) != nil {
		t.Fatalf("last event %s, want run.waiting", last.Type)
	}
	if len(e2etest.OfType(evs, event.ToolStarted)) != 0 {
		t.Fatal("the call started before anyone approved it")
	}
	if !strings.Contains(res.Stderr, "agent approve "+last.RunID) {
		t.Errorf("stderr does not say how to answer: %q", res.Stderr)
	}
	return last.RunID, w
}

func TestApproveThenResume(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, touchTurn("pushed"), llmtest.Turn{Text: "pushed it"})
	runID, w := parkedRun(t, e, "bash(touch *)", "push")
	if w.Kind != event.WaitApproval || w.Rule != "bash(touch *)" || w.Tool != "bash" {
		t.Errorf("run.waiting = %+v", w)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "pushed")); err == nil {
		t.Fatal("the call ran unapproved")
	}

	inbox := e.Run("waiting", "--json")
	if inbox.Code != 0 || !strings.Contains(inbox.Stdout, runID) || !strings.Contains(inbox.Stdout, `"kind":"approval"`) {
		t.Fatalf("agent waiting = %d %q", inbox.Code, inbox.Stdout)
	}
	if show := e.Run("runs", "show", runID); !strings.Contains(show.Stdout, "waiting   for approval: bash touch pushed (rule bash(touch *)) until "+w.Until) {
		t.Errorf("runs show does not say what the run waits for, until when:\n%s", show.Stdout)
	}
	if list := e.Run("runs", "list"); !strings.Contains(list.Stdout, "waiting") {
		t.Errorf("runs list does not say the run waits:\n%s", list.Stdout)
	}

	res := e.Run("approve", runID[:8], "--resume", "--json")
	if res.Code != 0 {
		t.Fatalf("approve --resume: exit %d; stderr: %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "pushed")); err != nil {
		t.Fatal("the approved call did not run")
	}
	if again := e.Run("deny", runID); again.Code != 4 || !strings.Contains(again.Stderr, "already answered (allowed") {
		t.Errorf("a second answer: exit %d %q; want 4 naming the first", again.Code, again.Stderr)
	}
	if inbox := e.Run("waiting"); !strings.Contains(inbox.Stdout, "no run is waiting") {
		t.Errorf("agent waiting after the answer: %q", inbox.Stdout)
	}
}

// A denied call never runs; the model is told who denied it and why.
func TestDenyTellsTheModel(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, touchTurn("pushed"), llmtest.Turn{Text: "ok, not pushing"})
	runID, _ := parkedRun(t, e, "bash", "push")
	if res := e.Run("deny", runID, "--reason", "not on a Friday"); res.Code != 0 {
		t.Fatalf("deny: exit %d %s", res.Code, res.Stderr)
	}
	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "pushed")); err == nil {
		t.Fatal("the denied call ran")
	}
	reqs := e.Srv.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "denied (cli") || !strings.Contains(last, "not on a Friday") {
		t.Errorf("the model was not told who denied the call and why: %s", last)
	}
}

// A question parks the run; the answer is the tool's result.
func TestAnswerAQuestion(t *testing.T) {
	t.Parallel()
	ask, _ := json.Marshal(map[string]any{"question": "Which branch?", "options": []string{"main", "dev"}})
	e := e2etest.New(t, llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "ask_human", Arguments: ask}}}, llmtest.Turn{Text: "dev it is"})
	res := e.Run("run", "--json", "--ask-human", "deploy")
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6; stderr: %s", res.Code, res.Stderr)
	}
	runID := e2etest.DecodeRunID(t, res.Stdout)
	if bad := e.Run("approve", runID); bad.Code != 2 || !strings.Contains(bad.Stderr, "question") {
		t.Errorf("approve of a question: exit %d %q; want 2 saying it is a question", bad.Code, bad.Stderr)
	}
	if res := e.Run("answer", runID, "dev", "--resume", "--json"); res.Code != 0 {
		t.Fatalf("answer --resume: exit %d %s", res.Code, res.Stderr)
	}
	reqs := e.Srv.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "Answer (") || !strings.Contains(last, ": dev") {
		t.Errorf("the model did not get the answer: %s", last)
	}
}

// Inline on a terminal: the run asks and goes on with the answer; an
// answer from another process while it asks wins the same way.
func TestApproveInlineOnATerminal(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, touchTurn("one"), touchTurn("two"), llmtest.Turn{Text: "both done"})
	capture, keys := tmuxSession(t, shellCommand(e, "run", "--ask", "bash", "touch two files"))
	waitScreen(t, "the approval prompt", capture, func(s string) bool { return strings.Contains(s, "Allow bash") })
	keys("y", "Enter")
	screen := waitScreen(t, "the second approval prompt", capture, func(s string) bool { return strings.Count(s, "Allow bash") == 2 })
	if !strings.Contains(screen, "allowed (terminal") {
		t.Errorf("the screen does not say the first call was allowed at the terminal:\n%s", screen)
	}
	// Another process answers the second while the terminal asks.
	db := e.OpenStore(t)
	defer db.Close()
	runs, err := db.ListRuns(t.Context(), 1)
	if err != nil || len(runs) != 1 {
		t.Fatal(runs, err)
	}
	if res := e.Run("approve", runs[0].ID); res.Code != 0 {
		t.Fatalf("approve from a second process: exit %d %s", res.Code, res.Stderr)
	}
	screen = waitScreen(t, "the run's end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(screen, "EXIT=0") || !strings.Contains(screen, "allowed (cli") {
		t.Errorf("the run did not go on with the other process's answer:\n%s", screen)
	}
	for _, f := range []string{"one", "two"} {
		if _, err := os.Stat(filepath.Join(e.Workspace, f)); err != nil {
			t.Errorf("%s was not created", f)
		}
	}
}

// A gateway's run that parks: the --gateway client without a terminal
// stops with exit 6 and says how to answer; an answer from another
// process wakes the run in the gateway, which completes it.
func TestGatewayClientParks(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, touchTurn("pushed"), llmtest.Turn{Text: "pushed it"})
	g := e.StartGateway()
	res, _ := e.RunWith(e.GatewayEnv(g.Addr), "run", "--gateway", "ws://"+g.Addr, "--json", "--ask", "bash", "push")
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6; stderr: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	runID := evs[0].RunID
	if last := evs[len(evs)-1]; last.Type != event.RunWaiting || !strings.Contains(res.Stderr, "agent approve") {
		t.Fatalf("last event %s, stderr %q; want run.waiting and how to answer", last.Type, res.Stderr)
	}
	approve := e.Run("approve", runID)
	if approve.Code != 0 || !strings.Contains(approve.Stderr, "continues run") {
		t.Fatalf("approve: exit %d %q", approve.Code, approve.Stderr)
	}
	db := e.OpenStore(t)
	defer db.Close()
	e2etest.WaitFor(t, "the gateway to complete the run", func() bool {
		r, err := db.GetRun(t.Context(), runID)
		return err == nil && r.Status == event.StatusCompleted
	})
	if _, err := os.Stat(filepath.Join(e.Workspace, "pushed")); err != nil {
		t.Error("the approved call did not run")
	}
}

// A harness on a terminal asks too, as agent run does: the planner's
// question and a phase's approval are asked inline under a board that
// holds still meanwhile, and the run goes on without parking.
func TestHarnessAsksInlineOnATerminal(t *testing.T) {
	t.Parallel()
	ask, _ := json.Marshal(map[string]any{"question": "Which file?", "options": []string{"b.txt", "c.txt"}})
	planArgs := json.RawMessage(`{"objective":"One file","phases":[
		{"id":"touch","title":"Touch the file","instructions":"Touch it.","evidence":{"type":"artifact","artifacts":["b.txt"]}}]}`)
	turns := []llmtest.Turn{
		{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "ask_human", Arguments: ask}}},
		{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}},
	}
	turns = append(turns, e2etest.ForPhase("touch", e2etest.BashTurn("echo b > b.txt"), llmtest.Turn{Text: "b.txt written."})...)
	e := e2etest.NewHarness(t, turns...)
	capture, keys := tmuxSession(t, shellCommand(e, "harness", "--yes", "--ask", "bash", "touch the file I name"))
	waitScreen(t, "the planner's question", capture, func(s string) bool { return strings.Contains(s, "? Which file?") })
	keys("b.txt", "Enter")
	s := waitScreen(t, "the phase's approval prompt", capture, func(s string) bool { return strings.Contains(s, "Allow bash") })
	time.Sleep(time.Second) // the board would draw at least four times meanwhile
	if again := capture(); again != s {
		t.Errorf("the screen changed under the approval prompt:\n%s\nthen:\n%s", s, again)
	}
	keys("y", "Enter")
	s = waitScreen(t, "the end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(s, "EXIT=0") || !strings.Contains(s, "answered (terminal") || !strings.Contains(s, "allowed (terminal") {
		t.Errorf("final screen:\n%s", s)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "b.txt")); err != nil {
		t.Error("b.txt was not created")
	}
	if got := e.Srv.Requests()[1].LastMessage().Content; !strings.Contains(got, "Answer (") || !strings.Contains(got, ": b.txt") {
		t.Errorf("the planner was told %q, not the answer", got)
	}
}
