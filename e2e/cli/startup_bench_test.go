package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// BenchmarkStartup measures agent's start against a floor: a static cgo
// binary with SQLite inside that writes a row to a database in memory and
// says hello (testdata/floor, built here as scripts/build.sh builds agent).
// Each iteration runs, in turn, the floor, `agent version` and `agent run
// --json` making one write_file call against an instant fake model, so a
// loaded machine weighs on all three alike. It reports each one's median
// wall time and minor page faults, their ratios to the floor's, and each
// one's median peak RSS (measured on untimed runs, as BenchmarkRunOneTool
// does). Set AGENT_BIN to measure a built binary.
func BenchmarkStartup(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	dir := b.TempDir()
	floor := filepath.Join(dir, "floor")
	build := exec.Command("go", "build", "-trimpath", "-tags", "osusergo,netgo",
		"-ldflags", "-s -w -linkmode external -extldflags -static", "-o", floor, "./testdata/floor")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the floor program: %v\n%s", err, out)
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: json.RawMessage(`{"path":"out.txt","content":"hello\n"}`)}}},
		{Text: "Done."},
	}})
	env := append(os.Environ(), "AGENT_HOME="+filepath.Join(dir, "home"), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=")
	commands := []struct {
		name string
		argv []string
	}{
		{"floor", []string{floor}},
		{"version", []string{bin, "version"}},
		{"run", []string{bin, "run", "--json", "--workspace", dir, "write out.txt"}},
	}
	e2etest.ReapOrphans(b)
	walls := make([][]float64, len(commands))
	faults := make([][]float64, len(commands))
	b.ResetTimer()
	for range b.N {
		for i, c := range commands {
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Env = env
			began := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			walls[i] = append(walls[i], float64(time.Since(began).Microseconds())/1000)
			faults[i] = append(faults[i], float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Minflt))
		}
	}
	b.StopTimer()
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	for i, c := range commands {
		var peaks []float64
		for range max(b.N/2, 3) {
			kib, out, err := e2etest.PeakRSS(env, c.argv[0], c.argv[1:]...)
			if err != nil {
				b.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			peaks = append(peaks, float64(kib)/1024)
		}
		b.ReportMetric(median(walls[i]), c.name+"-ms")
		b.ReportMetric(median(faults[i]), c.name+"-faults")
		b.ReportMetric(median(peaks), c.name+"-rss-MiB")
		if i > 0 {
			b.ReportMetric(median(walls[i])/median(walls[0]), c.name+"/floor-wall")
			b.ReportMetric(median(faults[i])/median(faults[0]), c.name+"/floor-faults")
		}
	}
	b.ReportMetric(0, "ns/op")
}
