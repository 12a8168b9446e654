package runner_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"agent/adapter"
	"agent/approval"
	"agent/event"
	"agent/llm"
	"agent/runner"
	"agent/tools"
)

// parkedAt runs the loop from state until it parks on a wait and returns
// the run.waiting it recorded.
func parkedAt(t *testing.T, cfg runner.Config, state runner.State) (event.RunWaitingData, *recSink) {
	t.Helper()
	sink := &recSink{}
	cfg.Sink = sink
	_, err := runner.Run(context.Background(), cfg, "push it", state)
	if !errors.Is(err, runner.ErrParked) {
		t.Fatalf("Run = %v, want ErrParked", err)
	}
	if r := runner.Report(runner.Result{}, err); r.Status != event.StatusWaiting || r.Reason != event.ReasonWaiting {
		t.Errorf("report = %+v, want status and reason waiting", r)
	}
	w := sink.Of(event.RunWaiting)
	if len(w) != 1 || sink.Types()[len(sink.Types())-1] != event.RunWaiting {
		t.Fatalf("events = %v, want run.waiting last, once", sink.Types())
	}
	return decode[event.RunWaitingData](t, w[0]), sink
}

// The history a parked run resumes from: the prompt and the call.
func pendingCall(call llm.ToolCall) runner.State {
	return runner.State{History: []llm.Message{
		{Role: llm.RoleUser, Content: "push it"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{call}},
	}, Turns: 1}
}

// A call an approval rule names parks the run before tool.started; the
// run resumed with the answer runs it (allowed) or tells the model who
// denied it and why (denied), and never runs it unanswered.
func TestApprovalParksBeforeTheCall(t *testing.T) {
	t.Parallel()
	rules, err := approval.Parse([]string{"bash(touch *)"})
	if err != nil {
		t.Fatal(err)
	}
	call := tc("c1", "bash", bashArgs("touch pushed"))
	for _, tt := range []struct {
		name    string
		answer  event.WaitResolvedData
		ran     bool
		results string
	}{
		{"allowed", event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaCLI}, true, ""},
		{"denied", event.WaitResolvedData{Outcome: event.WaitDenied, Via: event.ViaWeb, Who: "ana", Reason: "not on Friday"}, false, "denied (web, ana): not on Friday"},
		{"timed out", event.WaitResolvedData{Outcome: event.WaitTimedOut, Via: event.ViaTimeout}, false, "denied (timeout)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, root := newTools(t)
			cfg := runner.Config{Model: replies(t, calls(call)), Tools: set, Approvals: rules}
			w, first := parkedAt(t, cfg, runner.State{})
			if len(first.Of(event.ToolStarted)) != 0 || fileExists(filepath.Join(root, "pushed")) {
				t.Fatal("the call started before it was approved")
			}
			if w.Kind != event.WaitApproval || w.Rule != "bash(touch *)" || w.CallID != "c1" || w.OnTimeout != event.OnTimeoutDeny || w.Until == "" {
				t.Errorf("run.waiting = %+v", w)
			}

			// Woken without an answer: the same wait, asked again.
			again, _ := parkedAt(t, runner.Config{Model: replies(t), Tools: set, Approvals: rules,
				Waits: map[string]adapter.Wait{w.WaitID: {Waiting: w}}}, pendingCall(call))
			if again.WaitID != w.WaitID || again.Until != w.Until {
				t.Errorf("asked again as %+v, want the first wait %+v", again, w)
			}

			answer := tt.answer
			answer.WaitID = w.WaitID
			sink := &recSink{}
			cfg = runner.Config{Model: replies(t, final("done")), Tools: set, Sink: sink, Approvals: rules,
				Waits: map[string]adapter.Wait{w.WaitID: {Waiting: w, Resolution: &answer}}}
			res, err := runner.Run(context.Background(), cfg, "push it", pendingCall(call))
			if err != nil || res.Status != event.StatusCompleted {
				t.Fatalf("resumed run = %+v, %v", res, err)
			}
			if got := fileExists(filepath.Join(root, "pushed")); got != tt.ran {
				t.Errorf("the call ran = %v, want %v", got, tt.ran)
			}
			types := sink.Types()
			if types[0] != event.WaitResolved {
				t.Errorf("events = %v, want wait.resolved first", types)
			}
			if r := toolResults(t, sink)["c1"]; tt.results != "" && (r.OK || !strings.HasPrefix(r.Output, tt.results)) {
				t.Errorf("result = %+v, want an error starting %q", r, tt.results)
			}
			if started := len(sink.Of(event.ToolStarted)); started != map[bool]int{true: 1, false: 0}[tt.ran] {
				t.Errorf("tool.started %d times", started)
			}
		})
	}
}

