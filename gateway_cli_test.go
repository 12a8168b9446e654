package main

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
	"agent/event"
	"agent/gateway"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
)

// The CLI as a gateway client: `agent run --gateway` against an
// in-process gateway whose children are real `agent runner` processes.

func (e *e2e) gatewayEnv(addr string) []string {
	return []string{"AGENT_GATEWAY=http://" + addr, "AGENT_GATEWAY_TOKEN=" + gwToken}
}

// transcript is what a run persisted, without ids and times.
type transcript struct {
	Messages []string
	Calls    []string
	Status   string
	Result   string
	Exit     int
}

func persisted(t *testing.T, e *e2e, runID string) transcript {
	t.Helper()
	res := e.run("runs", "show", runID, "--json")
	var v runView
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		t.Fatalf("runs show: %v\n%s", err, res.stdout)
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
			{Text: "Writing it.", ToolCalls: []llmtest.Call{call("write_file", `{"path":"notes/hello.txt","content":"hi\n"}`)}},
			{ToolCalls: []llmtest.Call{call("edit_file", `{"path":"notes/hello.txt","old_string":"hi","new_string":"hello"}`),
				call("read_file", `{"path":"missing.txt"}`)}},
			{ToolCalls: []llmtest.Call{call("bash", `{"command":"cat notes/hello.txt | wc -c"}`)}},
			{Text: "Done: notes/hello.txt says hello."},
		}
	}
	const prompt = "write a greeting"

	local := newE2E(t, turns()...)
	lres := local.run("run", "--json", prompt)
	if lres.code != 0 {
		t.Fatalf("local: exit %d %s", lres.code, lres.stderr)
	}
	levs := decodeEvents(t, lres.stdout)

	remote := newE2E(t, turns()...)
	srv, _ := remote.inProcessGateway(nil)
	cmd := remote.command("run", "--json", prompt)
	cmd.Env = append(cmd.Env, remote.gatewayEnv(srv.Addr())...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gateway run: %v", err)
	}
	revs := decodeEvents(t, string(out))

	if got, want := eventTypes(revs), eventTypes(levs); got != want {
		t.Errorf("event types differ:\ngateway: %s\nlocal:   %s", got, want)
	}
	if revs[0].SessionID == "" {
		t.Error("gateway events carry no session_id")
	}
	if got, want := persisted(t, remote, revs[0].RunID), persisted(t, local, levs[0].RunID); !reflect.DeepEqual(got, want) {
		t.Errorf("persisted transcripts differ:\ngateway: %+v\nlocal:   %+v", got, want)
	}
	if got, want := readTree(t, remote.workspace), readTree(t, local.workspace); !reflect.DeepEqual(got, want) {
		t.Errorf("workspaces differ:\ngateway: %v\nlocal:   %v", got, want)
	}
}

// TestGatewayRunCLI: exit codes match local mode, a --session run sees
// the session's earlier messages, and Ctrl-C cancels the gateway's run.
func TestGatewayRunCLI(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{Text: "Noted: the code word is ORCHID."},
		llmtest.Turn{Text: "The code word was ORCHID."},
		llmtest.Turn{ToolCalls: []llmtest.Call{call("list_files", `{}`)}}, // max turns 1: exit 1
		llmtest.Turn{Text: "thinking", Hang: true},
		llmtest.Turn{Text: "Done thinking."},
	)
	srv, _ := e.inProcessGateway(nil)
	env := func(cmdEnv []string) []string { return append(cmdEnv, e.gatewayEnv(srv.Addr())...) }
	run := func(args ...string) result {
		cmd := e.command(args...)
		cmd.Env = env(cmd.Env)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
	}

	first := run("run", "--json", "remember the code word ORCHID")
	if first.code != 0 {
		t.Fatalf("first run: %d %s", first.code, first.stderr)
	}
	session := decodeEvents(t, first.stdout)[0].SessionID
	second := run("run", "--session", session, "what was the code word?")
	if second.code != 0 || !strings.Contains(second.stdout, "The code word was ORCHID.") {
		t.Fatalf("second run: %d %q %s", second.code, second.stdout, second.stderr)
	}
	msgs := e.srv.Requests()[1].Messages()
	if len(msgs) != 4 || !strings.Contains(msgs[1].Content, "ORCHID") {
		t.Errorf("the second run did not see the session's first run: %+v", msgs)
	}

	limited := run("run", "--max-turns", "1", "loop")
	if limited.code != 1 || !strings.Contains(limited.stderr, "turn limit (--max-turns)") {
		t.Errorf("max turns through the gateway: exit %d %q, want 1 as locally", limited.code, limited.stderr)
	}

	// Ctrl-C interrupts the run resumably, exactly as it does locally.
	b := e.startWith(env, "run", "--json", "think forever")
	runID := b.waitEvent(t, event.RunStarted).RunID
	waitFor(t, "the model call", func() bool { return e.srv.RequestCount() == 4 })
	if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-b.done
	_ = b.cmd.Wait()
	if code := b.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("Ctrl-C: exit %d, want 130; stderr: %s", code, b.stderr.String())
	}
	if fin := lastFinished(t, []event.Event{b.waitEvent(t, event.RunInterrupted)}); fin.Reason != "interrupted" || fin.ExitCode != 130 {
		t.Errorf("Ctrl-C ended the run %+v, want interrupted, exit 130", fin)
	}
	resumed := run("resume", runID, "--json")
	if resumed.code != 0 || !strings.Contains(resumed.stdout, `"result":"Done thinking."`) {
		t.Errorf("resume through the gateway after Ctrl-C: exit %d %s %s", resumed.code, resumed.stdout, resumed.stderr)
	}

	// Bad input is refused like locally, before anything starts.
	if res := run("run", "--record", "x.jsonl", "hi"); res.code != 2 {
		t.Errorf("--record with --gateway: exit %d, want 2", res.code)
	}
	cmd := e.command("run", "hi")
	cmd.Env = append(cmd.Env, "AGENT_GATEWAY=http://"+srv.Addr(), "AGENT_GATEWAY_TOKEN=wrong")
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("wrong token: exit %d, want 2", code)
	}
}

