package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/checkpoint"
	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
)

// The CLI as a gateway client: `agent run --gateway` against an
// in-process gateway whose children are real `agent runner` processes.

// transcript is what a run persisted, without ids and times.
type transcript struct {
	Messages []string
	Calls    []string
	Status   string
	Result   string
	Exit     int
}

func persisted(t *testing.T, e *e2etest.Env, runID string) transcript {
	t.Helper()
	res := e.Run("runs", "show", runID, "--json")
	var v e2etest.RunView
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatalf("runs show: %v\n%s", err, res.Stdout)
	}
	tr := transcript{Status: v.Status, Result: v.Result, Exit: v.ExitCode}
	for _, m := range v.Messages {
		s := m.Role + ": " + m.Content
		for _, c := range m.ToolCalls {
			s += " [" + c.Name + " " + c.Arguments + "]"
		}
		tr.Messages = append(tr.Messages, s)
	}
	for _, c := range v.ToolCalls {
		tr.Calls = append(tr.Calls, c.Name+" "+string(c.Args)+" "+c.Status)
	}
	return tr
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() && info.Name() == ".agent" {
			return filepath.SkipDir
		}
		if !info.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			files[rel] = string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestGatewayParity is the golden-transcript test: the same input and
// model replies, in single-process mode and through the gateway, give the
// same event types in the same order, the same persisted messages and
// tool calls, the same workspace files and the same exit code.
func TestGatewayParity(t *testing.T) {
	t.Parallel()
	turns := func() []llmtest.Turn {
		return []llmtest.Turn{
			{Text: "Writing it.", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"notes/hello.txt","content":"hi\n"}`)}},
			{ToolCalls: []llmtest.Call{e2etest.ToolCall("edit_file", `{"path":"notes/hello.txt","old_string":"hi","new_string":"hello"}`),
				e2etest.ToolCall("read_file", `{"path":"missing.txt"}`)}},
			{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"cat notes/hello.txt | wc -c"}`)}},
			{Text: "Done: notes/hello.txt says hello."},
		}
	}
	const prompt = "write a greeting"

	local := e2etest.New(t, turns()...)
	lres := local.Run("run", "--json", prompt)
	if lres.Code != 0 {
		t.Fatalf("local: exit %d %s", lres.Code, lres.Stderr)
	}
	levs := e2etest.DecodeEvents(t, lres.Stdout)

	remote := e2etest.New(t, turns()...)
	srv, _ := remote.InProcessGateway(nil)
	cmd := remote.Command("run", "--json", prompt)
	cmd.Env = append(cmd.Env, remote.GatewayEnv(srv.Addr())...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gateway run: %v", err)
	}
	revs := e2etest.DecodeEvents(t, string(out))

	if got, want := eventTypes(revs), eventTypes(levs); got != want {
		t.Errorf("event types differ:\ngateway: %s\nlocal:   %s", got, want)
	}
	if revs[0].SessionID == "" {
		t.Error("gateway events carry no session_id")
	}
	if got, want := persisted(t, remote, revs[0].RunID), persisted(t, local, levs[0].RunID); !reflect.DeepEqual(got, want) {
		t.Errorf("persisted transcripts differ:\ngateway: %+v\nlocal:   %+v", got, want)
	}
	if got, want := readTree(t, remote.Workspace), readTree(t, local.Workspace); !reflect.DeepEqual(got, want) {
		t.Errorf("workspaces differ:\ngateway: %v\nlocal:   %v", got, want)
	}
}

