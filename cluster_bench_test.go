package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"agent/config"
	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
	"agent/store/pgtest"
)

// BenchmarkClusterWorkers measures runs per second through one gateway
// and 1, 2 and 4 `agent worker` processes on PostgreSQL (pgtest's server,
// fsync off), against an instant fake model: each op is 40 one-turn runs,
// queued first, then driven.
func BenchmarkClusterWorkers(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	srv := llmtest.NewServer(b, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "done"}}})
	server := pgtest.Start(b)
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			const runs = 40
			var total time.Duration
			for b.Loop() {
				dsn := pgtest.Database(b, server, "")
				env := append(os.Environ(), "AGENT_HOME="+b.TempDir(), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=",
					"AGENT_MODEL=test-model", config.DatabaseEnv+"="+dsn, "AGENT_GATEWAY_TOKEN="+gwToken)
				addr := benchGateway(b, bin, env)
				var ids []string
				for i := range runs {
					ids = append(ids, benchStart(b, addr, fmt.Sprintf("run %d", i)))
				}
				db, err := store.Open(dsn)
				if err != nil {
					b.Fatal(err)
				}
				began := time.Now()
				for range workers {
					cmd := exec.Command(bin, "worker", "--concurrency", "2", "--poll", "100ms")
					cmd.Env = env
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				}
				for _, id := range ids {
					for {
						r, err := db.GetRun(context.Background(), id)
						if err == nil && r.Status != event.StatusRunning && r.Queue != store.QueueWaiting {
							if r.Status != event.StatusCompleted {
								b.Fatalf("run %s: %s %s", id, r.Status, r.Detail)
							}
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
				total += time.Since(began)
				db.Close()
			}
			b.ReportMetric(float64(runs*b.N)/total.Seconds(), "runs/s")
		})
	}
}

// benchGateway starts a gateway and returns its address.
func benchGateway(b *testing.B, bin string, env []string) string {
	cmd := exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--json")
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	var hello struct{ Listen string }
	if err := json.Unmarshal([]byte(line), &hello); err != nil {
		b.Fatal(err)
	}
	return hello.Listen
}

// benchStart starts a run in a new session and returns its id.
func benchStart(b *testing.B, addr, input string) string {
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/runs", strings.NewReader(`{"input":"`+input+`"}`))
	req.Header.Set("Authorization", "Bearer "+gwToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.RunID == "" {
		b.Fatalf("POST /v1/runs: %d %v", resp.StatusCode, err)
	}
	return r.RunID
}
