package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/config"
	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/store"
	"agent/store/pgtest"
)

// TestClusterHarnessAttempts: workers claim harness phase attempts
// (README.md#a-small-cluster) on a real PostgreSQL server: a harness
// run's two parallel phases run on other workers than the one driving
// the harness; the worker running one attempt is kill -9'd (the harness
// takes the attempt back and another worker runs it again), then the
// worker driving the harness is kill -9'd too (another takes the harness
// over and runs both phases again). The harness completes, each phase's email is sent once (a real
// SMTP server), neither lost attempt counts against max_attempts, and the
// session's stream is gapless and the same on the gateway as in the store.
func TestClusterHarnessAttempts(t *testing.T) {
	t.Parallel()
	phases := []string{"alpha", "beta"}
	planArgs := json.RawMessage(`{"objective":"Two reports","phases":[
		{"id":"alpha","title":"Alpha","instructions":"Mail the first report and write it.","max_attempts":1,
		 "evidence":{"type":"programmatic","command":"grep -q report-alpha alpha.md"}},
		{"id":"beta","title":"Beta","instructions":"Mail the second report and write it.","max_attempts":1,
		 "evidence":{"type":"programmatic","command":"grep -q report-beta beta.md"}}]}`)
	// Standing turns, the first whose text a request holds: each attempt
	// of a phase mails, then waits in bash until the test releases it,
	// then mails again (a receipt: not sent again) and writes its report.
	standing := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	for _, p := range phases {
		email, _ := json.Marshal(map[string]string{"to": p + "@example.com", "subject": "report " + p, "body": "the " + p + " report"})
		// A call id is unique within a turn's conversation; an attempt is
		// a conversation of its own.
		called := func(id, name string, args json.RawMessage) llmtest.Call {
			return llmtest.Call{ID: p + "-" + id, Name: name, Arguments: args}
		}
		standing = append(standing,
			llmtest.Turn{When: p + "-written", Text: "done " + p},
			llmtest.Turn{When: p + "-released", ToolCalls: []llmtest.Call{called("mail-again", "send_email", email),
				called("write", "bash", json.RawMessage(`{"command":"printf report-`+p+` > `+p+`.md; echo `+p+`-written"}`))}},
			llmtest.Turn{When: e2etest.PhaseMarker(p), ToolCalls: []llmtest.Call{called("mail", "send_email", email),
				called("wait", "bash", json.RawMessage(`{"command":"echo ran >> ran-`+p+`.txt; while [ ! -e release ]; do sleep 0.05; done; echo `+p+`-released"}`))}},
		)
	}
	e := e2etest.New(t)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Standing: standing})
	mail := e2etest.NewMailbox(t)
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	env := func(cmd *exec.Cmd) {
		cmd.Env = append(e.WithMail(cmd.Env, mail), config.DatabaseEnv+"="+dsn, "AGENT_LEASE_TTL=2s")
	}
	gw := e.StartGatewayWith(env)
	startWorker := func(name, concurrency string) *exec.Cmd {
		cmd := e.Command("worker", "--concurrency", concurrency, "--poll", "100ms")
		env(cmd)
		cmd.Stderr = e2etest.LogFile(t, name+".stderr")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	db := openCluster(t, dsn)
	ctx := context.Background()
	pidOf := func(owner string) int {
		_, pid, _ := store.OwnerProcess(owner)
		return pid
	}
	// ran counts the attempts of phase p whose child reached its bash call.
	ran := func(p string) int {
		data, _ := os.ReadFile(filepath.Join(e.Workspace, "ran-"+p+".txt"))
		return strings.Count(string(data), "\n")
	}
	// holderOf is the pid of the worker running a phase's attempt, once
	// its child waits in bash; 0 before.
	holderOf := func(runID, p string, attempt int) int {
		u, err := db.GetAttemptUnit(ctx, store.AttemptKey{RunID: runID, PhaseID: p, Attempt: attempt})
		if err != nil || u.State != event.StatusClaimed || ran(p) < attempt {
			return 0
		}
		return pidOf(u.Holder)
	}

	// Worker h alone drives the harness and takes one attempt.
	h := startWorker("worker-h", "1")
	c := e2etest.GwDial(t, gw.Addr)
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{
		SessionID: sid, Input: "write two reports", Options: api.RunOptions{Harness: true, Parallel: 2}})
	var onH, other string // the phase h runs, and the other
	waitForLong(t, 60*time.Second, "worker h to drive the harness and run one attempt", func() bool {
		for i, p := range phases {
			if holderOf(run.RunID, p, 1) == h.Process.Pid {
				onH, other = p, phases[1-i]
				return true
			}
		}
		return false
	})
	if r, err := db.GetRun(ctx, run.RunID); err != nil || pidOf(r.LeaseOwner) != h.Process.Pid {
		t.Fatalf("the harness is not driven by worker h: %+v %v", r, err)
	}

	// Two more workers; one takes the other attempt, and is killed.
	w1, w2 := startWorker("worker-1", "2"), startWorker("worker-2", "2")
	var victim, survivor *exec.Cmd
	waitForLong(t, 60*time.Second, "another worker to run the other phase", func() bool {
		switch holderOf(run.RunID, other, 1) {
		case w1.Process.Pid:
			victim, survivor = w1, w2
		case w2.Process.Pid:
			victim, survivor = w2, w1
		}
		return victim != nil
	})
	kill(victim)
	waitForLong(t, 60*time.Second, "the lost attempt to run again on the surviving worker", func() bool {
		return holderOf(run.RunID, other, 2) == survivor.Process.Pid
	})

	// Now the harness's own worker dies, with its attempt.
	kill(h)
	waitForLong(t, 60*time.Second, "the survivor to take the harness over and run both phases again", func() bool {
		r, err := db.GetRun(ctx, run.RunID)
		return err == nil && pidOf(r.LeaseOwner) == survivor.Process.Pid &&
			holderOf(run.RunID, onH, 2) == survivor.Process.Pid && holderOf(run.RunID, other, 3) == survivor.Process.Pid
	})
	if err := os.WriteFile(filepath.Join(e.Workspace, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitForLong(t, 60*time.Second, "the harness to end", func() bool {
		r, err := db.GetRun(ctx, run.RunID)
		return err == nil && r.Status != event.StatusRunning
	})

	r, _ := db.GetRun(ctx, run.RunID)
	if r.Status != event.StatusCompleted || r.Reclaims != 1 {
		t.Fatalf("harness %s (%s), taken over %d times; want completed, once", r.Status, r.Detail, r.Reclaims)
	}
	attempts, err := db.Attempts(ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, a := range attempts {
		got[a.PhaseID] = append(got[a.PhaseID], a.Status)
		if a.PhaseID == other && a.Attempt == 1 && !strings.Contains(a.Reason, "stopped answering") {
			t.Errorf("%s attempt 1 ended %q, want its worker named as gone", other, a.Reason)
		}
	}
	want := map[string][]string{
		onH:   {event.StatusInterrupted, event.StatusPassed},
		other: {event.StatusInterrupted, event.StatusInterrupted, event.StatusPassed},
	}
	for p, statuses := range want {
		if !slices.Equal(got[p], statuses) {
			t.Errorf("phase %s attempts %v, want %v (lost attempts do not count: max_attempts is 1)", p, got[p], statuses)
		}
	}
	if n := mail.Count(); n != len(phases) {
		t.Errorf("%d emails sent, want %d: one per phase, whatever its attempts", n, len(phases))
	}
	for _, p := range phases {
		mail.Mu.Lock()
		n := strings.Count(strings.Join(mail.Msgs, "\n"), "Subject: report "+p+"\r\n")
		mail.Mu.Unlock()
		if n != 1 {
			t.Errorf("phase %s: %d emails", p, n)
		}
	}
	for _, a := range attempts {
		if u, err := db.GetAttemptUnit(ctx, store.AttemptKey{RunID: a.RunID, PhaseID: a.PhaseID, Attempt: a.Attempt}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("attempt %s/%d left in the queue: %+v %v", a.PhaseID, a.Attempt, u, err)
		}
	}

	stored := gaplessSession(t, db, sid)
	wctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	if _, err := c.WaitEvent(wctx, func(f api.EventFrame) bool { return f.Seq == stored[len(stored)-1].Seq }); err != nil {
		t.Fatal(err)
	}
	if got, want := frameKeys(c.Events()), eventKeys(stored); !slices.Equal(got, want) {
		t.Errorf("the client got\n%v\nthe store has\n%v", got, want)
	}
}

// TestClusterHarnessOneWorker: one worker with --concurrency 1 drives a
// harness run and runs its phase attempts too (a harness takes no child
// slot, so it never waits on itself). A run.cancel through a gateway
// while an attempt runs stops the attempt's child on its worker and ends
// the harness cancelled; the next harness run of the session completes.
func TestClusterHarnessOneWorker(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"One step","phases":[
		{"id":"solo","title":"Solo","instructions":"Do the step.","evidence":{"type":"programmatic","command":"test -e done.txt"}}]}`)
	e := e2etest.New(t)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Standing: []llmtest.Turn{
		{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}},
		{When: "solo-released", Text: "done solo"},
		{When: e2etest.PhaseMarker("solo"), ToolCalls: []llmtest.Call{{ID: "wait", Name: "bash",
			Arguments: json.RawMessage(`{"command":"while [ ! -e release ]; do date +%s%N > solo.beat; sleep 0.05; done; touch done.txt; echo solo-released"}`)}}},
	}})
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	env := func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, config.DatabaseEnv+"="+dsn) }
	gw := e.StartGatewayWith(env)
	worker := e.Command("worker", "--concurrency", "1", "--poll", "100ms")
	env(worker)
	worker.Stderr = e2etest.LogFile(t, "worker.stderr")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	c := e2etest.GwDial(t, gw.Addr)
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	harness := api.RunOptions{Harness: true}

	first := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "step", Options: harness})
	beat := filepath.Join(e.Workspace, "solo.beat")
	waitForLong(t, 60*time.Second, "the attempt's bash to run", func() bool {
		_, err := os.Stat(beat)
		return err == nil
	})
	e2etest.GwCall[json.RawMessage](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: first.RunID})
	evs := e2etest.GwWait(t, c, first.RunID)
	if end := e2etest.LastFrame(evs); end.Event != event.RunCancelled {
		t.Fatalf("cancelled harness ended %s %+v", end.Event, e2etest.FinishedFrame(t, end))
	}
	// The bash loop beats every 50 ms while it lives.
	was, _ := os.ReadFile(beat)
	time.Sleep(300 * time.Millisecond)
	if now, _ := os.ReadFile(beat); string(now) != string(was) {
		t.Errorf("the attempt's bash still runs after the cancel")
	}
	db := openCluster(t, dsn)
	attempts, err := db.Attempts(context.Background(), first.RunID)
	if err != nil || len(attempts) != 1 || attempts[0].Status != event.StatusCancelled {
		t.Errorf("attempts of the cancelled harness: %+v %v", attempts, err)
	}
	if _, err := db.GetAttemptUnit(context.Background(), store.AttemptKey{RunID: first.RunID, PhaseID: "solo", Attempt: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the cancelled attempt is still queued: %v", err)
	}

	if err := os.WriteFile(filepath.Join(e.Workspace, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	second := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "step", Options: harness})
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, second.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("second harness ended %s %+v", end.Event, e2etest.FinishedFrame(t, end))
	}
}