// TestGatewayRunCLI: exit codes match local mode, a --session run sees
// the session's earlier messages, and Ctrl-C cancels the gateway's run.
func TestGatewayRunCLI(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Noted: the code word is ORCHID."},
		llmtest.Turn{Text: "The code word was ORCHID."},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("list_files", `{}`)}}, // max turns 1: exit 1
		llmtest.Turn{Text: "thinking", Hang: true},
		llmtest.Turn{Text: "Done thinking."},
	)
	srv, _ := e.InProcessGateway(nil)
	env := func(cmdEnv []string) []string { return append(cmdEnv, e.GatewayEnv(srv.Addr())...) }
	run := func(args ...string) e2etest.Result {
		cmd := e.Command(args...)
		cmd.Env = env(cmd.Env)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return e2etest.Result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
	}

	first := run("run", "--json", "remember the code word ORCHID")
	if first.Code != 0 {
		t.Fatalf("first run: %d %s", first.Code, first.Stderr)
	}
	session := e2etest.DecodeEvents(t, first.Stdout)[0].SessionID
	second := run("run", "--session", session, "what was the code word?")
	if second.Code != 0 || !strings.Contains(second.Stdout, "The code word was ORCHID.") {
		t.Fatalf("second run: %d %q %s", second.Code, second.Stdout, second.Stderr)
	}
	msgs := e.Srv.Requests()[1].Messages()
	if len(msgs) != 4 || !strings.Contains(msgs[1].Content, "ORCHID") {
		t.Errorf("the second run did not see the session's first run: %+v", msgs)
	}

	limited := run("run", "--max-turns", "1", "loop")
	if limited.Code != 1 || !strings.Contains(limited.Stderr, "turn limit (--max-turns)") {
		t.Errorf("max turns through the gateway: exit %d %q, want 1 as locally", limited.Code, limited.Stderr)
	}

	// Ctrl-C interrupts the run resumably, exactly as it does locally.
	b := e.StartWith(env, "run", "--json", "think forever")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the model call", func() bool { return e.Srv.RequestCount() == 4 })
	if err := b.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-b.Done
	_ = b.Cmd.Wait()
	if code := b.Cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("Ctrl-C: exit %d, want 130; stderr: %s", code, b.Stderr.String())
	}
	if fin := e2etest.LastFinished(t, []event.Event{b.WaitEvent(t, event.RunInterrupted)}); fin.Reason != "interrupted" || fin.ExitCode != 130 {
		t.Errorf("Ctrl-C ended the run %+v, want interrupted, exit 130", fin)
	}
	// Resumed here, it would leave a hole in the session's stream: refused,
	// saying where it goes on.
	if local := e.Run("resume", runID, "--json"); local.Code != 4 || !strings.Contains(local.Stderr, "agent resume "+runID+" --gateway") {
		t.Errorf("a local resume of a gateway's run: exit %d %q; want 4 naming --gateway", local.Code, local.Stderr)
	}
	resumed := run("resume", runID, "--json")
	if resumed.Code != 0 || !strings.Contains(resumed.Stdout, `"result":"Done thinking."`) {
		t.Errorf("resume through the gateway after Ctrl-C: exit %d %s %s", resumed.Code, resumed.Stdout, resumed.Stderr)
	}

	// Bad input is refused like locally, before anything starts.
	if res := run("run", "--record", "x.jsonl", "hi"); res.Code != 2 {
		t.Errorf("--record with --gateway: exit %d, want 2", res.Code)
	}
	cmd := e.Command("run", "hi")
	cmd.Env = append(cmd.Env, "AGENT_GATEWAY=http://"+srv.Addr(), "AGENT_GATEWAY_TOKEN=wrong")
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("wrong token: exit %d, want 2", code)
	}
}

// TestAttach replays a session's events and follows new ones.
func TestAttach(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "first answer"}, llmtest.Turn{Text: "second answer", DelayMS: 300})
	srv, _ := e.InProcessGateway(nil)
	env := func(cmdEnv []string) []string { return append(cmdEnv, e.GatewayEnv(srv.Addr())...) }
	cmd := e.Command("run", "--json", "one")
	cmd.Env = env(cmd.Env)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	firstRun := e2etest.DecodeEvents(t, string(out))
	session := firstRun[0].SessionID

	a := e.StartWith(env, "attach", session, "--json", "--after-seq", "2")
	cmd = e.Command("run", "--session", session, "two")
	cmd.Env = env(cmd.Env)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	e2etest.WaitFor(t, "the second run's end through attach", func() bool {
		a.Mu.Lock()
		defer a.Mu.Unlock()
		got = append(got[:0], a.Events...)
		n := 0
		for _, ev := range got {
			if ev.Type == event.RunCompleted {
				n++
			}
		}
		return n == 2
	})
	_ = a.Cmd.Process.Signal(syscall.SIGINT)
	<-a.Done
	if got[0].Seq != 3 {
		t.Errorf("attach --after-seq 2 started at seq %d", got[0].Seq)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq != got[i-1].Seq+1 {
			t.Fatalf("gap or duplicate: seq %d after %d", got[i].Seq, got[i-1].Seq)
		}
	}
}

