package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/checkpoint"
	"agent/config"
	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/store"
	"agent/store/pgtest"
	"agent/supervisor"
)

// TestCluster is README.md#a-small-cluster on a real PostgreSQL server: two gateways
// and three workers on one database; 30 runs in 10 sessions, started
// through both gateways; one worker kill -9'd while it runs a tool, and
// one gateway kill -9'd while clients are attached to it. Every run
// completes once, no completed tool call runs again, every email is sent
// once (a real SMTP server), and the streams clients of either gateway
// receive are the store's, in seq order, with nothing missing.
func TestCluster(t *testing.T) {
	t.Parallel()
	const sessions, perSession = 10, 3
	runs := sessions * perSession
	var turns []llmtest.Turn
	for i := range runs {
		task := fmt.Sprintf("task-%02d", i)
		email, _ := json.Marshal(map[string]string{"to": task + "@example.com", "subject": task, "body": "report " + task})
		turns = append(turns,
			llmtest.Turn{When: task, ToolCalls: []llmtest.Call{
				{Name: "send_email", Arguments: email},
				// Until the victim worker is killed, while one of these waits.
				e2etest.ToolCall("bash", `{"command":"echo ran >> count-`+task+`.txt; until [ -e ../go ]; do sleep 0.05; done"}`),
			}},
			llmtest.Turn{When: task, Text: "done " + task},
		)
	}
	e := e2etest.New(t, turns...)
	mail := e2etest.NewMailbox(t)
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	env := func(cmd *exec.Cmd) {
		cmd.Env = append(e.WithMail(cmd.Env, mail), config.DatabaseEnv+"="+dsn, "AGENT_LEASE_TTL=2s")
	}

	gwA, gwB := e.StartGatewayWith(env), e.StartGatewayWith(env)
	var workers []*exec.Cmd
	for i := range 3 {
		concurrency := "3"
		if i == 0 {
			concurrency = "1" // the victim: one run, killed while its tool runs
		}
		cmd := e.Command("worker", "--concurrency", concurrency, "--poll", "200ms")
		env(cmd)
		cmd.Stderr = e2etest.LogFile(t, fmt.Sprintf("worker%d.stderr", i))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		workers = append(workers, cmd)
	}

	db := openCluster(t, dsn)

	// Ten sessions, made through either gateway; clients of both attach
	// to every one of them from its start.
	gws := []*e2etest.GatewayProc{gwA, gwB}
	ids := make([]string, sessions)
	runIDs := make([]string, 0, runs)
	for s := range sessions {
		var first api.RunStartResult
		task := fmt.Sprintf("task-%02d", s*perSession)
		if code := e2etest.HTTPJSON(t, "POST", "http://"+gws[s%2].Addr+"/v1/runs", `{"input":"do `+task+`"}`, &first); code != 202 {
			t.Fatalf("POST /v1/runs: %d", code)
		}
		ids[s] = first.SessionID
		runIDs = append(runIDs, first.RunID)
	}
	clients := map[string][2]*gatewaytest.Client{}
	for _, id := range ids {
		var pair [2]*gatewaytest.Client
		for g, gw := range gws {
			c := e2etest.GwDial(t, gw.Addr)
			e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: id})
			pair[g] = c
		}
		clients[id] = pair
	}
	for s := range sessions {
		for k := 1; k < perSession; k++ {
			var r api.RunStartResult
			task := fmt.Sprintf("task-%02d", s*perSession+k)
			body := fmt.Sprintf(`{"session_id":%q,"input":"do %s"}`, ids[s], task)
			if code := e2etest.HTTPJSON(t, "POST", "http://"+gws[(s+k)%2].Addr+"/v1/runs", body, &r); code != 202 || r.Status != "queued" {
				t.Fatalf("POST /v1/runs: %d %+v", code, r)
			}
			runIDs = append(runIDs, r.RunID)
		}
	}

	// kill -9 the victim worker while its run's bash call waits.
	victim := workers[0].Process.Pid
	var victimRun string
	e2etest.WaitFor(t, "the victim worker to run a tool", func() bool {
		for _, id := range runIDs {
			r, err := db.GetRun(context.Background(), id)
			if err != nil || r.Status != event.StatusRunning {
				continue
			}
			if _, pid, ok := store.OwnerProcess(r.LeaseOwner); ok && pid == victim {
				task := strings.TrimPrefix(r.Prompt, "do ")
				if _, err := os.Stat(filepath.Join(e.Workspace, "count-"+task+".txt")); err == nil {
					victimRun = id
					return true
				}
			}
		}
		return false
	})
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].Wait()
	letGo(t, e)
	// Gateway B dies once its clients have seen each session live.
	e2etest.WaitFor(t, "gateway B's clients to see every session", func() bool {
		for _, pair := range clients {
			if len(pair[1].Events()) == 0 {
				return false
			}
		}
		return true
	})
	gwB.Signal(t, syscall.SIGKILL)
	gwB.Wait(t)

	// Every run completes, the victim's on another worker.
	waitForLong(t, 120*time.Second, "every run to complete", func() bool {
		for _, id := range runIDs {
			r, err := db.GetRun(context.Background(), id)
			if err != nil || r.Status == event.StatusRunning || r.Queue == event.StatusWaiting {
				return false
			}
		}
		return true
	})
	for _, id := range runIDs {
		r, _ := db.GetRun(context.Background(), id)
		task := strings.TrimPrefix(r.Prompt, "do ")
		if r.Status != event.StatusCompleted || r.Result != "done "+task {
			t.Errorf("run %s (%s): %s %q %s", id, task, r.Status, r.Result, r.Detail)
		}
		if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "count-"+task+".txt")); n != 1 {
			t.Errorf("%s: its bash call ran %d times", task, n)
		}
		if id == victimRun && r.Reclaims != 1 {
			t.Errorf("the victim's run %s was taken over %d times, want 1", id, r.Reclaims)
		}
	}
	if n := mail.Count(); n != runs {
		t.Errorf("%d emails sent, want %d (one per run)", n, runs)
	}
	mail.Mu.Lock()
	for i := range runs {
		task := fmt.Sprintf("task-%02d", i)
		if n := strings.Count(strings.Join(mail.Msgs, "\n"), "Subject: "+task+"\r\n"); n != 1 {
			t.Errorf("%s: %d emails", task, n)
		}
	}
	mail.Mu.Unlock()

	// The streams: gateway A's clients got each session's stored events,
	// once each and in seq order, ending with its last run's end; gateway
	// B's clients got a prefix of the same, until B died.
	for _, id := range ids {
		want, err := db.ListSessionEvents(context.Background(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if hole := firstHole(want); hole != "" {
			t.Errorf("session %s: %s", id, hole)
		}
		pair := clients[id]
		ctx, cancel := gatewaytest.Timeout(30 * time.Second)
		_, err = pair[0].WaitEvent(ctx, func(f api.EventFrame) bool { return f.Seq == want[len(want)-1].Seq })
		cancel()
		if err != nil {
			t.Fatalf("session %s on gateway A: %v", id, err)
		}
		gotA, gotB := frameKeys(pair[0].Events()), frameKeys(pair[1].Events())
		if !slices.Equal(gotA, eventKeys(want)) {
			t.Errorf("session %s: gateway A sent\n%v\nthe store has\n%v", id, gotA, eventKeys(want))
		}
		if len(gotB) == 0 || !slices.Equal(gotB, gotA[:min(len(gotB), len(gotA))]) {
			t.Errorf("session %s: gateway B sent\n%v\nnot a prefix of A's\n%v", id, gotB, gotA)
		}
		terminals := 0
		for _, ev := range want {
			if gatewaytest.IsTerminal(ev.Type) {
				terminals++
			}
		}
		if terminals != perSession {
			t.Errorf("session %s has %d terminal events for %d runs", id, terminals, perSession)
		}
	}
}

// openCluster opens a cluster's database for the test to look at.
func openCluster(t *testing.T, dsn string) *store.DB {
	t.Helper()
	db, err := store.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// gaplessSession returns a session's stored events, numbered 1, 2, 3, …
// with no hole, or fails the test.
func gaplessSession(t *testing.T, db *store.DB, sessionID string) []event.Event {
	t.Helper()
	evs, err := db.ListSessionEvents(context.Background(), sessionID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if hole := firstHole(evs); hole != "" {
		t.Fatal(hole)
	}
	return evs
}

// firstHole says where a session's stored events stop being numbered
// 1, 2, 3, …; "" when they never do.
func firstHole(evs []event.Event) string {
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			return fmt.Sprintf("event %d (%s) has seq %d: the stream has a hole", i, ev.Type, ev.Seq)
		}
	}
	return ""
}

// frameKeys and eventKeys say what a stream holds, to compare two.
func frameKeys(fs []api.EventFrame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%d %s %s", f.Seq, f.Event, f.RunID))
	}
	return out
}

