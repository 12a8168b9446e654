package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// A harness's phases have the run's hooks: each phase's `agent runner`
// child gets the --settings file through its spec, and its hook runs are
// journaled with the phase. A phase's prompt is agent's own: SessionStart
// adds to it, UserPromptSubmit (which refuses everything here) is not
// asked.
func TestHarnessPhasesRunHooks(t *testing.T) {
	t.Parallel()
	e := e2etest.NewHarness(t, e2etest.ForPhase("write",
		e2etest.BashTurn("rm -rf docs"),
		e2etest.WriteTurn("out.txt", "result   \n"),
		llmtest.Turn{Text: "Wrote out.txt."},
	)...)
	if err := os.MkdirAll(filepath.Join(e.Workspace, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	settings := e.WriteHooks(t, `{"hooks": {
  "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "if jq -r .tool_input.command | grep -q 'rm -rf'; then echo 'Blocked: rm -rf' >&2; exit 2; fi"}]}],
  "PostToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": "f=$(jq -r .tool_input.file_path); sed -i 's/[[:space:]]*$//' \"$f\""}]}],
  "SessionStart": [{"hooks": [{"type": "command", "command": "echo 'Context from a SessionStart hook.'"}]}],
  "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo 'no prompts today' >&2; exit 2"}]}]
}}`, nil)
	plan := e.WritePlan(t, `{"objective":"Write it","phases":[
		{"id":"write","instructions":"Write out.txt.","evidence":{"type":"artifact","artifacts":["out.txt"]}}]}`)
	res := e.Run("harness", "--json", "--plan-file", plan, "--settings", settings)
	if res.Code != 0 {
		t.Fatalf("exit %d; stderr %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "docs")); err != nil {
		t.Error("the phase's rm -rf ran")
	}
	if got, _ := os.ReadFile(filepath.Join(e.Workspace, "out.txt")); string(got) != "result\n" {
		t.Errorf("out.txt = %q: the PostToolUse hook did not run in the phase", got)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	var phases []string
	for _, ev := range evs {
		if ev.Type == "hook.completed" {
			phases = append(phases, ev.PhaseID)
		}
	}
	if strings.Join(phases, " ") != "write write write" {
		t.Errorf("hook.completed of phases %v, want SessionStart, PreToolUse and PostToolUse of phase write", phases)
	}
	if first := e.Srv.Requests()[0].Body; !strings.Contains(string(first), "Context from a SessionStart hook.") {
		t.Errorf("the phase's first request has no SessionStart context: %s", first)
	}
}