// TestSessionsCommand lists, shows and forks sessions from the store.
func TestSessionsCommand(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Paris."}, llmtest.Turn{Text: "You asked about France."})
	srv, _ := e.InProcessGateway(nil)
	cmd := e.Command("run", "--json", "capital of France?")
	cmd.Env = append(cmd.Env, e.GatewayEnv(srv.Addr())...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	session := e2etest.DecodeEvents(t, string(out))[0].SessionID

	list := e.Run("sessions", "list", "--json")
	if !strings.Contains(list.Stdout, `"id":"`+session+`"`) || !strings.Contains(list.Stdout, `"runs":1`) {
		t.Errorf("sessions list: %s", list.Stdout)
	}
	show := e.Run("sessions", "show", session[:8])
	if show.Code != 0 || !strings.Contains(show.Stdout, "capital of France?") || !strings.Contains(show.Stdout, "agent attach") {
		t.Errorf("sessions show: %d %s", show.Code, show.Stdout)
	}
	fork := e.Run("sessions", "fork", session, "--json")
	var v e2etest.SessionView
	if err := json.Unmarshal([]byte(fork.Stdout), &v); err != nil || v.ParentID != session {
		t.Fatalf("sessions fork: %v %s %s", err, fork.Stdout, fork.Stderr)
	}
	// A run in the fork sees the source's conversation.
	cmd = e.Command("run", "--session", v.ID, "what did I ask?")
	cmd.Env = append(cmd.Env, e.GatewayEnv(srv.Addr())...)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if msgs := e.Srv.Requests()[1].Messages(); len(msgs) != 4 || msgs[1].Content != "capital of France?" {
		t.Errorf("the forked session's run saw %+v", msgs)
	}
	if res := e.Run("sessions", "show", "nosuchsession"); res.Code != 2 {
		t.Errorf("unknown session: exit %d, want 2", res.Code)
	}
}

// TestGatewayCheckpointRewind: a gateway run's checkpoints are listed and
// rewound over the protocol; attached clients see rewind.completed.
func TestGatewayCheckpointRewind(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"keep.txt","content":"changed\n"}`),
			e2etest.ToolCall("write_file", `{"path":"new.txt","content":"new\n"}`)}},
		llmtest.Turn{Text: "Both written."},
	)
	if err := os.WriteFile(filepath.Join(e.Workspace, "keep.txt"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "write two files"})
	e2etest.GwWait(t, c, run.RunID)

	list := e2etest.GwCall[api.CheckpointList](t, c, api.MethodCheckpointList, api.CheckpointListParams{RunID: run.RunID})
	if len(list.Checkpoints) != 2 || list.Checkpoints[0].Path != "keep.txt" || !list.Checkpoints[0].Existed || list.Checkpoints[1].Existed {
		t.Fatalf("checkpoints = %+v", list.Checkpoints)
	}
	rep := e2etest.GwCall[checkpoint.Report](t, c, api.MethodCheckpointRewind, api.CheckpointRewindParams{RunID: run.RunID})
	outcomes := map[string]string{}
	for _, f := range rep.Files {
		outcomes[f.Path] = f.Outcome
	}
	if outcomes["keep.txt"] != event.StatusRestored || outcomes["new.txt"] != event.StatusRemoved {
		t.Errorf("outcomes = %v: %+v", outcomes, rep.Files)
	}
	if data, _ := os.ReadFile(filepath.Join(e.Workspace, "keep.txt")); string(data) != "original\n" {
		t.Errorf("keep.txt = %q after rewind", data)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt still exists: %v", err)
	}
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, func(f api.EventFrame) bool { return f.Event == event.RewindCompleted && f.RunID == run.RunID }); err != nil {
		t.Errorf("no rewind.completed on the session stream: %v", err)
	}
}

// agent harness --gateway runs the harness in the gateway, as agent run
// --gateway runs a run there: the plan, its phases and the board, and the
// exit code of the harness.
func TestGatewayHarnessCLI(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"A note","phases":[
		{"id":"alpha","title":"Note A","instructions":"Write a.md.","evidence":{"type":"artifact","artifacts":["a.md"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("alpha", e2etest.WriteTurn("a.md", "A\n"), llmtest.Turn{Text: "a.md written."})...)
	e := e2etest.New(t, turns...)
	g := e.StartGateway()
	res, _ := e.RunWith(e.GatewayEnv(g.Addr), "harness", "--gateway", "--json", "write a note")
	if res.Code != 0 {
		t.Fatalf("harness --gateway: exit %d; stderr: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if evs[0].SessionID == "" || len(e2etest.OfType(evs, event.PhaseCompleted)) != 1 || evs[len(evs)-1].Type != event.RunCompleted {
		t.Errorf("events %s: want a session's harness with its phase completed", res.Stdout)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "a.md")); err != nil {
		t.Error("the phase's file is not in the workspace")
	}
	if bad, _ := e.RunWith(e.GatewayEnv(g.Addr), "harness", "--gateway", "--plan", "x"); bad.Code != 2 || !strings.Contains(bad.Stderr, "--plan") {
		t.Errorf("--plan with --gateway: exit %d %q; want 2 saying why", bad.Code, bad.Stderr)
	}
}