func eventKeys(evs []event.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%d %s %s", e.Seq, e.Type, e.RunID))
	}
	return out
}

// letGo lets a model's bash command that waits for ../go end.
func letGo(t *testing.T, e *e2etest.Env) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(filepath.Dir(e.Workspace), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitForLong is WaitFor with a deadline of its own.
func waitForLong(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterRewind: on a shared store, a checkpoint is rewound through a
// gateway while workers drive the session's runs: refused while another
// run of the session is driven, then done, its rewind.completed right
// after the session's last stored event (no hole, no seq taken twice).
func TestClusterRewind(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: "write", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"new.txt","content":"new\n"}`)}},
		llmtest.Turn{When: "write", Text: "written"},
		// It runs until the test lets it go, after the refused rewind.
		llmtest.Turn{When: "wait", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"until [ -e ../go ]; do sleep 0.05; done"}`)}},
		llmtest.Turn{When: "wait", Text: "waited"},
	)
	dsn, c, sid := e.SmallCluster(t)
	first := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "write"})
	e2etest.GwWait(t, c, first.RunID)
	second := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "wait"})
	ctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, func(f api.EventFrame) bool { return f.Event == event.ToolStarted && f.RunID == second.RunID }); err != nil {
		t.Fatal(err)
	}
	var refused *api.Error
	err := c.Call(ctx, api.MethodCheckpointRewind, api.CheckpointRewindParams{RunID: first.RunID}, nil)
	if !errors.As(err, &refused) || refused.Code != api.CodeConflict {
		t.Fatalf("rewind while the session's next run is driven: %v, want a conflict", err)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "new.txt")); err != nil {
		t.Fatalf("the refused rewind changed the workspace: %v", err)
	}
	letGo(t, e)
	e2etest.GwWait(t, c, second.RunID)

	e2etest.GwCall[checkpoint.Report](t, c, api.MethodCheckpointRewind, api.CheckpointRewindParams{RunID: first.RunID})
	if _, err := os.Stat(filepath.Join(e.Workspace, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt is still there after the rewind: %v", err)
	}
	if _, err := c.WaitEvent(ctx, func(f api.EventFrame) bool { return f.Event == event.RewindCompleted }); err != nil {
		t.Fatalf("no rewind.completed on the session stream: %v", err)
	}
	db := openCluster(t, dsn)
	stored := gaplessSession(t, db, sid)
	if last := stored[len(stored)-1]; last.Type != event.RewindCompleted {
		t.Errorf("the session's last event is %s, want rewind.completed", last.Type)
	}
	if got, want := frameKeys(c.Events()), eventKeys(stored); !slices.Equal(got, want) {
		t.Errorf("the client got\n%v\nthe store has\n%v", got, want)
	}
}