// --always allows the rule for the rest of the run, also after a resume.
func TestAlwaysAllowsTheRule(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	rules, _ := approval.Parse([]string{"write_file"})
	first := tc("c1", "write_file", `{"path":"a.txt","content":"a"}`)
	w, _ := parkedAt(t, runner.Config{Model: replies(t, calls(first)), Tools: set, Approvals: rules}, runner.State{})
	answer := event.WaitResolvedData{WaitID: w.WaitID, Outcome: event.WaitAllowed, Via: event.ViaTerminal, Always: true}
	sink := &recSink{}
	model := replies(t, calls(tc("c2", "write_file", `{"path":"b.txt","content":"b"}`)), final("both"))
	res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, Approvals: rules,
		Waits: map[string]adapter.Wait{w.WaitID: {Waiting: w, Resolution: &answer, Journaled: true}}}, "write", pendingCall(first))
	if err != nil || res.Text != "both" {
		t.Fatalf("run = %+v, %v", res, err)
	}
	if len(sink.Of(event.RunWaiting)) != 0 || len(sink.Of(event.WaitResolved)) != 0 {
		t.Errorf("events = %v, want no new wait and the journaled answer not recorded again", sink.Types())
	}
	for _, f := range []string{"a.txt", "b.txt"} {
		if !fileExists(filepath.Join(root, f)) {
			t.Errorf("%s was not written", f)
		}
	}
}

// The wait tools park the run after tool.started and answer the call
// with the resolution; a Waiter in this process answers without parking.
func TestWaitTools(t *testing.T) {
	t.Parallel()
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.NewSet(ws, tools.Options{}, append(tools.WaitTools(), tools.AskHumanTool())...)
	if err != nil {
		t.Fatal(err)
	}
	ask := tc("q1", "ask_human", `{"question":"Which branch?","options":["main","dev"]}`)
	w, sink := parkedAt(t, runner.Config{Model: replies(t, calls(ask)), Tools: set}, runner.State{})
	if w.Kind != event.WaitQuestion || w.Question != "Which branch?" || len(w.Options) != 2 || w.OnTimeout != event.OnTimeoutContinue {
		t.Errorf("run.waiting = %+v", w)
	}
	if len(sink.Of(event.ToolStarted)) != 1 {
		t.Errorf("events = %v, want the question's tool.started before the wait", sink.Types())
	}

	waiter := waiterFunc(func(w event.RunWaitingData) event.WaitResolvedData {
		switch w.Kind {
		case event.WaitSignal:
			return event.WaitResolvedData{Outcome: event.WaitSignalled, Via: event.ViaCLI, Data: []byte(`{"ok":true}`)}
		case event.WaitSleep:
			return event.WaitResolvedData{Outcome: event.WaitElapsed, Via: event.ViaTimeout}
		}
		return event.WaitResolvedData{Outcome: event.WaitAnswered, Via: event.ViaTerminal, Answer: "dev"}
	})
	sink = &recSink{}
	model := replies(t, calls(tc("s1", "wait_for_signal", `{"name":"ci-done","timeout_s":60}`), tc("z1", "wait_until", `{"seconds":5,"reason":"let it settle"}`)), final("ok"))
	res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, Waiter: waiter,
		Waits: map[string]adapter.Wait{w.WaitID: {Waiting: w}}}, "go", pendingCall(ask))
	if err != nil || res.Text != "ok" {
		t.Fatalf("run = %+v, %v", res, err)
	}
	got := toolResults(t, sink)
	for id, want := range map[string]string{"q1": "Answer (terminal): dev", "s1": `Signal ci-done arrived. Data: {"ok":true}`, "z1": "Waited until"} {
		if !strings.HasPrefix(got[id].Output, want) {
			t.Errorf("result of %s = %q, want it to start %q", id, got[id].Output, want)
		}
	}
	if n := len(sink.Of(event.WaitResolved)); n != 3 {
		t.Errorf("wait.resolved %d times, want 3", n)
	}
}

type waiterFunc func(event.RunWaitingData) event.WaitResolvedData

func (f waiterFunc) Wait(_ context.Context, w event.RunWaitingData) (event.WaitResolvedData, error) {
	return f(w), nil
}
