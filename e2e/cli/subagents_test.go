package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

// Subagents (the task tool, docs/PROTOCOL.md#subagents). The fake model
// tells the parent's requests from each sub-run's by a marker in its
// prompt: each is its own conversation.

const (
	parentMark = "PARENT-MARK"
	subAMark   = "SUB-A-MARK"
	subBMark   = "SUB-B-MARK"
)

func taskCall(desc, prompt string) llmtest.Call {
	args, _ := json.Marshal(map[string]string{"description": desc, "prompt": prompt})
	return llmtest.Call{Name: "task", Arguments: args}
}

// twoTasks is the parent's first reply: two task calls at once.
func twoTasks() llmtest.Turn {
	return llmtest.Turn{When: parentMark, ToolCalls: []llmtest.Call{
		taskCall("count the files", subAMark+": append A to log.txt, then say what you did"),
		taskCall("email the team", subBMark+": email the team, then say what you did"),
	}}
}

func bashCall(when, command string) llmtest.Turn {
	args, _ := json.Marshal(map[string]string{"command": command})
	return llmtest.Turn{When: when, ToolCalls: []llmtest.Call{{Name: "bash", Arguments: args}}}
}

// requestsWith are the recorded requests whose messages contain mark.
func requestsWith(srv *llmtest.Server, mark string) []llmtest.RecordedRequest {
	var out []llmtest.RecordedRequest
	for _, r := range srv.Requests() {
		for _, m := range r.Messages() {
			if strings.Contains(m.Content, mark) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// subRuns are the sub-runs of parent in the store, in the order of its
// task calls (twoTasks).
func subRuns(t *testing.T, e *e2etest.Env, parent string) []store.Run {
	t.Helper()
	db := e.OpenStore(t)
	defer db.Close()
	subs, err := db.SubRuns(t.Context(), parent)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(subs, func(a, b store.Run) int { return strings.Compare(a.ParentCall, b.ParentCall) })
	return subs
}

// Two task calls of one reply run at once (each sub-run's first reply is
// held until the other's request has come), the parent gets both
// answers, the sub-runs have no task tool, their tool calls are in the
// parent's stream with subagent set, and runs show and runs list show
// the tree.
func TestSubagentsRunInParallel(t *testing.T) {
	t.Parallel()
	both := make(chan struct{})
	first := bashCall(subAMark, "echo A >> log.txt")
	first.Gate = both
	answerB := llmtest.Turn{When: subBMark, Text: "B: the team was told", Gate: both}
	e := e2etest.New(t,
		twoTasks(),
		first, answerB,
		llmtest.Turn{When: subAMark, Text: "A: appended one line"},
		llmtest.Turn{When: parentMark, Text: "Both subagents are done."},
	)
	// The replies wait until both sub-runs have asked (at most Patience,
	// after which the run goes on and the test fails): they run at once.
	var atOnce atomic.Bool
	go func() {
		defer close(both)
		for deadline := time.Now().Add(e2etest.Patience); time.Now().Before(deadline) && t.Context().Err() == nil; time.Sleep(10 * time.Millisecond) {
			if len(requestsWith(e.Srv, subAMark)) > 0 && len(requestsWith(e.Srv, subBMark)) > 0 {
				atOnce.Store(true)
				return
			}
		}
	}()
	res := e.Run("run", "--json", parentMark+": do two things at once")
	if res.Code != 0 {
		t.Fatalf("run: exit %d\n%s", res.Code, res.Stderr)
	}
	if !atOnce.Load() {
		t.Error("the two sub-runs did not run at once: one asked the model only after the other had waited its turn")
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	parent := evs[0].RunID

	last := requestsWith(e.Srv, parentMark)
	if len(last) != 2 {
		t.Fatalf("%d requests of the parent, want 2", len(last))
	}
	var results []string
	for _, m := range last[1].Messages() {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	if len(results) != 2 || results[0] != "A: appended one line" || results[1] != "B: the team was told" {
		t.Errorf("the parent's tool results = %q, want both answers in call order", results)
	}
	if names := last[0].ToolNames(); !slices.Contains(names, "task") {
		t.Errorf("the parent was offered %v, without task", names)
	}
	for _, mark := range []string{subAMark, subBMark} {
		for _, r := range requestsWith(e.Srv, mark) {
			if names := r.ToolNames(); slices.Contains(names, "task") || !slices.Contains(names, "bash") {
				t.Errorf("a subagent was offered %v: want its parent's tools without task", names)
			}
		}
	}

	subs := subRuns(t, e, parent)
	if len(subs) != 2 || subs[0].Status != "completed" || subs[1].Status != "completed" {
		t.Fatalf("sub-runs = %+v, want 2 completed", subs)
	}
	shown := false
	for _, ev := range evs {
		if ev.Subagent == subs[0].ID && ev.Type == event.ToolCompleted {
			var d event.ToolCompletedData
			shown = ev.Decode(&d) == nil && d.Name == "bash" && ev.RunID == parent
		}
	}
	if !shown {
		t.Errorf("the subagent's bash call is not in the parent's stream with subagent %s", subs[0].ID)
	}
	if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "log.txt")); n != 1 {
		t.Errorf("log.txt has %d lines, want 1", n)
	}

	show := e.Run("runs", "show", parent)
	for _, want := range []string{"subagents:", subs[0].ID[:8] + " completed", "count the files", subs[1].ID[:8] + " completed", "email the team"} {
		if !strings.Contains(show.Stdout, want) {
			t.Errorf("runs show lacks %q:\n%s", want, show.Stdout)
		}
	}
	if show := e.Run("runs", "show", subs[0].ID); !strings.Contains(show.Stdout, "parent    "+parent) {
		t.Errorf("runs show of a sub-run does not name its parent:\n%s", show.Stdout)
	}
	if list := e.Run("runs", "list"); strings.Count(list.Stdout, "subagent") != 2 {
		t.Errorf("runs list does not mark the 2 sub-runs:\n%s", list.Stdout)
	}
}

// --max-subagents 1 runs a reply's task calls one after another: the
// second sub-run starts once the first has ended.
func TestSubagentsOneAtATime(t *testing.T) {
	t.Parallel()
	slow := bashCall(subAMark, "echo A >> log.txt")
	slow.DelayMS = 300
	e := e2etest.New(t,
		twoTasks(),
		slow,
		llmtest.Turn{When: subAMark, Text: "A: appended one line"},
		llmtest.Turn{When: subBMark, Text: "B: the team was told"},
		llmtest.Turn{When: parentMark, Text: "Both subagents are done."},
	)
	res := e.Run("run", "--json", "--max-subagents", "1", parentMark+": do two things")
	if res.Code != 0 {
		t.Fatalf("run: exit %d\n%s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	subs := subRuns(t, e, evs[0].RunID)
	if len(subs) != 2 {
		t.Fatalf("%d sub-runs, want 2", len(subs))
	}
	lastOfA, firstOfB := -1, -1
	for i, ev := range evs {
		switch {
		case ev.Subagent == subs[0].ID:
			lastOfA = i
		case ev.Subagent == subs[1].ID && firstOfB < 0:
			firstOfB = i
		}
	}
	if firstOfB < lastOfA {
		t.Errorf("the second subagent's first event (#%d) came before the first's last (#%d): they ran at once", firstOfB, lastOfA)
	}
	if fin := e2etest.LastFinished(t, evs); fin.Result != "Both subagents are done." {
		t.Errorf("final = %+v", fin)
	}
}

// kill -9 of the parent while both sub-runs wait for their model, after
// each made its tool call (a bash line, an email): agent resume continues
// the same two sub-runs where they stopped. Each tool call happened once
// and the email was sent once.
func TestSubagentsSurviveKill9OfTheParent(t *testing.T) {
	t.Parallel()
	mail := e2etest.NewMailbox(t)
	held := make(chan struct{}) // the sub-runs' answers, until the parent is dead
	defer close(held)
	email, _ := json.Marshal(map[string]string{"to": "team@example.com", "subject": "Status", "body": "All green."})
	e := e2etest.New(t,
		twoTasks(),
		bashCall(subAMark, "echo A >> log.txt"),
		llmtest.Turn{When: subBMark, ToolCalls: []llmtest.Call{{Name: "send_email", Arguments: email}}},
		llmtest.Turn{When: subAMark, Text: "A: appended one line", Gate: held},
		llmtest.Turn{When: subBMark, Text: "B: the team was told", Gate: held},
		llmtest.Turn{When: subAMark, Text: "A: appended one line"},
		llmtest.Turn{When: subBMark, Text: "B: the team was told"},
		llmtest.Turn{When: parentMark, Text: "Both subagents are done."},
	)
	b := e.StartWith(func(env []string) []string { return e.WithMail(env, mail) }, "run", "--json", parentMark+": do two things")
	parent := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "both subagents to ask the model again after their tool calls", func() bool {
		return len(requestsWith(e.Srv, subAMark)) == 2 && len(requestsWith(e.Srv, subBMark)) == 2
	})
	if mail.Count() != 1 || e2etest.CountLines(t, filepath.Join(e.Workspace, "log.txt")) != 1 {
		t.Fatalf("before the kill: %d mails, want 1, and log.txt should have 1 line", mail.Count())
	}
	b.Kill9(t)

	res, _ := e.RunWith(e.WithMail(nil, mail), "resume", parent, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d\n%s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if fin := e2etest.LastFinished(t, evs); fin.Result != "Both subagents are done." {
		t.Errorf("final = %+v", fin)
	}
	if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "log.txt")); n != 1 {
		t.Errorf("log.txt has %d lines, want 1: the subagent's bash call ran again", n)
	}
	if n := mail.Count(); n != 1 {
		t.Errorf("the mailbox has %d messages, want 1: the subagent's email went out again", n)
	}
	subs := subRuns(t, e, parent)
	if len(subs) != 2 || subs[0].Status != "completed" || subs[1].Status != "completed" {
		t.Fatalf("sub-runs = %+v, want the same 2, completed", subs)
	}
	// Each sub-run asked the model 3 times: its tool call, the answer the
	// kill cut off, the answer after resume; its conversation went on.
	for _, mark := range []string{subAMark, subBMark} {
		reqs := requestsWith(e.Srv, mark)
		if len(reqs) != 3 || len(reqs[2].Messages()) != len(reqs[1].Messages()) {
			t.Errorf("%s: %d requests, want 3, the last the same conversation as the one cut off", mark, len(reqs))
		}
	}
}

// A sub-run's approval is its parent's: agent run --json parks the
// parent (exit 6) with the sub-run's wait, agent waiting lists it once,
// under the parent, and agent approve PARENT --resume lets the sub-run's
// call run once and the parent complete.
func TestSubagentApprovalParksTheParent(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: parentMark, ToolCalls: []llmtest.Call{taskCall("touch a file", subAMark+": touch the file approved")}},
		bashCall(subAMark, "echo A >> log.txt"),
		llmtest.Turn{When: subAMark, Text: "A: appended one line"},
		llmtest.Turn{When: parentMark, Text: "The subagent is done."},
	)
	res := e.Run("run", "--json", "--ask", "bash", parentMark+": have a subagent do it")
	if res.Code != 6 {
		t.Fatalf("run: exit %d, want 6 (waiting)\n%s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	parent := evs[0].RunID
	var w event.RunWaitingData
	if last := evs[len(evs)-1]; last.Type != event.RunWaiting || last.Subagent != "" || last.Decode(&w) != nil || w.Tool != "bash" {
		t.Fatalf("the stream ends with %s %s, want the parent's run.waiting for bash", last.Type, last.Data)
	}
	inbox := e.Run("waiting", "--json")
	if strings.Count(inbox.Stdout, w.WaitID) != 1 || !strings.Contains(inbox.Stdout, parent) {
		t.Errorf("agent waiting lists the wait %d times, want once, under the parent:\n%s", strings.Count(inbox.Stdout, w.WaitID), inbox.Stdout)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "log.txt")); err == nil {
		t.Fatal("the call ran before anyone approved it")
	}
	res = e.Run("approve", parent, "--resume")
	if res.Code != 0 || !strings.Contains(res.Stdout, "The subagent is done.") {
		t.Fatalf("approve --resume: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "log.txt")); n != 1 {
		t.Errorf("log.txt has %d lines, want 1", n)
	}
	if subs := subRuns(t, e, parent); len(subs) != 1 || subs[0].Status != "completed" {
		t.Errorf("sub-runs = %+v, want one, completed", subs)
	}
}

// Ctrl-C of the parent interrupts its sub-run too, resumably: the parent
// exits 130, the sub-run is interrupted, and agent resume continues the
// same sub-run after its finished tool call, which does not run again;
// agent resume of the sub-run itself is refused, naming its parent.
func TestSubagentInterruptedWithItsParent(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})
	defer close(held)
	e := e2etest.New(t,
		llmtest.Turn{When: parentMark, ToolCalls: []llmtest.Call{taskCall("append a line", subAMark+": append A")}},
		bashCall(subAMark, "echo A >> log.txt"),
		llmtest.Turn{When: subAMark, Text: "never seen", Gate: held},
		llmtest.Turn{When: subAMark, Text: "A: appended one line"},
		llmtest.Turn{When: parentMark, Text: "The subagent is done."},
	)
	b := e.Start("run", "--json", parentMark+": delegate")
	parent := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the subagent's second model request", func() bool { return len(requestsWith(e.Srv, subAMark)) == 2 })
	if err := b.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-b.Done
	if err := b.Cmd.Wait(); b.Cmd.ProcessState.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130", err)
	}
	subs := subRuns(t, e, parent)
	if len(subs) != 1 || subs[0].Status != event.StatusInterrupted {
		t.Fatalf("sub-runs = %+v, want one, interrupted", subs)
	}
	if res := e.Run("resume", subs[0].ID); res.Code != 4 || !strings.Contains(res.Stderr, "agent resume "+parent) {
		t.Errorf("resume of the sub-run: exit %d %q, want 4 naming its parent", res.Code, res.Stderr)
	}
	if show := e.Run("runs", "show", subs[0].ID); !strings.Contains(show.Stdout, "resume    agent resume "+parent[:8]) {
		t.Errorf("runs show of the interrupted sub-run does not say to resume its parent:\n%s", show.Stdout)
	}
	res := e.Run("resume", parent, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d\n%s", res.Code, res.Stderr)
	}
	if again := subRuns(t, e, parent); len(again) != 1 || again[0].ID != subs[0].ID || again[0].Status != event.StatusCompleted {
		t.Errorf("sub-runs after = %+v, want the same one, completed", again)
	}
	if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "log.txt")); n != 1 {
		t.Errorf("log.txt has %d lines, want 1", n)
	}
}

