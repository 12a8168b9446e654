package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"agent/event"
)

// TestDeleteSession: a session goes with its runs and what they recorded;
// its fork keeps its whole conversation; a session with a run running or
// waiting, or where a job starts its runs, is kept, saying why.
func TestDeleteSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	forkSource(t, db)
	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err != nil {
		t.Fatal(err)
	}
	forkPrior, err := db.SessionPrior(ctx, "fork", "")
	if err != nil {
		t.Fatal(err)
	}

	createSession(t, db, "busy")
	createSessionRun(t, db, "busy", "run-busy") // running: created leased to nobody, as a queued run
	createSession(t, db, "parked")
	createSessionRun(t, db, "parked", "run-parked")
	sessionAppend(t, sessionJournal(t, db, "parked"), "run-parked",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "ask"}),
		event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w1", Kind: event.WaitQuestion, Question: "which?"}),
		event.New(event.RunInterrupted, event.RunFinishedData{Status: event.StatusInterrupted}), // ended, then…
	)
	sessionAppend(t, sessionJournal(t, db, "parked"), "run-parked", // …resumed and parked again
		event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w2", Kind: event.WaitQuestion, Question: "which?"}))
	createSession(t, db, "jobbed")
	if err := db.CreateJob(ctx, &Job{ID: "j1", Name: "nightly", CronExpr: "0 3 * * *", Timezone: "UTC", Enabled: true,
		TargetSessionID: "jobbed", PromptTemplate: "report", NextRunAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id   string
		want SessionInUseError
	}{
		{"busy", SessionInUseError{SessionID: "busy", RunID: "run-busy", Status: event.StatusRunning}},
		{"parked", SessionInUseError{SessionID: "parked", RunID: "run-parked", Status: event.StatusWaiting}},
		{"jobbed", SessionInUseError{SessionID: "jobbed", Job: "nightly"}},
	} {
		_, err := db.DeleteSession(ctx, tt.id)
		var busy *SessionInUseError
		if !errors.As(err, &busy) || *busy != tt.want {
			t.Errorf("delete %s: %v, want %+v", tt.id, err, tt.want)
		}
		if _, err := db.GetSession(ctx, tt.id); err != nil {
			t.Errorf("session %s after a refused delete: %v", tt.id, err)
		}
	}

	s, err := db.DeleteSession(ctx, "sr") // a unique prefix
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "src" || s.Runs != 2 {
		t.Errorf("deleted %+v, want src with its 2 runs", s)
	}
	if _, err := db.GetSession(ctx, "src"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the session after delete: %v, want not found", err)
	}
	for _, id := range []string{"run-1", "run-2"} {
		if _, err := db.GetRun(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("run %s after delete: %v, want not found", id, err)
		}
	}
	var left int
	if err := db.ro.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM events WHERE run_id IN ('run-1', 'run-2'))
		+ (SELECT COUNT(*) FROM messages WHERE run_id IN ('run-1', 'run-2'))
		+ (SELECT COUNT(*) FROM tool_calls WHERE run_id IN ('run-1', 'run-2'))`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d events, messages and tool calls of the deleted runs left (%v)", left, err)
	}
	fork, err := db.GetSession(ctx, "fork")
	if err != nil {
		t.Fatal(err)
	}
	if fork.ParentID != "" || fork.ForkedFromSeq != 0 {
		t.Errorf("the fork still names its deleted parent: %+v", fork)
	}
	if prior, err := db.SessionPrior(ctx, "fork", ""); err != nil || !reflect.DeepEqual(prior, forkPrior) {
		t.Errorf("the fork's conversation after its parent went: %v %+v, want %+v", err, prior, forkPrior)
	}
	if _, err := db.DeleteSession(ctx, "src"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting it again: %v, want not found", err)
	}
}

// TestTitleSession: a session without a title takes one; a titled one
// keeps its own.
func TestTitleSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	if err := db.CreateSession(ctx, &Session{ID: "untitled"}); err != nil {
		t.Fatal(err)
	}
	createSession(t, db, "titled")
	for _, id := range []string{"untitled", "titled"} {
		if err := db.TitleSession(ctx, id, "fix the tests"); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"untitled": "fix the tests", "titled": "title of titled"} {
		if s, err := db.GetSession(ctx, id); err != nil || s.Title != want {
			t.Errorf("session %s: %+v %v, want title %q", id, s, err, want)
		}
	}
}
