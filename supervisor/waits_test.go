package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"agent/event"
	"agent/store"
)

// waitingRun is a run whose journal holds one run.waiting.
func waitingRun(t *testing.T, db *store.DB, w event.RunWaitingData) string {
	t.Helper()
	r := &store.Run{ID: "r-" + w.WaitID, Prompt: "p"}
	if err := db.CreateRun(context.Background(), r, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := newSink(t, db, r.ID).Emit(context.Background(), event.New(event.RunWaiting, w)); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// A terminal's wait ends with whichever comes first: the person at the
// terminal, another channel's answer, or the deadline; a terminal answer
// that comes second gets the first.
func TestStoreWaiterFirstAnswerWins(t *testing.T) {
	t.Parallel()
	_, db := newTest(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	never := func(ctx context.Context, _ event.RunWaitingData) (Decision, error) {
		<-ctx.Done()
		return Decision{}, ctx.Err()
	}

	// Another channel answers while the terminal asks.
	w := event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval, Until: later, Tool: "bash"}
	id := waitingRun(t, db, w)
	go func() {
		_, _ = Answer(ctx, db, id, Decision{Decide: DecideDeny, Text: "no", Via: event.ViaCLI})
	}()
	got, err := storeWaiter{db: db, runID: id, ask: never, poll: 10 * time.Millisecond}.Wait(ctx, w)
	if err != nil || got.Outcome != event.WaitDenied || got.Via != event.ViaCLI {
		t.Errorf("another channel's answer: %+v, %v", got, err)
	}

	// The deadline passes first: a sleep elapses.
	w = event.RunWaitingData{WaitID: "w2", Kind: event.WaitSleep, Until: time.Now().Add(-time.Second).UTC().Format(time.RFC3339)}
	id = waitingRun(t, db, w)
	got, err = storeWaiter{db: db, runID: id, ask: never, poll: time.Hour}.Wait(ctx, w)
	if err != nil || got.Outcome != event.WaitElapsed || got.Via != event.ViaTimeout {
		t.Errorf("a passed deadline: %+v, %v", got, err)
	}

	// The terminal answers second: it gets the first answer.
	w = event.RunWaitingData{WaitID: "w3", Kind: event.WaitApproval, Until: later, Tool: "bash"}
	id = waitingRun(t, db, w)
	if _, err := Answer(ctx, db, id, Decision{Decide: DecideAllow, Via: event.ViaWeb}); err != nil {
		t.Fatal(err)
	}
	yes := func(context.Context, event.RunWaitingData) (Decision, error) {
		return Decision{Decide: DecideDeny}, nil
	}
	got, err = storeWaiter{db: db, runID: id, ask: yes, poll: time.Hour}.Wait(ctx, w)
	if err != nil || got.Outcome != event.WaitAllowed || got.Via != event.ViaWeb {
		t.Errorf("a terminal answer after the web's: %+v, %v", got, err)
	}
	if _, err := Answer(ctx, db, id, Decision{Decide: DecideDeny, Via: event.ViaCLI}); !errors.As(err, new(*store.AnsweredError)) {
		t.Errorf("a third answer: %v, want AnsweredError", err)
	}
}
