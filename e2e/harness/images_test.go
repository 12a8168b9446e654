package harness

import (
	"path/filepath"
	"slices"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// A harness phase's read_file of an image gives a model that sees images
// the image, as a single run's does.
func TestHarnessPhaseSeesAnImage(t *testing.T) {
	t.Parallel()
	e := e2etest.NewHarness(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":"sketch.png"}`)}},
		llmtest.Turn{Text: "A sketch; nothing to write."},
	)
	url := e2etest.WriteImage(t, filepath.Join(e.Workspace, "sketch.png"), "png", 12, 12)
	planPath := e.WritePlan(t, `{"objective":"Look","phases":[
		{"id":"look","title":"Look","instructions":"Look at sketch.png.","evidence":{"type":"none"}}]}`)
	res := e.Run("harness", "--json", "--model", "gpt-4o", "--plan-file", planPath)
	if res.Code != 0 {
		t.Fatalf("harness exit %d: %s", res.Code, res.Stderr)
	}
	if reqs := e.Srv.Requests(); len(reqs) != 2 || !slices.Equal(reqs[1].Images(), []string{url}) {
		t.Errorf("the phase's second request has %d images, want read_file's", len(reqs[len(reqs)-1].Images()))
	}
}
