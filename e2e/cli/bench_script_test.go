package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
)

// TestBenchScriptRunsEveryBenchmark: scripts/bench.sh goes on past a
// failing benchmark, runs the rest, names the failures and exits 1; with
// none failing it exits 0. go and scripts/build.sh are stubs that log.
func TestBenchScriptRunsEveryBenchmark(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip(err)
	}
	script, err := os.ReadFile(filepath.Join(e2etest.Root(), "scripts", "bench.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, fail string // fail: a -bench pattern the fake go fails
		code       int
	}{
		{name: "one fails", fail: "BenchmarkHarnessPhaseOverhead", code: 1},
		{name: "first fails", fail: "BenchmarkRunOneTool$", code: 1},
		{name: "none fails", code: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			log := filepath.Join(dir, "go.log")
			write := func(name, body string) {
				t.Helper()
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write("scripts/bench.sh", string(script))
			write("scripts/build.sh", "#!/bin/sh\nmkdir -p bin\n")
			fail := tt.fail
			if fail == "" {
				fail = "no such benchmark"
			}
			write("fakebin/go", "#!/bin/sh\necho \"$*\" >> '"+log+"'\n"+
				"case \"$*\" in *'"+fail+"'*) echo FAIL; exit 3;; esac\necho ok\n")

			cmd := exec.Command("bash", filepath.Join(dir, "scripts", "bench.sh"))
			cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "fakebin")+string(filepath.ListSeparator)+os.Getenv("PATH"), "BENCH_SCHEDULER=1")
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tt.code {
				t.Errorf("exit %d, want %d\n%s", code, tt.code, out)
			}
			calls, _ := os.ReadFile(log)
			for _, want := range []string{"BenchmarkRunOneTool$", "BenchmarkRunOneToolTraced", "BenchmarkRunOneMCPTool", "BenchmarkACPPrompt", "BenchmarkMCP", "BenchmarkCompaction60Turns", "BenchmarkHarnessPhaseOverhead", "BenchmarkSubagentStart", "BenchmarkGatewayIdleRSS", "BenchmarkClusterWorkers", "BenchmarkClusterTakeover", "BenchmarkClusterHarness",
				"BenchmarkFanout", "BenchmarkEngine10kJobs", "-bench . -benchtime 200x ./store/ ./llm/",
				"BenchmarkStartup$", "BenchmarkSandboxedCommand$", "BenchmarkBashCalls$"} {
				if !strings.Contains(string(calls), want) {
					t.Errorf("%s was not run; go was called with:\n%s\noutput:\n%s", want, calls, out)
				}
			}
			if tt.code != 0 && !strings.Contains(string(out), "bench: 1 of 18 failed") {
				t.Errorf("no summary naming the failure:\n%s", out)
			}
			if tt.code == 0 && !strings.Contains(string(out), "bench: all 18 passed") {
				t.Errorf("no summary:\n%s", out)
			}
		})
	}
}
