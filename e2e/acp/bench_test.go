package acp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"agent/llm/llmtest"
)

// BenchmarkACPPrompt measures what an editor waits for: one
// session/prompt whose run makes one write_file call against an instant
// local fake model and answers, from the request to the prompt's answer,
// through one agent acp process (a new session each time, so the
// session's history does not grow). Every message is schema-checked as in
// the tests. Set AGENT_BIN to measure a built binary.
func BenchmarkACPPrompt(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: json.RawMessage(`{"path":"out.txt","content":"hello\n"}`)}}},
		{Text: "Done."},
	}})
	dir := b.TempDir()
	cmd := exec.Command(bin, "acp")
	cmd.Env = append(os.Environ(), "AGENT_HOME="+filepath.Join(dir, "home"), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=")
	c := connect(b, cmd)
	ctx := context.Background()
	if _, err := c.conn.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
		b.Fatal(err)
	}
	var walls []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: dir, McpServers: []sdk.McpServer{}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		began := time.Now()
		resp, err := c.prompt(ctx, s.SessionId, "write out.txt")
		if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
			b.Fatalf("prompt: %v, %v", resp.StopReason, err)
		}
		walls = append(walls, time.Since(began))
	}
	b.StopTimer()
	slices.Sort(walls)
	b.ReportMetric(float64(walls[len(walls)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(walls[len(walls)*9/10].Microseconds())/1000, "p90-ms")
}
