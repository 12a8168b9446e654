package model

import (
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// Issue 24, item 13: a 40-step `agent run` against a model whose window is
// 8,192 tokens, which the run is not told (no --context-window, a model
// name with no known window). The provider's first refusal states the
// window, in OpenAI's, vLLM's or llama.cpp's words; from then on the
// conversation is compacted before a request would pass it, so no other
// request is refused.
func TestContextWindowLearnedFromTheRefusal(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"openai", "vllm", "llamacpp"} {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			e := e2etest.New(t)
			turns := bigFiles(t, e.Workspace, 40, 2500)
			e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: turns, ContextWindow: 8192, ContextError: server,
				Standing: []llmtest.Turn{compactionReply}})
			res := e.Run("run", "--json", "read the big files one by one")
			if res.Code != 0 {
				t.Fatalf("exit %d: %s", res.Code, res.Stderr)
			}
			evs := e2etest.DecodeEvents(t, res.Stdout)
			if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" || fin.Result != "Read them all." {
				t.Fatalf("final = %+v, want completed", fin)
			}
			refused := 0
			for _, r := range e.Srv.Requests() {
				if r.TooLong {
					refused++
				}
			}
			var triggers []string
			for _, c := range compactions(evs) {
				triggers = append(triggers, c.Trigger)
			}
			t.Logf("%d requests, %d refused as too long; compactions %v", len(e.Srv.Requests()), refused, triggers)
			if refused != 1 {
				t.Errorf("%d requests refused as too long, want 1", refused)
			}
			if len(triggers) < 2 || triggers[0] != "context_error" || triggers[len(triggers)-1] != "window" {
				t.Errorf("compactions %v, want the first after the refusal and the later ones before the window", triggers)
			}
			warned := false
			for _, ev := range e2etest.OfType(evs, event.Warning) {
				var d event.WarningData
				ev.Decode(&d)
				warned = warned || strings.Contains(d.Message, "context window is 8192 tokens")
			}
			if !warned {
				t.Errorf("no warning names the window the provider stated")
			}
		})
	}
}

// Issue 24, item 14: a provider that stalls (keep-alives only, then
// silence) is retried once and then ends the run, exit 3, resumable, with
// the retry event saying why it retried; the resumed run gets the reply.
// The --help of `agent run` states the call bound that keeps any call
// within 5 minutes with default flags.
func TestStalledProviderEndsTheRun(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "thinking", Hang: true, KeepaliveMS: 50},
		llmtest.Turn{Text: "late", DelayMS: 600_000},
		llmtest.Turn{Text: "Done."},
	)
	res := e.Run("run", "--json", "--model-idle-timeout", "1s", "say done")
	if res.Code != 3 {
		t.Fatalf("exit %d, want 3: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	fin := e2etest.LastFinished(t, evs)
	if fin.Reason != event.ReasonProvider || !strings.Contains(fin.Detail, "the provider stalled 2 times") {
		t.Errorf("final = %+v, want reason provider saying it stalled twice", fin)
	}
	retries := e2etest.OfType(evs, event.Retry)
	if len(retries) != 1 {
		t.Fatalf("%d retry events, want 1 (a stall is retried once)", len(retries))
	}
	var r event.RetryData
	retries[0].Decode(&r)
	if want := "no data from the model for 1s (--model-idle-timeout)"; !strings.Contains(r.Error, want) {
		t.Errorf("retry event says %q, not why it retried (%q)", r.Error, want)
	}
	if n := e.Srv.RequestCount(); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}

	resumed := e.Run("resume", e2etest.DecodeRunID(t, res.Stdout), "--json")
	if resumed.Code != 0 {
		t.Fatalf("resume: exit %d: %s", resumed.Code, resumed.Stderr)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, resumed.Stdout)); fin.Status != "completed" || fin.Result != "Done." {
		t.Errorf("resumed run ended %+v, want completed", fin)
	}

	help := e.Run("run", "--help")
	for _, line := range strings.Split(help.Stdout, "\n") {
		if strings.Contains(line, "--model-call-timeout") && !strings.Contains(line, "default: 5m") {
			t.Errorf("--help: %s\nwant the default 5m", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(help.Stdout, "--model-call-timeout") {
		t.Errorf("agent run --help does not list --model-call-timeout:\n%s", help.Stdout)
	}
}
