package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/runner"
	"agent/tools"
)

// chattyTool is a tool that reports progress n times at once, then asks
// the person a question, as an MCP server's call does.
type chattyTool struct{ n int }

func (chattyTool) Definition() tools.Definition {
	return tools.Definition{Name: "chatty", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}
}
func (chattyTool) ReadOnly() bool { return false }

func (c chattyTool) Run(ctx context.Context, _ *tools.Workspace, _ json.RawMessage) tools.Result {
	call := tools.CallOf(ctx)
	if call == nil {
		return tools.Result{IsError: true, Output: "no call in the context"}
	}
	for i := 1; i <= c.n; i++ {
		call.Progress(float64(i), float64(c.n), "working")
	}
	ans, err := call.Ask(ctx, tools.Question{Server: "docs", Text: "Which colour?", Seq: 1})
	switch {
	case err != nil:
		return tools.Result{IsError: true, Output: err.Error()}
	case ans.Declined:
		return tools.Result{Output: "declined: " + ans.Why}
	case ans.TimedOut:
		return tools.Result{Output: "timed out"}
	}
	return tools.Result{Output: "answer: " + ans.Text}
}

// A running call's progress is recorded at most once a second; its
// question is a question wait of the run, waited for by the Waiter or
// else by Hold, never parked, and declined at once when the run asks no
// person.
func TestCallProgressAndQuestions(t *testing.T) {
	t.Parallel()
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.NewSet(ws, tools.Options{}, chattyTool{n: 1000})
	if err != nil {
		t.Fatal(err)
	}
	answer := waiterFunc(func(w event.RunWaitingData) event.WaitResolvedData {
		return event.WaitResolvedData{Outcome: event.WaitAnswered, Via: event.ViaCLI, Answer: "blue"}
	})
	for _, c := range []struct {
		name     string
		cfg      runner.Config
		want     string
		waits    int
		warnings string
	}{
		{"held", runner.Config{AskHuman: true, Hold: answer}, "answer: blue", 1, ""},
		{"asked inline", runner.Config{AskHuman: true, Waiter: answer}, "answer: blue", 1, ""},
		{"the one asked left", runner.Config{AskHuman: true, Waiter: parks{}, Hold: answer}, "answer: blue", 1, ""},
		{"nobody asked", runner.Config{Hold: answer}, "declined: nobody can answer in this run", 0,
			`MCP server "docs" asked a question while chatty ran; declined: nobody can answer in this run`},
		{"nothing holds", runner.Config{AskHuman: true}, "declined: nothing waits for an answer while the call runs here", 0,
			"declined: nothing waits for an answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &recSink{}
			cfg := c.cfg
			cfg.Model, cfg.Tools, cfg.Sink = replies(t, calls(tc("c1", "chatty", `{}`)), final("ok")), set, sink
			cfg.AskTimeout = 48 * time.Hour
			began := time.Now()
			if _, err := runner.Run(context.Background(), cfg, "go", runner.State{}); err != nil {
				t.Fatal(err)
			}
			if got := toolResults(t, sink)["c1"].Output; !strings.HasPrefix(got, c.want) {
				t.Errorf("result %q, want %q", got, c.want)
			}
			if n := len(sink.Of(event.ToolProgress)); n != 1 {
				t.Errorf("%d tool.progress for 1000 reports within a second, want 1", n)
			} else if p := decode[event.ToolProgressData](t, sink.Of(event.ToolProgress)[0]); p.CallID != "c1" || p.Total != 1000 || p.Progress != 1 {
				t.Errorf("tool.progress %+v", p)
			}
			waits := sink.Of(event.RunWaiting)
			if len(waits) != c.waits {
				t.Fatalf("%d run.waiting, want %d", len(waits), c.waits)
			}
			if c.waits == 1 {
				w := decode[event.RunWaitingData](t, waits[0])
				until, _ := time.Parse(time.RFC3339, w.Until)
				if w.Kind != event.WaitQuestion || w.Server != "docs" || w.CallID != "c1" || w.Question != "Which colour?" ||
					until.After(began.Add(runner.MaxCallQuestion+time.Minute)) {
					t.Errorf("run.waiting %+v", w)
				}
			}
			var warned []string
			for _, e := range sink.Of(event.Warning) {
				warned = append(warned, decode[event.WarningData](t, e).Message)
			}
			if got := strings.Join(warned, "\n"); c.warnings == "" && got != "" || !strings.Contains(got, c.warnings) {
				t.Errorf("warnings %q, want %q", got, c.warnings)
			}
		})
	}
}

// parks is a Waiter whose person is gone: it parks every wait.
type parks struct{}

func (parks) Wait(context.Context, event.RunWaitingData) (event.WaitResolvedData, error) {
	return event.WaitResolvedData{}, runner.ErrParked
}
