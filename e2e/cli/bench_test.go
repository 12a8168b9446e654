package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
	"agent/telemetry/telemetrytest"
)

// BenchmarkRunOneTool measures what a user waits for: `agent run --json`
// making one write_file call against an instant local fake model, from
// exec to exit, and agent's own peak RSS. Set AGENT_BIN to measure a
// built binary (scripts/bench.sh does, with bin/agent); otherwise the
// tests' build of agent (e2etest.Main) stands in for it.
//
// The wall times come from b.N runs started directly. The peak RSS comes
// from b.N more, untimed, started through peakRSS: the ru_maxrss of a
// direct child is at least this test process's own peak (17.5 MB even for
// /bin/true), so it says nothing about agent. It reports the median and
// the largest of the runs' peaks, in MiB, and logs how they were measured.
func BenchmarkRunOneTool(b *testing.B) {
	benchRunOneTool(b, llmtest.Call{Name: "write_file", Arguments: json.RawMessage(`{"path":"out.txt","content":"hello\n"}`)}, "")
}

// BenchmarkRunOneMCPTool is BenchmarkRunOneTool with one stdio MCP server
// configured (the SDK test server, mcptest-server: this test binary)
// and the tool call going to it: against BenchmarkRunOneTool it is what
// starting a server, listing its tools, one call and stopping it add.
func BenchmarkRunOneMCPTool(b *testing.B) {
	benchRunOneTool(b, llmtest.Call{Name: "mcp__tracker__echo", Arguments: json.RawMessage(`{"text":"hello"}`)},
		"[mcp_servers.tracker]\ncommand = \"mcptest-server\"\n")
}

// BenchmarkRunOneToolTraced is BenchmarkRunOneTool with
// OTEL_EXPORTER_OTLP_ENDPOINT set to a collector on 127.0.0.1
// (telemetrytest): against BenchmarkRunOneTool it is what building the
// run's trace and exporting it before exit add.
func BenchmarkRunOneToolTraced(b *testing.B) {
	c := telemetrytest.Start(b)
	benchRunOneTool(b, llmtest.Call{Name: "write_file", Arguments: json.RawMessage(`{"path":"out.txt","content":"hello\n"}`)}, "",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+c.URL())
	if got, want := len(c.Requests()), 2*b.N; got != want { // timed runs, then the RSS runs
		b.Fatalf("the collector got %d traces, want %d", got, want)
	}
}

