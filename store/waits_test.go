package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"agent/event"
	"agent/prompts"
)

// appendOne stores e as the run's next event.
func appendOne(t *testing.T, db *DB, runID string, e event.Event) {
	t.Helper()
	next, err := db.NextSeq(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	e.RunID, e.Seq = runID, next
	if err := db.AppendEvents(context.Background(), []event.Event{e}); err != nil {
		t.Fatal(err)
	}
}

// A run that waits is status waiting with one open wait however often the
// wait is asked; the first answer wins and a second is refused naming it;
// the run is wakeable once answered or at its deadline.
func TestWaitIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	db, now := openClocked(t)
	*now = now.Truncate(time.Second) // deadlines are said to the second
	ctx := context.Background()
	createRun(t, db, "r1")
	createRun(t, db, "r2")
	asked := event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval, Until: now.Add(time.Hour).Format(time.RFC3339),
		OnTimeout: event.OnTimeoutDeny, CallID: "c1", Tool: "bash", Args: []byte(`{"command":"git push"}`), Rule: "bash(git push*)"}
	for range 2 {
		appendOne(t, db, "r1", event.New(event.RunWaiting, asked))
	}
	appendOne(t, db, "r2", event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w9", Kind: event.WaitSleep,
		Until: now.Add(10 * time.Minute).Format(time.RFC3339), OnTimeout: event.OnTimeoutContinue}))

	r, err := db.GetRun(ctx, "r1")
	if err != nil || r.Status != event.StatusWaiting {
		t.Fatalf("run status = %v, %v; want waiting", r, err)
	}
	open, err := db.OpenWaits(ctx)
	if err != nil || len(open) != 2 || open[0].RunID != "r2" || open[1].Waiting.Rule != "bash(git push*)" || open[1].Seq != 1 {
		t.Fatalf("inbox = %+v, %v; want r2's sleep, then r1's approval recorded at seq 1", open, err)
	}
	if ids, next, err := db.Wakeable(ctx, *now); err != nil || len(ids) != 0 || !next.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("wakeable = %v next %v, %v; want none until r2's deadline", ids, next, err)
	}

	if _, err := db.ResolveWait(ctx, "r1", "w1", event.WaitResolvedData{Outcome: event.WaitDenied, Via: event.ViaCLI, Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	_, err = db.ResolveWait(ctx, "r1", "w1", event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaWeb})
	var answered *AnsweredError
	if !errors.As(err, &answered) || answered.First.Outcome != event.WaitDenied || answered.First.Via != event.ViaCLI {
		t.Fatalf("second answer: %v; want refused naming the first (denied via cli)", err)
	}
	if _, err := db.ResolveWait(ctx, "r1", "nope", event.WaitResolvedData{Outcome: event.WaitAllowed}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("answer to no wait: %v, want ErrNotFound", err)
	}
	*now = now.Add(11 * time.Minute)
	ids, _, err := db.Wakeable(ctx, *now)
	if err != nil || len(ids) != 2 {
		t.Fatalf("wakeable = %v, %v; want r1 (answered) and r2 (deadline passed)", ids, err)
	}

	// The journal records the answer: r1 is no longer wakeable.
	appendOne(t, db, "r1", event.New(event.WaitResolved, event.WaitResolvedData{WaitID: "w1", Outcome: event.WaitDenied, Via: event.ViaCLI}))
	ws, err := db.Waits(ctx, "r1")
	if err != nil || len(ws) != 1 || !ws[0].Journaled || ws[0].Resolution.Reason != "not today" {
		t.Fatalf("waits = %+v, %v; want one, journaled, with the first answer", ws, err)
	}
	if ids, _, _ := db.Wakeable(ctx, *now); len(ids) != 1 || ids[0] != "r2" {
		t.Fatalf("wakeable = %v, want r2 only", ids)
	}
	if open, _ := db.OpenWaits(ctx); len(open) != 1 || open[0].RunID != "r2" {
		t.Fatalf("inbox = %+v, want r2 only", open)
	}
}

