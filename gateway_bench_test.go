package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkGatewayIdleRSS starts `agent gateway` as a process, waits
// until /healthz answers, lets it settle and reports its resident memory
// (VmRSS, MB; the target is at most 30) and the time to become ready. Set
// AGENT_BIN to measure a built binary; otherwise the test binary, which
// carries the test packages too, stands in for it.
func BenchmarkGatewayIdleRSS(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	dir := b.TempDir()
	var rss, ready float64
	for b.Loop() {
		home := filepath.Join(dir, "home"+strconv.Itoa(int(time.Now().UnixNano())))
		cmd := exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--json")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "AGENT_HOME="+home, "AGENT_GATEWAY_TOKEN="+gwToken)
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
		req.Header.Set("Authorization", "Bearer "+gwToken)
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
		ready = float64(time.Since(began).Microseconds()) / 1000
		time.Sleep(500 * time.Millisecond) // idle
		rss = vmRSS(b, cmd.Process.Pid)
		cmd.Process.Kill()
		cmd.Wait()
	}
	b.ReportMetric(rss, "RSS-MB")
	b.ReportMetric(ready, "ready-ms")
}

func vmRSS(b *testing.B, pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
