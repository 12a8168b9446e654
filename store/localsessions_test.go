package store

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// Runs of a local session created at once by several live processes: one
// is created, the others are told which run holds the session, and a run
// whose holder died does not hold it.
func TestCreateRunAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	if err := db.CreateSession(ctx, &Session{ID: "chat", Local: true}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			r := &Run{ID: fmt.Sprintf("run-%d", i), SessionID: "chat", Prompt: "hi", Workspace: "/ws"}
			errs <- db.CreateRunAlone(ctx, r, NewLeaseOwner(), time.Minute)
		}()
	}
	created := 0
	for range n {
		err := <-errs
		var held *LeaseHeldError
		switch {
		case err == nil:
			created++
		case !errors.As(err, &held) || held.RunID == "":
			t.Errorf("a refused creation: %v, want a *LeaseHeldError naming the run", err)
		}
	}
	if created != 1 {
		t.Fatalf("%d runs created at once in one local session, want 1", created)
	}
	// A holder gone (a pid that cannot exist) holds nothing.
	runs, err := db.ListSessionRuns(ctx, "chat")
	if err != nil || len(runs) != 1 {
		t.Fatal(runs, err)
	}
	host, _ := os.Hostname()
	if _, err := db.rw.ExecContext(ctx, `UPDATE runs SET lease_owner = ? WHERE id = ?`, host+"/2147483646/dead", runs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateRunAlone(ctx, &Run{ID: "after", SessionID: "chat", Prompt: "hi", Workspace: "/ws"}, NewLeaseOwner(), time.Minute); err != nil {
		t.Errorf("after its holder died: %v, want created", err)
	}
}