// A run parked on a worker waits in the queue until it may go on: no
// worker claims it before its deadline, an answer from anyone makes it
// claimable at once, and people are shown it waiting, not queued.
func TestParkedRunQueuedUntilWoken(t *testing.T) {
	t.Parallel()
	db, now := openClocked(t)
	*now = now.Truncate(time.Second)
	ctx := context.Background()
	createSession(t, db, "s1")
	queueRun(t, db, "s1", "r1")
	if id, _ := claim(t, db, "w/1/a"); id != "r1" {
		t.Fatalf("claimed %q, want r1", id)
	}
	deadline := now.Add(time.Hour)
	appendOne(t, db, "r1", event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval,
		Until: deadline.Format(time.RFC3339), OnTimeout: event.OnTimeoutDeny, CallID: "c1", Tool: "bash"}))
	if _, _, err := db.QueueParkedRun(ctx, "r1"); err == nil {
		t.Fatal("queued a parked run whose lease is still held")
	}
	if err := db.ReleaseLease(ctx, "r1", "w/1/a"); err != nil {
		t.Fatal(err)
	}
	at, queued, err := db.QueueParkedRun(ctx, "r1")
	if err != nil || !queued || !at.Equal(deadline) {
		t.Fatalf("queued %v at %v (%v), want at the deadline %v", queued, at, err, deadline)
	}
	r, _ := db.GetRun(ctx, "r1")
	if r.ShownStatus() != event.StatusWaiting {
		t.Errorf("a parked run shows %q, want waiting", r.ShownStatus())
	}
	if id, _ := claim(t, db, "w/2/b"); id != "" {
		t.Fatalf("a worker claimed %q before the deadline or an answer", id)
	}
	if _, err := db.ResolveWait(ctx, "r1", "w1", event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	if id, c := claim(t, db, "w/2/b"); id != "r1" || !c.Resume {
		t.Fatalf("after the answer a worker claimed %q, want r1 to resume", id)
	}

	// Answered before it was queued: queued to go on at once.
	queueRun(t, db, "s1", "r2")
	createSession(t, db, "s2")
	createRun(t, db, "r3")
	appendOne(t, db, "r3", event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w3", Kind: event.WaitQuestion,
		Until: deadline.Format(time.RFC3339), OnTimeout: event.OnTimeoutContinue, CallID: "c3"}))
	if _, err := db.ResolveWait(ctx, "r3", "w3", event.WaitResolvedData{Outcome: event.WaitAnswered, Via: event.ViaWeb, Answer: "yes"}); err != nil {
		t.Fatal(err)
	}
	if at, queued, err := db.QueueParkedRun(ctx, "r3"); err != nil || !queued || !at.Equal(*now) {
		t.Fatalf("answered run queued %v at %v (%v), want now", queued, at, err)
	}
	// Nothing to wait for: not queued.
	createRun(t, db, "r4")
	if _, queued, err := db.QueueParkedRun(ctx, "r4"); err != nil || queued {
		t.Fatalf("a run without waits queued %v (%v)", queued, err)
	}
}