// TestClusterRateLimitPause: a run a worker drives that the provider
// rate-limits past its retries waits (kind sleep, reason rate_limited,
// docs/PROTOCOL.md#waits) in the queue until resume_after; then a worker
// resumes it, not before.
func TestClusterRateLimitPause(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Status: 429, Headers: map[string]string{"Retry-After": "2"}, Body: `{"error":{"message":"quota exceeded; try again later"}}`},
		llmtest.Turn{Text: "Done after the pause."},
	)
	dsn, c, sid := e.SmallCluster(t)
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "go",
		Options: api.RunOptions{ModelCallTimeout: supervisor.Duration(time.Second)}})
	paused, w := e2etest.GwWaiting(t, c, run.RunID, 0)
	if w.Kind != event.WaitSleep || w.Reason != event.ReasonRateLimited || w.ResumeAfter == "" || w.Until != w.ResumeAfter {
		t.Fatalf("the pause %+v, want a sleep until resume_after, reason rate_limited", w)
	}
	resumeAfter, err := time.Parse(time.RFC3339, w.ResumeAfter)
	if err != nil {
		t.Fatal(err)
	}
	db := openCluster(t, dsn)
	e2etest.WaitFor(t, "a worker to resume the run", func() bool {
		r, err := db.GetRun(context.Background(), run.RunID)
		return err == nil && r.Status == event.StatusCompleted
	})
	r, _ := db.GetRun(context.Background(), run.RunID)
	if r.Result != "Done after the pause." {
		t.Errorf("result %q", r.Result)
	}
	evs, err := db.ListEvents(context.Background(), run.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		// resume_after has whole seconds; the resume may not start before it.
		if ev.Type == event.RunStarted && ev.Seq > paused.Seq && ev.TS.Before(resumeAfter.Add(-time.Second)) {
			t.Errorf("resumed at %s, before resume_after %s", ev.TS.Format(time.RFC3339Nano), w.ResumeAfter)
		}
		if event.IsTerminal(ev.Type) && ev.Seq < paused.Seq {
			t.Errorf("the paused run ended (%s) before it was resumed", ev.Type)
		}
	}
}

