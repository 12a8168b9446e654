package cli

import (
	"strings"
	"syscall"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
)

// Parity: a run is one durable run whatever drives it. The same inputs
// give the same events (bar message.delta), the same terminal reason and
// the same exit code in this process, through the gateway, as a harness
// run, and after a resume.

// ending is what parity compares of a run: its event types without
// message.delta, and its terminal event as people and scripts read it.
type ending struct {
	Types                          string
	Status, Reason, Detail, Result string
	Exit, Turns                    int
}

func endingOf(t *testing.T, evs []event.Event) ending {
	t.Helper()
	var types []string
	for _, e := range evs {
		if e.Type != event.MessageDelta {
			types = append(types, e.Type)
		}
	}
	fin := e2etest.LastFinished(t, evs)
	return ending{Types: strings.Join(types, " "), Status: fin.Status, Reason: fin.Reason, Detail: fin.Detail,
		Result: fin.Result, Exit: fin.ExitCode, Turns: fin.Turns}
}

// runBoth runs one prompt in this process and through an in-process
// gateway, each against its own copy of the model's replies, and returns
// the two endings and the two process exit codes.
func runBoth(t *testing.T, turns []llmtest.Turn, args ...string) (local, remote ending, localCode, remoteCode int) {
	t.Helper()
	l := e2etest.New(t, turns...)
	lres := l.Run(append([]string{"run", "--json"}, args...)...)
	r := e2etest.New(t, turns...)
	srv, _ := r.InProcessGateway(nil)
	cmd := r.Command(append([]string{"run", "--json"}, args...)...)
	cmd.Env = append(cmd.Env, r.GatewayEnv(srv.Addr())...)
	out, _ := cmd.Output()
	return endingOf(t, e2etest.DecodeEvents(t, lres.Stdout)), endingOf(t, e2etest.DecodeEvents(t, string(out))), lres.Code, cmd.ProcessState.ExitCode()
}

func TestParityLocalAndGateway(t *testing.T) {
	t.Parallel()
	listing := func(n int) llmtest.Turn {
		return llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("list_files", `{"pattern":"*.`+strings.Repeat("x", n)+`"}`)}}
	}
	bash := llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo again >> log.txt"}`)}}
	tests := []struct {
		name   string
		turns  []llmtest.Turn
		args   []string
		reason string
		exit   int
	}{
		{"completed", []llmtest.Turn{
			{Text: "Writing it.", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"hello.txt","content":"hi\n"}`)}},
			{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":"missing.txt"}`)}},
			{Text: "Done."},
		}, []string{"write a greeting"}, event.ReasonCompleted, 0},
		{"max turns", []llmtest.Turn{listing(1), listing(2), {Text: "never"}}, []string{"--max-turns", "2", "list forever"}, event.ReasonMaxTurns, 1},
		{"out of iterations", []llmtest.Turn{{Text: "not yet"}, {Text: "still not"}},
			[]string{"--until", "SHIPPED", "--max-iterations", "2", "ship it"}, event.ReasonMaxIterations, 1},
		{"repeated tool call", []llmtest.Turn{bash, bash, bash, bash, bash}, []string{"repeat yourself"}, event.ReasonToolLoop, 1},
		{"provider", []llmtest.Turn{{Status: 401, Body: `{"error":{"message":"Incorrect API key provided"}}`}},
			[]string{"--model-attempts", "1", "hello"}, event.ReasonProvider, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			local, remote, lcode, rcode := runBoth(t, tt.turns, tt.args...)
			if local != remote {
				t.Errorf("local and gateway differ:\nlocal:   %+v\ngateway: %+v", local, remote)
			}
			if local.Reason != tt.reason || local.Exit != tt.exit || lcode != tt.exit || rcode != tt.exit {
				t.Errorf("reason %s, exit %d (processes %d, %d); want %s, %d", local.Reason, local.Exit, lcode, rcode, tt.reason, tt.exit)
			}
		})
	}
}

