package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// BenchmarkSubagentStart measures what a task call costs before its
// subagent does anything: from the parent's tool.started of the call (as
// stored) to the sub-run's first model request arriving at an instant
// local fake model. It is creating the sub-run, its run.started, spawning
// `agent runner` (the same binary) with its spec, the child building its
// tools and sandbox, and its first request. Reports the median and p90
// over b.N runs of `agent run --json` with one task call each. AGENT_BIN
// measures a built binary, as for BenchmarkRunOneTool.
func BenchmarkSubagentStart(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	const sub = "SUBAGENT-BENCH"
	task, _ := json.Marshal(map[string]string{"description": "answer", "prompt": sub + ": say done"})
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{{Name: "task", Arguments: task}}},
		{Text: "sub done"},
		{Text: "Done."},
	}})
	dir := b.TempDir()
	env := append(os.Environ(), "AGENT_HOME="+filepath.Join(dir, "home"), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=")
	e2etest.ReapOrphans(b)
	var starts []time.Duration
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(bin, "run", "--json", "--workspace", dir, "delegate it")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("agent run: %v\n%s", err, out)
		}
		b.StopTimer()
		var called time.Time
		dec := event.NewDecoder(strings.NewReader(string(out)))
		for {
			e, err := dec.Decode()
			if err != nil {
				break
			}
			if e.Type == event.ToolStarted && e.Subagent == "" {
				called = e.TS
			}
		}
		var asked time.Time
		for _, r := range srv.Requests() {
			if m := r.Messages(); len(m) == 2 && strings.Contains(m[1].Content, sub) {
				asked = r.At // the latest run's: requests are in arrival order
			}
		}
		if called.IsZero() || asked.IsZero() {
			b.Fatalf("no task call or no subagent request:\n%s", out)
		}
		starts = append(starts, asked.Sub(called))
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(starts)
	b.ReportMetric(float64(starts[len(starts)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(starts[len(starts)*9/10].Microseconds())/1000, "p90-ms")
}