// Hooks see subagents as Claude Code's do: a PreToolUse hook matching
// Task gets the task call (and may deny it: no sub-run is made), and a
// sub-run's final answer fires SubagentStop where its parent's fires
// Stop.
func TestSubagentHooks(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: parentMark, ToolCalls: []llmtest.Call{taskCall("look it up", subAMark+": look")}},
		llmtest.Turn{When: subAMark, Text: "A: found it"},
		llmtest.Turn{When: parentMark, ToolCalls: []llmtest.Call{taskCall("denied one", subBMark+": never")}},
		llmtest.Turn{When: parentMark, Text: "Done."},
	)
	settings := e.WriteHooks(t, `{"hooks": {
  "PreToolUse": [{"matcher": "Task", "hooks": [{"type": "command", "command": "cat >> $DIR/pre.log; echo >> $DIR/pre.log; if grep -q 'denied one' $DIR/pre.log; then echo 'no more subagents' >&2; exit 2; fi"}]}],
  "SubagentStop": [{"hooks": [{"type": "command", "command": "echo SubagentStop >> $DIR/stops.log"}]}],
  "Stop": [{"hooks": [{"type": "command", "command": "echo Stop >> $DIR/stops.log"}]}]
}}`, nil)
	res := e.Run("run", "--json", "--settings", settings, parentMark+": delegate")
	if res.Code != 0 {
		t.Fatalf("run: exit %d\n%s", res.Code, res.Stderr)
	}
	dir := filepath.Dir(settings)
	pre, _ := os.ReadFile(filepath.Join(dir, "pre.log"))
	if n := strings.Count(string(pre), `"tool_name":"Task"`); n != 2 {
		t.Errorf("the PreToolUse hook saw %d Task calls, want 2:\n%s", n, pre)
	}
	stops, _ := os.ReadFile(filepath.Join(dir, "stops.log"))
	if string(stops) != "SubagentStop\nStop\n" {
		t.Errorf("stop hooks ran %q, want SubagentStop then Stop", stops)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	subs := subRuns(t, e, evs[0].RunID)
	if len(subs) != 1 {
		t.Errorf("%d sub-runs, want 1: the denied task call made none", len(subs))
	}
	if !strings.Contains(res.Stdout, "denied (PreToolUse hook): no more subagents") {
		t.Error("the denied task call's result does not say the hook denied it")
	}
}

// A parent's --output-schema is its own answer's: its subagent answers
// its model in plain text.
func TestSubagentOfARunWithAnOutputSchema(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: parentMark, ToolCalls: []llmtest.Call{taskCall("look it up", subAMark+": look")}},
		llmtest.Turn{When: subAMark, Text: "A: found it"},
		llmtest.Turn{When: parentMark, Text: `{"found": true}`},
	)
	schema := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","required":["found"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := e.Run("run", "--json", "--output-schema", schema, parentMark+": delegate")
	if res.Code != 0 {
		t.Fatalf("run: exit %d\n%s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	subs := subRuns(t, e, evs[0].RunID)
	if len(subs) != 1 || subs[0].Status != "completed" || subs[0].Result != "A: found it" {
		for _, r := range subs {
			t.Logf("sub-run %s: %s (%s) %q", r.ID, r.Status, r.Detail, r.Result)
		}
		t.Errorf("%d sub-runs, want one that completed with its text", len(subs))
	}
}
