package gateway

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
)

// BenchmarkGatewayIdleRSS starts `agent gateway` as a process, waits
// until /healthz answers, lets it settle and reports its resident memory
// and the time to become ready; the target is at most 30 MB. The memory is
// the gateway process's own, read from /proc/PID/status of that pid:
// VmRSS (idle-rss) and VmHWM (peak-rss), both of the address space made
// at its exec, so unlike its ru_maxrss they owe nothing to this test
// process. Each is the median over the runs, in MiB. Set AGENT_BIN to
// measure a built binary (scripts/bench.sh does, with bin/agent);
// otherwise the tests' build of agent stands in for it.
func BenchmarkGatewayIdleRSS(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	dir := b.TempDir()
	var rss, peak, ready []float64
	for b.Loop() {
		home := filepath.Join(dir, "home"+strconv.Itoa(int(time.Now().UnixNano())))
		cmd := exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--json")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "AGENT_HOME="+home, "AGENT_GATEWAY_TOKEN="+e2etest.GwToken)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		var hello struct{ Listen string }
		json.Unmarshal([]byte(line), &hello)
		req, _ := http.NewRequest("GET", "http://"+hello.Listen+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer "+e2etest.GwToken)
		for {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
		ready = append(ready, float64(time.Since(began).Microseconds())/1000)
		time.Sleep(500 * time.Millisecond) // idle
		now, hwm := e2etest.ProcStatusMiB(cmd.Process.Pid, "VmRSS:"), e2etest.ProcStatusMiB(cmd.Process.Pid, "VmHWM:")
		cmd.Process.Kill()
		cmd.Wait()
		if now == 0 || hwm == 0 {
			b.Fatalf("no VmRSS or VmHWM in /proc/%d/status", cmd.Process.Pid)
		}
		rss, peak = append(rss, now), append(peak, hwm)
	}
	b.ReportMetric(median(rss), "idle-rss-MiB")
	b.ReportMetric(median(peak), "peak-rss-MiB")
	b.ReportMetric(median(ready), "ready-ms")
	b.Logf("gateway RSS over %d runs: idle (VmRSS) median %.1f MiB, max %.1f MiB; peak (VmHWM) median %.1f MiB, max %.1f MiB; read from /proc/PID/status of the gateway process",
		len(rss), median(rss), slices.Max(rss), median(peak), slices.Max(peak))
}

// median returns the middle of xs (the upper one of two); xs is sorted.
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
