package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/config"
	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/store/pgtest"
	"agent/supervisor"
)

// TestClusterWaitAnsweredElsewhere: on PostgreSQL, a run waits for an
// approval on one worker, which frees its slot (and is then killed: it
// holds nothing); the answer comes through another gateway; a different
// worker continues the run where it stopped. Then a run nobody answers
// goes on at its deadline on a worker, denied by the timeout.
func TestClusterWaitAnsweredElsewhere(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: "deploy", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo deployed >> deploys"}`)}},
		llmtest.Turn{When: "deploy", Text: "Deployed."},
		llmtest.Turn{When: "late", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"touch late"}`)}},
		llmtest.Turn{When: "late", Text: "Nobody approved."},
	)
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	env := func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, config.DatabaseEnv+"="+dsn) }
	gwA, gwB := e.StartGatewayWith(env), e.StartGatewayWith(env)
	worker := func(name string) (*exec.Cmd, string) {
		cmd := e.Command("worker", "--poll", "100ms")
		env(cmd)
		logf := e2etest.LogFile(t, name+".stderr")
		cmd.Stderr = logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, logf.Name()
	}
	first, _ := worker("worker1")
	a, b := e2etest.GwDial(t, gwA.Addr), e2etest.GwDial(t, gwB.Addr)
	sid := e2etest.GwCall[api.SessionInfo](t, a, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, a, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "deploy it",
		Options: api.RunOptions{Ask: []string{"bash(echo *)"}}})
	waiting, w := e2etest.GwWaiting(t, a, run.RunID, 0)
	db := openCluster(t, dsn)
	ctx := context.Background()
	e2etest.WaitUntil(t, 30*time.Second, "the waiting run to be let go by its worker", func() bool {
		r, err := db.GetRun(ctx, run.RunID)
		return err == nil && r.LeaseOwner == "" && r.Status == event.StatusWaiting
	})
	if info := e2etest.GwCall[api.RunInfo](t, b, api.MethodRunGet, api.RunParams{RunID: run.RunID}); info.Status != event.StatusWaiting {
		t.Errorf("the other gateway says %s, want waiting", info.Status)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	_, secondLog := worker("worker2")

	began := time.Now()
	info, code := e2etest.GwAnswer(t, b, api.WaitAnswerParams{RunID: run.RunID, WaitID: w.WaitID, Decision: supervisor.DecideAllow})
	if code != "" || info.Resolution.Via != event.ViaGateway {
		t.Fatalf("answer through the other gateway: %s %+v", code, info)
	}
	next := e2etest.GwFrame(t, a, run.RunID, event.RunStarted, waiting.Seq)
	t.Logf("from the answer (gateway B) to the run's next event on a worker: %s as stamped, %s seen through gateway A", next.TS.Sub(began), time.Since(began))
	if end := e2etest.LastFrame(e2etest.GwWait(t, a, run.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("the run ended %s", end.Event)
	}
	if data, _ := os.ReadFile(filepath.Join(e.Workspace, "deploys")); string(data) != "deployed\n" {
		t.Errorf("deploys = %q, want the approved call once", data)
	}
	if logged, _ := os.ReadFile(secondLog); !strings.Contains(string(logged), run.RunID) {
		t.Errorf("the second worker's log does not name the run it continued (seq %d):\n%s", next.Seq, logged)
	}

	late := e2etest.GwCall[api.RunStartResult](t, b, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "too late",
		Options: api.RunOptions{Ask: []string{"bash"}, AskTimeout: supervisor.Duration(2 * time.Second)}})
	e2etest.GwWaiting(t, a, late.RunID, 0)
	if end := e2etest.LastFrame(e2etest.GwWait(t, a, late.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("the unanswered run ended %s", end.Event)
	}
	if !e2etest.ModelWasTold(e.Srv, "denied (timeout)") {
		t.Error("the model was not told the call was denied by the timeout")
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "late")); err == nil {
		t.Error("the unapproved call ran")
	}
}
