package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// TestTerminalTmuxMCPProgressAndQuestion: at a real terminal, an MCP
// call's progress shows on its line (the spinner's), with the call's
// clock; a question its server asks while a call runs (elicitation) is
// asked inline, and the answer reaches the server.
func TestTerminalTmuxMCPProgressAndQuestion(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	// The gate is where the server, in its sandbox, may read: by its log.
	gate := filepath.Join(filepath.Dir(e.WithMCP(t, "")), "gate")
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__steps", `{"n":2,"ms":10,"gate":"`+gate+`"}`)}},
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__ask", `{"question":"Which colour should the button be?"}`)}},
		{Text: "Blue it is."},
	}})
	capture, keys := tmuxSession(t, shellCommand(e, "run", "--allow-tools", "mcp__tracker", "paint the button"))
	progress := regexp.MustCompile(`mcp__tracker__steps [12]/2 step [12] · gate=`)
	waitScreen(t, "the progress on the call's line", capture, progress.MatchString)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitScreen(t, "the question", capture, func(s string) bool {
		return strings.Contains(s, "? Which colour should the button be? (asked while mcp__tracker__ask runs)") && strings.HasSuffix(strings.TrimSpace(s), "\n>")
	})
	keys("blue", "Enter")
	s := waitScreen(t, "the end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(s, "EXIT=0") || !strings.Contains(s, "✓ mcp__tracker__ask") || !strings.Contains(s, "Blue it is.") {
		t.Errorf("the screen at the end:\n%s", s)
	}
	if !e2etest.ModelWasTold(e.Srv, "the person answered: blue") {
		t.Error("the model was not told the answer the server got")
	}
}
