package sandbox

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkSandboxedCommand times `sh -c true` three ways, interleaved so
// that a loaded machine weighs on each alike: unsandboxed, sandboxed
// through the helper server (Spawn: what bash and evidence commands do)
// and sandboxed with a helper per command (Start: MCP servers, and every
// command before the server). It reports the medians and what the
// sandbox adds to a command, in milliseconds and as a ratio.
func BenchmarkSandboxedCommand(b *testing.B) {
	ws := b.TempDir()
	s, err := New(Policy{Mode: WorkspaceWrite, Workspace: ws, Env: os.Environ()})
	if err != nil {
		b.Skip(err)
	}
	defer s.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	plain := func() {
		cmd := exec.Command("/bin/sh", "-c", "true")
		cmd.Dir = ws
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
	spawned := func() {
		c, err := s.Spawn([]string{"/bin/sh", "-c", "true"}, ws, null, null, null)
		if err != nil {
			b.Fatal(err)
		}
		if ws := c.Wait(); ws.ExitStatus() != 0 {
			b.Fatal(ws)
		}
	}
	started := func() {
		cmd := exec.Command("/bin/sh", "-c", "true")
		cmd.Dir = ws
		if err := s.Start(cmd); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	spawned() // the server starts once per run, not per command
	var tPlain, tSpawn, tStart []float64
	ms := func(f func()) float64 {
		began := time.Now()
		f()
		return float64(time.Since(began).Microseconds()) / 1000
	}
	b.ResetTimer()
	for range b.N {
		tPlain = append(tPlain, ms(plain))
		tSpawn = append(tSpawn, ms(spawned))
		tStart = append(tStart, ms(started))
	}
	b.StopTimer()
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	p, sp, st := median(tPlain), median(tSpawn), median(tStart)
	b.ReportMetric(p, "unsandboxed-ms")
	b.ReportMetric(sp, "server-ms")
	b.ReportMetric(st, "per-command-helper-ms")
	b.ReportMetric(sp-p, "server-added-ms")
	b.ReportMetric(st-p, "per-command-added-ms")
	b.ReportMetric(sp/p, "server/unsandboxed")
	b.ReportMetric(st/p, "per-command/unsandboxed")
	b.ReportMetric(0, "ns/op")
}
