package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/config"
	"agent/e2e/internal/e2etest"
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
					"AGENT_MODEL=test-model", config.DatabaseEnv+"="+dsn, "AGENT_GATEWAY_TOKEN="+e2etest.GwToken)
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
						if err == nil && r.Status != event.StatusRunning && r.Queue != event.StatusWaiting {
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
	cmd.Env, cmd.Dir = env, b.TempDir() // the runs' workspace
	var stderr strings.Builder
	cmd.Stderr = &stderr
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
		_ = cmd.Wait()
		b.Fatalf("the gateway did not start: %v\n%s", err, stderr.String())
	}
	var hello struct{ Listen string }
	if err := json.Unmarshal([]byte(line), &hello); err != nil {
		b.Fatal(err)
	}
	return hello.Listen
}

// benchStart starts a run in a new session and returns its id.
func benchStart(b *testing.B, addr, input string) string {
	return benchPost(b, addr, `{"input":"`+input+`"}`)
}

// benchPost POSTs body to /v1/runs and returns the run's id.
func benchPost(b *testing.B, addr, body string) string {
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/runs", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e2etest.GwToken)
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

// BenchmarkClusterTakeover measures the time from a worker's kill -9,
// while its run's tool runs, to another worker resuming the run (its
// second run.started), with AGENT_LEASE_TTL=2s and --poll 100ms:
//   - host=same: the dead worker was on this machine, so its process is
//     provably gone and the lease is taken at the next poll;
//   - host=other: it ran under another host name (a UTS namespace), as a
//     worker on another machine, so the lease must expire first.
func BenchmarkClusterTakeover(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	// Each run's task names its turns, so no run can take another's.
	var turns []llmtest.Turn
	for _, host := range []string{"same", "other"} {
		for i := range 100 {
			task := fmt.Sprintf("take-%s-%d", host, i)
			turns = append(turns,
				llmtest.Turn{When: task, ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"sleep 30"}`)}},
				llmtest.Turn{When: task, Text: "done"})
		}
	}
	srv := llmtest.NewServer(b, llmtest.Script{Turns: turns})
	server := pgtest.Start(b)
	for _, host := range []string{"same", "other"} {
		b.Run("host="+host, func(b *testing.B) {
			if _, err := exec.LookPath("unshare"); host == "other" && err != nil {
				b.Skip("unshare (util-linux) is missing")
			}
			var total time.Duration
			i := 0
			for b.Loop() {
				if i == 100 {
					b.Fatal("the fake model has turns for 100 takeovers; use a smaller -benchtime")
				}
				task := fmt.Sprintf("take-%s-%d", host, i)
				i++
				dsn := pgtest.Database(b, server, "")
				env := append(os.Environ(), "AGENT_HOME="+b.TempDir(), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=",
					"AGENT_MODEL=test-model", config.DatabaseEnv+"="+dsn, "AGENT_GATEWAY_TOKEN="+e2etest.GwToken, "AGENT_LEASE_TTL=2s")
				worker := func(argv ...string) *exec.Cmd {
					cmd := exec.Command(argv[0], argv[1:]...)
					cmd.Env, cmd.Dir = env, b.TempDir()
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
					return cmd
				}
				victimArgs := []string{bin, "worker", "--concurrency", "1", "--poll", "100ms"}
				if host == "other" {
					victimArgs = append([]string{"unshare", "--uts", "sh", "-c", `hostname elsewhere && exec "$0" "$@"`}, victimArgs...)
				}
				victim := worker(victimArgs...)
				addr := benchGateway(b, bin, env)
				id := benchStart(b, addr, task)
				db, err := store.Open(dsn)
				if err != nil {
					b.Fatal(err)
				}
				started := func() int {
					evs, _ := db.ListEvents(context.Background(), id, 0, 0)
					n := 0
					for _, e := range evs {
						if e.Type == event.RunStarted {
							n++
						}
						if e.Type == event.ToolStarted && n == 1 {
							n = 10 // the victim's tool runs
						}
					}
					return n
				}
				benchWait(b, "the victim to run its tool", func() bool { return started() >= 10 })
				worker(bin, "worker", "--concurrency", "1", "--poll", "100ms")
				time.Sleep(300 * time.Millisecond) // the taker is up and idle
				if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
					b.Fatal(err)
				}
				killed := time.Now()
				_ = victim.Wait() // reaped at once, as by its service manager
				benchWait(b, "another worker to resume the run", func() bool { return started() >= 11 })
				total += time.Since(killed)
				db.Close()
			}
			b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms-to-resume")
		})
	}
}

// benchWait polls cond every 5 ms for up to a minute.
func benchWait(b *testing.B, what string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
	}
}

// BenchmarkClusterHarness measures a harness run of four independent
// phases (--parallel 4), each a one-second bash call, through a gateway
// and 1, 2 and 4 workers with --concurrency 1 on PostgreSQL: the phase
// attempts spread over the workers, so the run takes about 4, 2 and 1 s
// of phase time. It reports the run's wall time and the mean time from a
// phase.started (the harness's worker queued the attempt) to the
// attempt's first event (another worker claimed it and its child began).
func BenchmarkClusterHarness(b *testing.B) {
	bin := os.Getenv("AGENT_BIN")
	if bin == "" {
		bin = "agent"
	}
	const phases = 4
	var specs []string
	standing := []llmtest.Turn{}
	for i := range phases {
		p := fmt.Sprintf("p%d", i)
		specs = append(specs, `{"id":"`+p+`","title":"`+p+`","instructions":"Work.","evidence":{"type":"programmatic","command":"true"}}`)
		standing = append(standing,
			llmtest.Turn{When: p + "-slept", Text: "done"},
			llmtest.Turn{When: e2etest.PhaseMarker(p), ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"sleep 1; echo `+p+`-slept"}`)}})
	}
	plan := json.RawMessage(`{"objective":"Four pieces","phases":[` + strings.Join(specs, ",") + `]}`)
	standing = append([]llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: plan}}}}, standing...)
	srv := llmtest.NewServer(b, llmtest.Script{Standing: standing})
	server := pgtest.Start(b)
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var total, dispatch time.Duration
			var attempts int
			for b.Loop() {
				dsn := pgtest.Database(b, server, "")
				env := append(os.Environ(), "AGENT_HOME="+b.TempDir(), "OPENAI_BASE_URL="+srv.URL(), "OPENAI_API_KEY=",
					"AGENT_MODEL=test-model", config.DatabaseEnv+"="+dsn, "AGENT_GATEWAY_TOKEN="+e2etest.GwToken)
				for range workers {
					cmd := exec.Command(bin, "worker", "--concurrency", "1", "--poll", "100ms")
					cmd.Env, cmd.Dir = env, b.TempDir()
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				}
				addr := benchGateway(b, bin, env)
				db, err := store.Open(dsn)
				if err != nil {
					b.Fatal(err)
				}
				began := time.Now()
				id := benchPost(b, addr, fmt.Sprintf(`{"input":"four pieces","options":{"harness":true,"parallel":%d}}`, phases))
				var r *store.Run
				benchWait(b, "the harness to end", func() bool {
					r, err = db.GetRun(context.Background(), id)
					return err == nil && r.Status != event.StatusRunning && r.Queue != event.StatusWaiting
				})
				total += time.Since(began)
				if r.Status != event.StatusCompleted {
					b.Fatalf("harness %s: %s", r.Status, r.Detail)
				}
				evs, err := db.ListEvents(context.Background(), id, 0, 0)
				if err != nil {
					b.Fatal(err)
				}
				queued := map[string]time.Time{}
				for _, e := range evs {
					key := fmt.Sprintf("%s/%d", e.PhaseID, e.Attempt)
					switch {
					case e.Type == event.PhaseStarted:
						queued[key] = e.TS
					case !queued[key].IsZero() && !strings.HasPrefix(e.Type, "phase."):
						dispatch += e.TS.Sub(queued[key])
						attempts++
						delete(queued, key)
					}
				}
				db.Close()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/harness")
			b.ReportMetric(float64(dispatch.Milliseconds())/float64(max(attempts, 1)), "ms-to-claim")
		})
	}
}
