package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"agent/llm/llmtest"
)

// BenchmarkRunOneTool measures what a user waits for: `agent run --json`
// making one write_file call against an instant local fake model, from
// exec to exit, and the process's peak RSS. Set AGENT_BIN to measure a
// built binary (scripts/bench.sh does, with bin/agent); otherwise the test
// binary stands in for it.
func BenchmarkRunOneTool(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: json.RawMessage(`{"path":"out.txt","content":"hello\n"}`)}}},
		{Text: "Wrote out.txt."},
	}})
	dir := b.TempDir()
	env := append(os.Environ(),
		"AGENT_HOME="+filepath.Join(dir, "home"),
		"OPENAI_BASE_URL="+srv.URL(),
		"OPENAI_API_KEY=",
	)
	var walls []time.Duration
	var peakKB int64
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(bin, "run", "--json", "--workspace", dir, "write out.txt")
		cmd.Env = env
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("agent run: %v\n%s", err, out)
		}
		walls = append(walls, time.Since(began))
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			peakKB = max(peakKB, ru.Maxrss)
		}
	}
	b.StopTimer()
	slices.Sort(walls)
	b.ReportMetric(float64(walls[len(walls)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(walls[len(walls)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(float64(peakKB)/1024, "peak-rss-MB")
}
