package mcp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// kill -9 mid-call, after a PreToolUse hook decided it: the resumed run
// runs the read-only MCP call again (readOnlyHint) as the hook decided,
// updatedInput included, without running the hook again. A matcher names
// the MCP tool as it is, mcp__SERVER__TOOL.
func TestHookDecisionSurvivesKill9(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__wait", `{"ms":60000}`)}},
		llmtest.Turn{Text: "Done."},
	)
	logPath := e.WithMCP(t, "")
	settings := e.WriteHooks(t, `{"hooks": {"PreToolUse": [{"matcher": "mcp__tracker__.*", "hooks": [{"type": "command",
  "command": "echo x >> $DIR/runs; jq -c '{hookSpecificOutput: {permissionDecision: \"allow\", updatedInput: {ms: 1500}}}'"}]}]}}`, nil)
	b := e.Start("run", "--json", "--ask", "mcp__tracker", "--settings", settings, "look it up")
	runID := b.WaitEvent(t, event.ToolStarted).RunID
	e2etest.WaitFor(t, "the server to get the call", func() bool { return len(mcpCalls(t, logPath, "wait")) == 1 })
	b.Kill9(t)
	e2etest.WaitFor(t, "the orphaned server to exit", func() bool { return !serverAlive(logPath) })

	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d: %s", res.Code, res.Stderr)
	}
	if runs, _ := os.ReadFile(filepath.Join(filepath.Dir(settings), "runs")); string(runs) != "x\n" {
		t.Errorf("the PreToolUse hook ran %d times, want once", strings.Count(string(runs), "x"))
	}
	calls := mcpCalls(t, logPath, "wait")
	if len(calls) != 2 {
		t.Fatalf("%d calls, want the read-only call run again", len(calls))
	}
	for i, c := range calls {
		var args struct{ MS int }
		if json.Unmarshal(c.Args, &args) != nil || args.MS != 1500 {
			t.Errorf("call %d ran with %s, not the hook's updatedInput", i+1, c.Args)
		}
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if n := len(e2etest.HookRecords(t, evs)); n != 0 {
		t.Errorf("the resumed run recorded %d hook runs", n)
	}
	if n := len(e2etest.OfType(evs, event.RunWaiting)); n != 0 {
		t.Errorf("the resumed run waited %d times: the hook's allow holds", n)
	}
	if out := e2etest.ToolOutputs(evs)["mcp__tracker__wait"]; out != "looked it up" {
		t.Errorf("output %q", out)
	}
}