// A phase's wait parks its attempt and its phase, not the run; a resume
// leaves the waiting attempt alone (InterruptAttempts), and its
// phase.started continues it, keeping when it started. The attempt's
// conversation is rebuilt from its own events, though another phase's are
// interleaved with them, a compaction replaced part of it and a wait tool
// was left started.
func TestPhaseWaitParksTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "h1")
	usage := func(p, c int) *event.Usage { return &event.Usage{PromptTokens: p, CompletionTokens: c} }
	for _, e := range []event.Event{
		planEvent(twoPhaseMission),
		phaseEvent(event.PhaseStarted, "gather", 1, event.PhaseData{Title: "Gather sources"}),
		phaseEvent(event.PhaseStarted, "write", 1, nil),
		phaseEvent(event.MessageCompleted, "gather", 1, event.MessageData{Role: "user", Text: "gather three"}),
		phaseEvent(event.MessageCompleted, "write", 1, event.MessageData{Role: "user", Text: "not gather's"}),
		phaseEvent(event.MessageCompleted, "gather", 1, event.MessageData{Role: "assistant", Usage: usage(10, 1),
			ToolCalls: []event.ToolCall{{ID: "c1", Name: "list_files", Arguments: `{}`}}}),
		phaseEvent(event.ToolStarted, "gather", 1, event.ToolStartedData{CallID: "c1", Name: "list_files"}),
		phaseEvent(event.ToolCompleted, "gather", 1, event.ToolCompletedData{CallID: "c1", OK: true, Output: "a.md"}),
		phaseEvent(event.MessageCompleted, "gather", 1, event.MessageData{Role: "assistant", Text: "reading", Usage: usage(20, 2)}),
		phaseEvent(event.ContextCompacted, "gather", 1, event.ContextCompactedData{From: 1, Count: 2, Summary: "listed a.md",
			Usage: event.Usage{PromptTokens: 5}}),
		phaseEvent(event.MessageCompleted, "gather", 1, event.MessageData{Role: "assistant", Usage: usage(30, 3),
			ToolCalls: []event.ToolCall{{ID: "c2", Name: "ask_human", Arguments: `{"question":"which?"}`}}}),
		phaseEvent(event.ToolStarted, "gather", 1, event.ToolStartedData{CallID: "c2", Name: "ask_human"}),
		phaseEvent(event.RunWaiting, "gather", 1, event.RunWaitingData{WaitID: "w1", Kind: event.WaitQuestion, CallID: "c2",
			Until: time.Now().Add(time.Hour).UTC().Format(time.RFC3339), OnTimeout: event.OnTimeoutContinue}),
	} {
		appendOne(t, db, "h1", e)
	}
	statuses := func() (phases, attempts map[string]string) {
		t.Helper()
		ps, err := db.PlanState(ctx, "h1")
		if err != nil {
			t.Fatal(err)
		}
		as, err := db.Attempts(ctx, "h1")
		if err != nil {
			t.Fatal(err)
		}
		phases, attempts = map[string]string{}, map[string]string{}
		for _, p := range ps.Phases {
			phases[p.ID] = p.Status
		}
		for _, a := range as {
			attempts[a.PhaseID] = a.Status
		}
		return phases, attempts
	}
	phases, attempts := statuses()
	if phases["gather"] != event.StatusWaiting || attempts["gather"] != event.StatusWaiting || attempts["write"] != event.StatusRunning {
		t.Fatalf("phases %v, attempts %v; want gather and its attempt waiting, write running", phases, attempts)
	}
	if r, _ := db.GetRun(ctx, "h1"); r.Status != event.StatusRunning {
		t.Errorf("run status %s: a phase's wait does not park the harness", r.Status)
	}
	if ws, err := db.Waits(ctx, "h1"); err != nil || len(ws) != 1 || ws[0].PhaseID != "gather" || ws[0].Attempt != 1 {
		t.Fatalf("waits = %+v, %v; want gather's, of attempt 1", ws, err)
	}

	st, err := db.AttemptState(ctx, "h1", "gather", 1)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range st.History {
		roles = append(roles, string(m.Role)+":"+m.Content)
	}
	wantRoles := []string{"user:gather three", "user:" + prompts.SummaryHeading + "\nlisted a.md", "assistant:reading", "assistant:"}
	if !reflect.DeepEqual(roles, wantRoles) || len(st.History[3].ToolCalls) != 1 || st.History[3].ToolCalls[0].ID != "c2" {
		t.Errorf("history = %q (%+v), want %q ending in the ask_human call", roles, st.History, wantRoles)
	}
	if !reflect.DeepEqual(st.Started, []string{"c2"}) || st.Turns != 3 || st.Usage.PromptTokens != 65 || st.Usage.CompletionTokens != 6 || st.Iteration != 0 {
		t.Errorf("state = %+v; want c2 started, 3 turns, 65+6 tokens", st)
	}

	// A resume interrupts what was running and leaves what waits.
	interrupted, err := db.InterruptAttempts(ctx, "h1")
	if err != nil || len(interrupted) != 1 || interrupted[0].PhaseID != "write" {
		t.Fatalf("interrupted %+v, %v; want write's attempt only", interrupted, err)
	}
	before, _ := db.Attempts(ctx, "h1")
	appendOne(t, db, "h1", phaseEvent(event.PhaseStarted, "gather", 1, event.PhaseData{Title: "Gather sources"}))
	phases, attempts = statuses()
	if phases["gather"] != event.StatusRunning || attempts["gather"] != event.StatusRunning {
		t.Errorf("after phase.started: phases %v, attempts %v; want gather running again", phases, attempts)
	}
	after, _ := db.Attempts(ctx, "h1")
	if !after[0].StartedAt.Equal(before[0].StartedAt) || after[0].Attempt != 1 {
		t.Errorf("the continued attempt %+v, was %+v: want attempt 1 with its first start", after[0], before[0])
	}
}

