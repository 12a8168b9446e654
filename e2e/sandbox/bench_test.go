package sandbox

import (
	"fmt"
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

// BenchmarkBashCalls measures what the sandbox adds to each bash call a
// user's run makes: `agent run --json` where the model makes 20 `true`
// calls, with --sandbox off and with the default sandbox, in turn, so a
// loaded machine weighs on both alike. It reports each one's median wall
// time and CPU (agent and every process it waited for), and per call what
// the sandbox adds, in milliseconds and as a ratio. Set AGENT_BIN to
// measure a built binary.
func BenchmarkBashCalls(b *testing.B) {
	const calls = 20
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = e2etest.Bin()
	}
	var turns []llmtest.Turn
	for i := range calls { // each its own, or the run stops them as repeats
		turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", fmt.Sprintf(`{"command":"true %d"}`, i))}})
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: append(turns, llmtest.Turn{Text: "Done."})})
	dir := b.TempDir()
	env := append(os.Environ(), "AGENT_HOME="+filepath.Join(dir, "home"), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=")
	modes := []string{"off", "workspace-write"}
	walls := make([][]float64, len(modes))
	cpus := make([][]float64, len(modes))
	b.ResetTimer()
	for range b.N {
		for i, mode := range modes {
			cmd := exec.Command(bin, "run", "--json", "--sandbox", mode, "--workspace", dir, "run true 20 times")
			cmd.Env = env
			began := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("--sandbox %s: %v\n%s", mode, err, out)
			}
			walls[i] = append(walls[i], float64(time.Since(began).Microseconds())/1000)
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpus[i] = append(cpus[i], float64((ru.Utime.Nano()+ru.Stime.Nano())/1000)/1000)
		}
	}
	b.StopTimer()
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	off, on := median(walls[0]), median(walls[1])
	offCPU, onCPU := median(cpus[0]), median(cpus[1])
	b.ReportMetric(off, "off-run-ms")
	b.ReportMetric(on, "sandboxed-run-ms")
	b.ReportMetric(on/off, "sandboxed/off-wall")
	b.ReportMetric((on-off)/calls, "added-wall-ms/call")
	b.ReportMetric(offCPU, "off-run-cpu-ms")
	b.ReportMetric(onCPU, "sandboxed-run-cpu-ms")
	b.ReportMetric((onCPU-offCPU)/calls, "added-cpu-ms/call")
	b.ReportMetric(0, "ns/op")
}