// TestClusterCancelQueued: a run queued behind another run of its session
// (which a worker drives) is cancelled at once: the answer says cancelled,
// its run.cancelled takes the session's next seq while the worker keeps
// writing the other run's events, and it never runs.
func TestClusterCancelQueued(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		// It runs until the test lets it go, after the cancel.
		llmtest.Turn{When: "first", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"until [ -e ../go ]; do sleep 0.05; done; echo slept"}`)}},
		llmtest.Turn{When: "first", Text: "first done"},
		llmtest.Turn{When: "second", Text: "second done"},
	)
	dsn, c, sid := e.SmallCluster(t)
	first := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "first"})
	ctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, func(f api.EventFrame) bool { return f.Event == event.ToolStarted && f.RunID == first.RunID }); err != nil {
		t.Fatal(err)
	}
	second := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "second"})
	// At once: the first run is still running, and goes on only once
	// the test lets it.
	info := e2etest.GwCall[api.RunInfo](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: second.RunID})
	if info.Status != event.StatusCancelled {
		t.Fatalf("cancel of a queued run answered %q, want cancelled at once", info.Status)
	}
	letGo(t, e)
	e2etest.GwWait(t, c, first.RunID)
	db := openCluster(t, dsn)
	stored := gaplessSession(t, db, sid)
	var secondTypes []string
	cancelledAt, firstEnd := int64(0), int64(0)
	for _, ev := range stored {
		switch {
		case ev.RunID == second.RunID:
			secondTypes = append(secondTypes, ev.Type)
			cancelledAt = ev.Seq
		case ev.Type == event.RunCompleted:
			firstEnd = ev.Seq
		}
	}
	if !slices.Equal(secondTypes, []string{event.RunCancelled}) || cancelledAt > firstEnd {
		t.Errorf("the queued run's events %v (seq %d), want only run.cancelled, before the first run's end (seq %d)", secondTypes, cancelledAt, firstEnd)
	}
	if got, want := frameKeys(c.Events()), eventKeys(stored); !slices.Equal(got, want) {
		t.Errorf("the client got\n%v\nthe store has\n%v", got, want)
	}
	time.Sleep(500 * time.Millisecond) // a worker would have claimed it by now
	if r, _ := db.GetRun(context.Background(), second.RunID); r.Status != event.StatusCancelled || r.Result != "" {
		t.Errorf("the cancelled run: %s %q", r.Status, r.Result)
	}
}
