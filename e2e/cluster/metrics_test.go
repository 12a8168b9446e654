package cluster

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"agent/config"
	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/store/pgtest"
)

// Runs that workers drive and no client of a gateway watches still count
// in that gateway's metrics: it reads their sessions at its next poll,
// once, rather than at every notification.
func TestClusterMetricsOfRunsNobodyWatches(t *testing.T) {
	t.Parallel()
	const runs = 3
	var turns []llmtest.Turn
	for range runs {
		turns = append(turns, llmtest.Turn{When: "hello", Text: "hi"})
	}
	e := e2etest.New(t, turns...)
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	withDB := func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, config.DatabaseEnv+"="+dsn) }
	gw := e.StartGatewayWith(withDB)
	worker := e.Command("worker", "--poll", "100ms")
	withDB(worker)
	worker.Stderr = e2etest.LogFile(t, "worker.stderr")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })

	var ids []string
	for range runs {
		var r api.RunStartResult
		if code := e2etest.HTTPJSON(t, "POST", "http://"+gw.Addr+"/v1/runs", `{"input":"hello"}`, &r); code != 202 {
			t.Fatalf("POST /v1/runs: %d", code)
		}
		ids = append(ids, r.RunID)
	}
	db := openCluster(t, dsn)
	e2etest.WaitFor(t, "every run to complete", func() bool {
		for _, id := range ids {
			if r, err := db.GetRun(context.Background(), id); err != nil || r.Status != event.StatusCompleted {
				return false
			}
		}
		return true
	})
	e2etest.WaitFor(t, "the runs' model calls in the gateway's /metrics", func() bool {
		return strings.Contains(metrics(t, gw.Addr), "agent_model_call_duration_seconds_count 3\n")
	})
}

// metrics is the gateway's GET /metrics.
func metrics(t *testing.T, addr string) string {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e2etest.GwToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, data)
	}
	return string(data)
}
