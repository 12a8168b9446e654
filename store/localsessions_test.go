package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"agent/event"
)

// A local session (agent chat without a gateway) is told apart from a
// gateway's, --continue finds the one last active, and a fork is kept where
// its source is.
func TestLocalSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now

	if _, err := db.LastLocalSession(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LastLocalSession of an empty store: %v, want ErrNotFound", err)
	}
	for _, s := range []*Session{{ID: "local-old", Local: true}, {ID: "local-new", Local: true}, {ID: "gateway"}} {
		if err := db.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	// The older local session is the one last written to.
	createSessionRun(t, db, "local-old", "run-1")
	sessionAppend(t, sessionJournal(t, db, "local-old"), "run-1", event.Event{Type: event.RunStarted})

	last, err := db.LastLocalSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last.ID != "local-old" || !last.Local {
		t.Errorf("LastLocalSession = %s (local %v), want local-old", last.ID, last.Local)
	}
	if g, err := db.GetSession(ctx, "gateway"); err != nil || g.Local {
		t.Errorf("a gateway's session: %+v, %v", g, err)
	}
	fork, err := db.ForkSession(ctx, "local-old", "fork-of-local", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !fork.Local {
		t.Error("a fork of a local session is not local")
	}
	list, err := db.ListSessions(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if want := s.ID != "gateway"; s.Local != want {
			t.Errorf("listed %s local %v, want %v", s.ID, s.Local, want)
		}
	}
}