// A harness run in this process and in the gateway: the same events and
// the same end.
func TestParityHarness(t *testing.T) {
	t.Parallel()
	plan := `{"objective":"Greet","phases":[{"id":"greet","title":"Write the greeting",
		"instructions":"Write hello.txt saying hello.","evidence":{"type":"artifact","artifacts":["hello.txt"]}}]}`
	turns := func() []llmtest.Turn {
		return []llmtest.Turn{
			{ToolCalls: []llmtest.Call{e2etest.ToolCall("submit_plan", plan)}},
			{Text: "Planned."},
			{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"hello.txt","content":"hello\n"}`)}},
			{Text: "hello.txt says hello."},
		}
	}
	l := e2etest.New(t, turns()...)
	lres := l.Run("harness", "--json", "write a greeting")
	local := endingOf(t, e2etest.DecodeEvents(t, lres.Stdout))

	r := e2etest.New(t, turns()...)
	srv, _ := r.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{
		SessionID: sid, Input: "write a greeting", Options: api.RunOptions{Harness: true}})
	var evs []event.Event
	for _, f := range e2etest.GwWait(t, c, run.RunID) {
		evs = append(evs, frameToEvent(f))
	}
	remote := endingOf(t, evs)
	if local != remote {
		t.Errorf("local and gateway harness differ:\nlocal:   %+v\ngateway: %+v", local, remote)
	}
	if local.Reason != event.ReasonCompleted || lres.Code != 0 || !strings.Contains(local.Types, "verification.completed phase.completed") {
		t.Errorf("harness: exit %d %+v", lres.Code, local)
	}
}

// Ctrl-C and a resume: the same interrupted end, and the same resumed
// run, locally and through the gateway.
func TestParityInterruptAndResume(t *testing.T) {
	t.Parallel()
	turns := func() []llmtest.Turn {
		return []llmtest.Turn{
			{Text: "First a note.", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"note.txt","content":"one\n"}`)}},
			{Text: "thinking", Hang: true},
			{ToolCalls: []llmtest.Call{e2etest.ToolCall("edit_file", `{"path":"note.txt","old_string":"one","new_string":"two"}`)}},
			{Text: "The note says two."},
		}
	}
	// drive interrupts a run at its second model call, then resumes it;
	// env adds what sends it to a gateway.
	drive := func(e *e2etest.Env, env func([]string) []string) (interrupted, resumed ending, codes [2]int) {
		t.Helper()
		b := e.StartWith(env, "run", "--json", "write a note, then change it")
		runID := b.WaitEvent(t, event.RunStarted).RunID
		e2etest.WaitFor(t, "the second model call", func() bool { return e.Srv.RequestCount() == 2 })
		if err := b.Cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		<-b.Done
		_ = b.Cmd.Wait()
		b.Mu.Lock()
		interrupted = endingOf(t, b.Events)
		b.Mu.Unlock()
		cmd := e.Command("resume", runID, "--json")
		if env != nil {
			cmd.Env = env(cmd.Env)
		}
		out, _ := cmd.Output()
		return interrupted, endingOf(t, e2etest.DecodeEvents(t, string(out))), [2]int{b.Cmd.ProcessState.ExitCode(), cmd.ProcessState.ExitCode()}
	}
	local := e2etest.New(t, turns()...)
	li, lr, lcodes := drive(local, nil)
	remote := e2etest.New(t, turns()...)
	srv, _ := remote.InProcessGateway(nil)
	ri, rr, rcodes := drive(remote, func(env []string) []string { return append(env, remote.GatewayEnv(srv.Addr())...) })

	if li != ri || lr != rr || lcodes != rcodes {
		t.Errorf("local and gateway differ:\ninterrupted %+v\n        vs. %+v\nresumed %+v\n    vs. %+v\nexit codes %v vs. %v", li, ri, lr, rr, lcodes, rcodes)
	}
	// The interrupted run spent one turn; the resumed one counts on from it.
	if li.Reason != event.ReasonInterrupted || li.Exit != 130 || li.Turns != 1 || lcodes != [2]int{130, 0} ||
		lr.Reason != event.ReasonCompleted || lr.Result != "The note says two." || lr.Turns != 3 {
		t.Errorf("interrupted %+v, resumed %+v, exit codes %v", li, lr, lcodes)
	}
}

// frameToEvent is a gateway event frame as the event a client prints.
func frameToEvent(f api.EventFrame) event.Event {
	return event.Event{V: event.Version, Seq: f.Seq, TS: f.TS, RunID: f.RunID, SessionID: f.SessionID,
		PhaseID: f.PhaseID, Attempt: f.Attempt, Type: f.Event, Data: f.Data}
}