// TestAttach replays a session's events and follows new ones.
func TestAttach(t *testing.T) {
	t.Parallel()
	e := newE2E(t, llmtest.Turn{Text: "first answer"}, llmtest.Turn{Text: "second answer", DelayMS: 300})
	srv, _ := e.inProcessGateway(nil)
	env := func(cmdEnv []string) []string { return append(cmdEnv, e.gatewayEnv(srv.Addr())...) }
	cmd := e.command("run", "--json", "one")
	cmd.Env = env(cmd.Env)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	firstRun := decodeEvents(t, string(out))
	session := firstRun[0].SessionID

	a := e.startWith(env, "attach", session, "--json", "--after-seq", "2")
	cmd = e.command("run", "--session", session, "two")
	cmd.Env = env(cmd.Env)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	waitFor(t, "the second run's end through attach", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		got = append(got[:0], a.events...)
		n := 0
		for _, ev := range got {
			if ev.Type == event.RunCompleted {
				n++
			}
		}
		return n == 2
	})
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	<-a.done
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
	e := newE2E(t, llmtest.Turn{Text: "Paris."}, llmtest.Turn{Text: "You asked about France."})
	srv, _ := e.inProcessGateway(nil)
	cmd := e.command("run", "--json", "capital of France?")
	cmd.Env = append(cmd.Env, e.gatewayEnv(srv.Addr())...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	session := decodeEvents(t, string(out))[0].SessionID

	list := e.run("sessions", "list", "--json")
	if !strings.Contains(list.stdout, `"id":"`+session+`"`) || !strings.Contains(list.stdout, `"runs":1`) {
		t.Errorf("sessions list: %s", list.stdout)
	}
	show := e.run("sessions", "show", session[:8])
	if show.code != 0 || !strings.Contains(show.stdout, "capital of France?") || !strings.Contains(show.stdout, "agent attach") {
		t.Errorf("sessions show: %d %s", show.code, show.stdout)
	}
	fork := e.run("sessions", "fork", session, "--json")
	var v sessionView
	if err := json.Unmarshal([]byte(fork.stdout), &v); err != nil || v.ParentID != session {
		t.Fatalf("sessions fork: %v %s %s", err, fork.stdout, fork.stderr)
	}
	// A run in the fork sees the source's conversation.
	cmd = e.command("run", "--session", v.ID, "what did I ask?")
	cmd.Env = append(cmd.Env, e.gatewayEnv(srv.Addr())...)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if msgs := e.srv.Requests()[1].Messages(); len(msgs) != 4 || msgs[1].Content != "capital of France?" {
		t.Errorf("the forked session's run saw %+v", msgs)
	}
	if res := e.run("sessions", "show", "nosuchsession"); res.code != 2 {
		t.Errorf("unknown session: exit %d, want 2", res.code)
	}
}

// TestGatewayCheckpointRewind: a gateway run's checkpoints are listed and
// rewound over the protocol; attached clients see rewind.completed.
func TestGatewayCheckpointRewind(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"keep.txt","content":"changed\n"}`),
			call("write_file", `{"path":"new.txt","content":"new\n"}`)}},
		llmtest.Turn{Text: "Both written."},
	)
	if err := os.WriteFile(filepath.Join(e.workspace, "keep.txt"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := e.inProcessGateway(nil)
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sid})
	run := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{SessionID: sid, Input: "write two files"})
	gwWait(t, c, run.RunID)

	list := gwCall[gateway.CheckpointList](t, c, gateway.MethodCheckpointList, gateway.CheckpointListParams{RunID: run.RunID})
	if len(list.Checkpoints) != 2 || list.Checkpoints[0].Path != "keep.txt" || !list.Checkpoints[0].Existed || list.Checkpoints[1].Existed {
		t.Fatalf("checkpoints = %+v", list.Checkpoints)
	}
	rep := gwCall[checkpoint.Report](t, c, gateway.MethodCheckpointRewind, gateway.CheckpointRewindParams{RunID: run.RunID})
	outcomes := map[string]string{}
	for _, f := range rep.Files {
		outcomes[f.Path] = f.Outcome
	}
	if outcomes["keep.txt"] != checkpoint.Restored || outcomes["new.txt"] != checkpoint.Removed {
		t.Errorf("outcomes = %v: %+v", outcomes, rep.Files)
	}
	if data, _ := os.ReadFile(filepath.Join(e.workspace, "keep.txt")); string(data) != "original\n" {
		t.Errorf("keep.txt = %q after rewind", data)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt still exists: %v", err)
	}
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, func(f gateway.EventFrame) bool { return f.Event == event.RewindCompleted && f.RunID == run.RunID }); err != nil {
		t.Errorf("no rewind.completed on the session stream: %v", err)
	}
}
