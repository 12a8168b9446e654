package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// TestRunNotifiesBeforeItExits: `agent run` tells config.toml's [[notify]]
// channels itself, before it exits, when no gateway is there to: that it
// waits (with how to answer, and a one-decision link as public_url says),
// and, a second run, that it completed. Its --json stream still ends with
// run.waiting.
func TestRunNotifiesBeforeItExits(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"touch deployed"}`)}},
		llmtest.Turn{Text: "Nothing to do."})
	hook := e2etest.NewWebhook(t)
	e.WriteConfig(fmt.Sprintf(`public_url = "https://agent.example.com"
[approvals]
ask = ["bash"]

[[notify]]
on = ["waiting", "completed"]
webhook = %q
`, hook.URL))

	res := e.Run("run", "--json", "deploy")
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6 (waiting); stderr: %s", res.Code, res.Stderr)
	}
	runID := e2etest.DecodeRunID(t, res.Stdout)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	var last event.Event
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Type != event.RunWaiting {
		t.Fatalf("the stream ends with %q, want run.waiting", lines[len(lines)-1])
	}
	msgs := hook.Messages(t)
	if len(msgs) != 1 {
		t.Fatalf("the webhook got %d notifications by the time agent run exited, want 1", len(msgs))
	}
	text, _ := msgs[0]["text"].(string)
	link, _ := msgs[0]["link"].(string)
	if msgs[0]["notification"] != "waiting" || msgs[0]["run_id"] != runID ||
		!strings.Contains(text, "approval of bash") || !strings.Contains(text, "agent approve "+runID) ||
		!strings.HasPrefix(link, "https://agent.example.com/w/") {
		t.Fatalf("notification: %v", msgs[0])
	}

	if show := e.Run("runs", "show", runID); !strings.Contains(show.Stdout, "waiting   → webhook http://127.0.0.1") ||
		!strings.Contains(show.Stdout, "/…: done") {
		t.Errorf("runs show does not list the notification, without the webhook's path:\n%s", show.Stdout)
	}

	if res := e.Run("run", "--json", "check"); res.Code != 0 {
		t.Fatalf("second run: exit %d: %s", res.Code, res.Stderr)
	}
	if msgs := hook.Messages(t); len(msgs) != 2 || msgs[1]["notification"] != "completed" {
		t.Fatalf("after the second run the webhook has %v", msgs)
	}
}
