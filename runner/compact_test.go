package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/llm"
	"agent/llm/llmtest"
	"agent/runner"
)

// A 40-step run against a model whose window is 8,192 tokens, which the
// run is not told: the provider's first refusal states the window (as
// OpenAI, vLLM, OpenRouter and llama.cpp do), and from then on the
// conversation is compacted before a request would pass it, so no other
// request is refused. Ollama states no window: each refusal is compacted
// after, as before, and the run completes all the same.
func TestCompactionLearnsTheWindowFromTheRefusal(t *testing.T) {
	t.Parallel()
	const window, steps = 8192, 40
	for _, server := range llmtest.ContextErrors() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			set, root := newTools(t)
			var turns []llmtest.Turn
			for i := 1; i <= steps; i++ {
				body := fmt.Sprintf("marker %d\n%s\n", i, strings.Repeat("x", 2500))
				if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("big-%d.txt", i)), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "read_file", Arguments: []byte(fmt.Sprintf(`{"path":"big-%d.txt"}`, i))}}})
			}
			turns = append(turns, llmtest.Turn{Text: "Read them all."})
			srv := llmtest.NewServer(t, llmtest.Script{Turns: turns, ContextWindow: window, ContextError: server,
				Standing: []llmtest.Turn{{When: "You are compacting the conversation", Text: "SUMMARY: read the big files in order."}}})
			model, err := llm.New(llm.Config{BaseURL: srv.URL(), Sleep: func(context.Context, time.Duration) error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			sink := &recSink{}
			res, err := runner.Run(context.Background(), runner.Config{
				Model: model, ModelName: "test-model", Tools: set, Sink: sink, MaxTurns: 2 * steps, Compact: true,
			}, "read the big files one by one", runner.State{})
			if err != nil || res.Status != event.StatusCompleted || res.Text != "Read them all." {
				t.Fatalf("result %+v, err %v; want completed", res, err)
			}
			refused := 0
			for _, r := range srv.Requests() {
				if r.TooLong {
					refused++
				}
			}
			var triggers []string
			for _, e := range sink.Of(event.ContextCompacted) {
				triggers = append(triggers, decode[event.ContextCompactedData](t, e).Trigger)
			}
			t.Logf("%d requests, %d refused; compactions: %v", len(srv.Requests()), refused, triggers)
			if server == "ollama" {
				if refused < 2 {
					t.Errorf("%d refusals: the run never passed the window twice, so the test proves nothing", refused)
				}
				return
			}
			if refused != 1 {
				t.Errorf("%d requests refused as too long, want exactly 1", refused)
			}
			if len(triggers) < 3 || triggers[0] != "context_error" || triggers[1] != "window" {
				t.Errorf("compactions %v, want one after the refusal, then before the window", triggers)
			}
			warned := false
			for _, e := range sink.Of(event.Warning) {
				warned = warned || strings.Contains(decode[event.WarningData](t, e).Message, "context window is 8192 tokens")
			}
			if !warned {
				t.Error("no warning names the window the provider stated")
			}
		})
	}
}
