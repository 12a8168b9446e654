package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"agent/event"
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