// A waiting run its worker left claimed (it died before queueing it) is
// queued again once that worker is gone, and only then.
func TestStrandedWaitingRunRequeued(t *testing.T) {
	t.Parallel()
	db, now := openClocked(t)
	db.OwnerDead = func(string) bool { return false } // another machine's
	ctx := context.Background()
	createSession(t, db, "s1")
	queueRun(t, db, "s1", "r1")
	if id, _ := claim(t, db, "far/1/x"); id != "r1" {
		t.Fatalf("claimed %q", id)
	}
	appendOne(t, db, "r1", event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval,
		Until: now.Add(time.Hour).Format(time.RFC3339), OnTimeout: event.OnTimeoutDeny, CallID: "c1"}))
	if ok, err := db.RequeueStranded(ctx, "r1"); err != nil || ok {
		t.Fatalf("requeued a run its worker still holds: %v %v", ok, err)
	}
	*now = now.Add(2 * time.Minute) // the lease ran out
	if ok, err := db.RequeueStranded(ctx, "r1"); err != nil || !ok {
		t.Fatalf("requeue of a stranded run: %v %v", ok, err)
	}
	if ok, _ := db.RequeueStranded(ctx, "r1"); ok {
		t.Error("requeued a run twice")
	}
	if id, c := claim(t, db, "near/1/y"); id != "r1" || !c.Resume {
		t.Fatalf("claimed %q, want r1 to resume", id)
	}
}

// BenchmarkWakeable is what a gateway's wake loop pays per poll on a
// store with a history of 10,000 answered waits and 20 open ones: it
// reads the open waits, not the history.
func BenchmarkWakeable(b *testing.B) {
	db := openTest(b)
	ctx := context.Background()
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for i := range 2000 {
		id := fmt.Sprintf("r%04d", i)
		if err := db.CreateRun(ctx, &Run{ID: id, Prompt: "p"}, "", 0); err != nil {
			b.Fatal(err)
		}
		seq := int64(0)
		add := func(e event.Event) {
			seq++
			e.RunID, e.Seq = id, seq
			if err := db.AppendEvents(ctx, []event.Event{e}); err != nil {
				b.Fatal(err)
			}
		}
		for j := range 5 {
			waitID := fmt.Sprintf("w%d", j)
			add(event.New(event.RunWaiting, event.RunWaitingData{WaitID: waitID, Kind: event.WaitApproval, Until: until, OnTimeout: event.OnTimeoutDeny}))
			if i%100 == 0 && j == 4 {
				break // one run in a hundred waits
			}
			res := event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaCLI}
			if _, err := db.ResolveWait(ctx, id, waitID, res); err != nil {
				b.Fatal(err)
			}
			res.WaitID = waitID
			add(event.New(event.WaitResolved, res))
		}
	}
	now := time.Now()
	for b.Loop() {
		if ids, _, err := db.Wakeable(ctx, now); err != nil || len(ids) != 0 {
			b.Fatal(ids, err)
		}
	}
}
