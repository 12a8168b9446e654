package mcp

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
	"agent/vision"
)

// An MCP tool's image content (the test server's read_media_file, which
// answers as the reference filesystem server does: the image, and its
// base64 again as structured content) reaches a vision model as an image
// part after the tool result, which names it; a model without vision
// reads one line about it. Neither is sent the image as text.
func TestMCPImageReachesTheModelAsAnImage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model   string
		vision  bool
		toolMsg string
	}{
		{"gpt-4o", true, "PNG image, 48×32, %s (shown in the next message)"},
		{"test-model", false, "PNG image, 48×32, %s; this model cannot see images"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			e := e2etest.New(t)
			photo := filepath.Join(e.Workspace, "photo.png")
			url := e2etest.WriteImage(t, photo, "png", 48, 32)
			e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
				{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__read_media_file", fmt.Sprintf(`{"path":%q}`, photo))}},
				{Text: "A gradient."},
			}})
			e.WithMCP(t, "")
			res := e.Run("run", "--json", "--model", tc.model, "what is in photo.png?")
			if res.Code != 0 {
				t.Fatalf("exit %d: %s", res.Code, res.Stderr)
			}
			req := e.Srv.Requests()[1]
			msgs := req.Messages()
			var tool llmtest.Message
			for _, m := range msgs {
				if m.Role == "tool" {
					tool = m
				}
			}
			images := req.Images()
			fi, err := os.Stat(photo)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(tc.toolMsg, vision.Size(fi.Size())); tool.Content != want {
				t.Errorf("the tool result reached the model as %q, want %q", tool.Content, want)
			}
			if tc.vision && !slices.Equal(images, []string{url}) {
				t.Errorf("the request has %d images, want the tool's: %.100q", len(images), images)
			}
			b64 := url[strings.Index(url, ",")+1:]
			if !tc.vision && (len(images) > 0 || strings.Contains(string(req.Body), b64[:40])) {
				t.Errorf("a model without vision was sent the image")
			}
			if strings.Count(string(req.Body), b64[:40]) > 1 {
				t.Errorf("the image reached the model twice (as structured content too)")
			}
		})
	}
}