// benchRunOneTool times agent run --json where the model makes one tool
// call, with config.toml holding cfg and extra set in the environment,
// and measures its peak RSS.
func benchRunOneTool(b *testing.B, toolCall llmtest.Call, cfg string, extra ...string) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{toolCall}},
		{Text: "Done."},
	}})
	dir := b.TempDir()
	home := filepath.Join(dir, "home")
	if cfg != "" {
		if err := os.MkdirAll(home, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	env := append(os.Environ(),
		"AGENT_HOME="+home,
		"OPENAI_BASE_URL="+srv.URL(),
		"OPENAI_API_KEY=",
	)
	env = append(env, extra...)
	args := []string{"run", "--json", "--workspace", dir, "write out.txt"}
	e2etest.ReapOrphans(b)
	var walls []time.Duration
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("agent run: %v\n%s", err, out)
		}
		walls = append(walls, time.Since(began))
	}
	b.StopTimer()
	peaks := make([]int64, 0, b.N) // KiB
	for range b.N {
		kib, out, err := e2etest.PeakRSS(env, bin, args...)
		if err != nil {
			b.Fatalf("agent run: %v\n%s", err, out)
		}
		peaks = append(peaks, kib)
	}
	slices.Sort(walls)
	slices.Sort(peaks)
	b.ReportMetric(float64(walls[len(walls)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(walls[len(walls)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(float64(peaks[len(peaks)/2])/1024, "peak-rss-median-MiB")
	b.ReportMetric(float64(peaks[len(peaks)-1])/1024, "peak-rss-max-MiB")
	b.Logf("peak RSS of %s over %d runs: median %.1f MiB, max %.1f MiB; measured as "+e2etest.PeakRSSMethod,
		filepath.Base(bin), len(peaks), float64(peaks[len(peaks)/2])/1024, float64(peaks[len(peaks)-1])/1024, e2etest.SelfPeakMiB())
}

// BenchmarkHarnessPhaseOverhead measures what the harness itself costs per
// phase: a 20-phase plan whose phases each get an instant one-message
// answer from the fake model, so the time is spawning `agent runner`,
// sending the spec, relaying and persisting events, verifying artifact
// evidence and checkpointing. Reports the median per-phase time over runs.
func BenchmarkHarnessPhaseOverhead(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "done"}}})
	dir := b.TempDir()
	const phases = 20
	var plan strings.Builder
	plan.WriteString(`{"objective":"bench","phases":[`)
	for i := range phases {
		if i > 0 {
			plan.WriteString(",")
		}
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf(`"p%d"`, i-1)
		}
		fmt.Fprintf(&plan, `{"id":"p%d","instructions":"say done","depends_on":[%s],"evidence":{"type":"artifact","artifacts":["seed.txt"]}}`, i, dep)
	}
	plan.WriteString("]}")
	planPath := filepath.Join(dir, "mission.json")
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(planPath, []byte(plan.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "seed.txt"), []byte("seed\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "AGENT_HOME="+filepath.Join(dir, "home"), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=")
	var perPhase []time.Duration
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(bin, "harness", "--json", "--workspace", ws, "--plan-file", planPath)
		cmd.Env = env
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("agent harness: %v\n%s", err, out)
		}
		perPhase = append(perPhase, time.Since(began)/phases)
	}
	b.StopTimer()
	slices.Sort(perPhase)
	b.ReportMetric(float64(perPhase[len(perPhase)/2].Microseconds())/1000, "median-ms/phase")
}

// BenchmarkCompaction60Turns runs a 60-turn task that reads a 2.5 KB file
// per turn, without compaction and with --context-window 8000, and prints
// the prompt tokens of every 10th request (the growth curve) and what the
// run took. The difference in time is what compaction adds (its summary
// requests are instant here, as every model reply is).
func BenchmarkCompaction60Turns(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	for _, mode := range []struct{ name, window string }{{"no-compaction", ""}, {"window-8000", "8000"}} {
		b.Run(mode.name, func(b *testing.B) {
			var took time.Duration
			var curve []string
			for range b.N {
				dir := b.TempDir()
				var turns []llmtest.Turn
				for i := 1; i <= 60; i++ {
					body := fmt.Sprintf("marker %d\n%s\n", i, strings.Repeat("x", 2500))
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("big-%d.txt", i)), []byte(body), 0o644); err != nil {
						b.Fatal(err)
					}
					turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "read_file", Arguments: json.RawMessage(fmt.Sprintf(`{"path":"big-%d.txt"}`, i))}}})
				}
				srv := llmtest.NewServer(b, llmtest.Script{Turns: append(turns, llmtest.Turn{Text: "done"}),
					Standing: []llmtest.Turn{{When: "You are compacting the conversation", Text: "SUMMARY: read the files in order."}}})
				args := []string{"run", "--json", "--max-turns", "70", "--workspace", dir}
				if mode.window != "" {
					args = append(args, "--context-window", mode.window)
				} else {
					args = append(args, "--compact", "off")
				}
				cmd := exec.Command(bin, append(args, "read the files")...)
				cmd.Env = append(os.Environ(), "AGENT_HOME="+filepath.Join(dir, "home"), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=")
				began := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("agent run: %v\n%s", err, out)
				}
				took += time.Since(began)
				curve = curve[:0]
				n := 0
				for _, r := range srv.Requests() {
					if strings.Contains(string(r.Body), "You are compacting the conversation") {
						continue
					}
					n++
					if n%10 == 0 || n == 1 {
						curve = append(curve, fmt.Sprintf("turn %d: %d", n, len(r.Body)/4))
					}
				}
			}
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/run")
			b.Logf("%s: prompt tokens sent (bytes/4) — %s", mode.name, strings.Join(curve, ", "))
		})
	}
}
