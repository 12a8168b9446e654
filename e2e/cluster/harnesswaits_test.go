package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/supervisor"
)

// TestClusterHarnessPhaseWaits: a harness run on workers (its attempts
// queued, docs/SCHEMA.md#attempt_queue) with an approval rule. The phase
// that asks leaves a waiting result for the harness, as its child would;
// the other finishes, and the harness parks: the run waits, its worker
// slot is free. Answered through the store, as any channel answers, the
// run goes on on a worker: the same attempt continues where it stopped
// and the run completes.
func TestClusterHarnessPhaseWaits(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"Deploy and document","phases":[
		{"id":"deploy","instructions":"Deploy.","evidence":{"type":"programmatic","command":"test -e deployed"}},
		{"id":"docs","instructions":"Write docs.md.","evidence":{"type":"artifact","artifacts":["docs.md"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("deploy", e2etest.BashTurn("touch deployed"), llmtest.Turn{Text: "deployed"})...)
	turns = append(turns, e2etest.ForPhase("docs", e2etest.WriteTurn("docs.md", "# Docs\n"), llmtest.Turn{Text: "docs.md written"})...)
	e := e2etest.New(t, turns...)
	dsn, c, sid := e.SmallCluster(t)
	db := openCluster(t, dsn)
	ctx := context.Background()

	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "deploy and document",
		Options: api.RunOptions{Harness: true, Parallel: 2, Ask: []string{"bash(touch *)"}}})
	waitForLong(t, 60*time.Second, "the harness to park", func() bool {
		r, err := db.GetRun(ctx, run.RunID)
		return err == nil && r.Status == event.StatusWaiting
	})
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err == nil {
		t.Fatal("the bash call ran unapproved")
	}
	attempts, err := db.Attempts(ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, a := range attempts {
		status[fmt.Sprintf("%s/%d", a.PhaseID, a.Attempt)] = a.Status
	}
	if len(status) != 2 || status["deploy/1"] != event.StatusWaiting || status["docs/1"] != event.StatusPassed {
		t.Fatalf("attempts = %v, want deploy/1 waiting and docs/1 passed", status)
	}
	open, err := db.OpenWaits(ctx)
	if err != nil || len(open) != 1 || open[0].RunID != run.RunID || open[0].PhaseID != "deploy" {
		t.Fatalf("inbox = %+v, %v; want deploy's approval", open, err)
	}

	if _, err := supervisor.Answer(ctx, db, run.RunID, supervisor.Decision{Decide: supervisor.DecideAllow, Via: event.ViaGateway}); err != nil {
		t.Fatal(err)
	}
	waitForLong(t, 60*time.Second, "the harness to go on and complete", func() bool {
		r, err := db.GetRun(ctx, run.RunID)
		return err == nil && r.Status == event.StatusCompleted
	})
	attempts, err = db.Attempts(ctx, run.RunID)
	if err != nil || len(attempts) != 2 {
		t.Fatalf("attempts = %+v, %v; want one per phase", attempts, err)
	}
	for _, a := range attempts {
		if a.Attempt != 1 || a.Status != event.StatusPassed {
			t.Errorf("attempt %s/%d is %s, want 1 passed", a.PhaseID, a.Attempt, a.Status)
		}
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err != nil {
		t.Errorf("the approved call did not run: %v", err)
	}
}
