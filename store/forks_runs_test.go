package store

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"agent/event"
)

// A fork at a seq the source has not reached is refused with an error
// that is ErrNotFound (exit 2) and says where the session ends; nothing
// is created.
func TestForkSessionPastTheEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	forkSource(t, db)
	src, err := db.GetSession(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}

	for _, seq := range []int64{src.LastSeq + 1, 100000} {
		_, err := db.ForkSession(ctx, "src", "past", "", seq)
		var past *SeqPastEndError
		if !errors.Is(err, ErrNotFound) || !errors.As(err, &past) || past.Seq != seq || past.Last != src.LastSeq {
			t.Fatalf("ForkSession at seq %d (last %d): err = %v, want a *SeqPastEndError matching ErrNotFound", seq, src.LastSeq, err)
		}
		if !strings.Contains(err.Error(), "past the end of session src, whose last seq is 15") {
			t.Errorf("error %q does not say where the session ends", err)
		}
		if _, err := db.GetSession(ctx, "past"); !errors.Is(err, ErrNotFound) {
			t.Errorf("refused fork left a session behind: %v", err)
		}
	}
	if f, err := db.ForkSession(ctx, "src", "at-end", "", src.LastSeq); err != nil || f.ForkedFromSeq != src.LastSeq {
		t.Errorf("ForkSession at the last seq = %+v, %v", f, err)
	}

	createSession(t, db, "empty")
	if _, err := db.ForkSession(ctx, "empty", "e2", "", 1); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "has no events yet") {
		t.Errorf("ForkSession of an empty session at seq 1: err = %v", err)
	}
	if _, err := db.ForkSession(ctx, "empty", "e3", "", 0); err != nil {
		t.Errorf("ForkSession of an empty session at seq 0 (all): %v", err)
	}
}

// A fork's synthetic run holds the copied conversation for the session,
// but it is not a run anyone made: ListRuns leaves it out, while a run in
// the fork still starts from the copied conversation.
func TestForkRunNotListed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	forkSource(t, db)
	want, err := db.SessionPrior(ctx, "src", "")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ForkSession(ctx, "fork", "fork-2", "", 0); err != nil {
		t.Fatal(err)
	}
	if got := listedIDs(t, db, 0); !reflect.DeepEqual(got, []string{"run-2", "run-1"}) {
		t.Errorf("ListRuns after two forks = %v, want only the source's runs", got)
	}

	held, err := db.ListSessionRuns(ctx, "fork")
	if err != nil || len(held) != 1 || !held[0].Fork || held[0].Kind != KindRun {
		t.Fatalf("fork's session runs = %+v, %v; want its one synthetic run", held, err)
	}
	if r, err := db.GetRun(ctx, held[0].ID); err != nil || !r.Fork {
		t.Errorf("GetRun of the fork's run = %+v, %v; want it, marked Fork", r, err)
	}

	// A run in the fork is listed, first, and sees the copied history.
	createSessionRun(t, db, "fork", "next")
	if got := listedIDs(t, db, 0); !reflect.DeepEqual(got, []string{"next", "run-2", "run-1"}) {
		t.Errorf("ListRuns = %v, want the fork's real run and the source's", got)
	}
	if got := listedIDs(t, db, 1); !reflect.DeepEqual(got, []string{"next"}) {
		t.Errorf("ListRuns(1) = %v, want [next]: the limit counts listed runs", got)
	}
	if r, err := db.GetRun(ctx, "next"); err != nil || r.Fork {
		t.Errorf("GetRun(next) = %+v, %v; want a run not marked Fork", r, err)
	}
	got, err := db.SessionPrior(ctx, "fork", "next")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("prior of a run in the fork = %+v, %v\nwant the source's %+v", got, err, want)
	}
}

func listedIDs(t *testing.T, db *DB, limit int) []string {
	t.Helper()
	runs, err := db.ListRuns(context.Background(), limit)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	return ids
}

// A database whose forks were made before runs had a fork mark gets them
// marked on the next Open; runs that only look alike are left listed.
func TestMigrateMarksOldForks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migratedFrom(t, "0008_fork_runs.sql",
		`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('src', '', '2026-11-22T08:00:00.000000Z', '2026-11-22T08:00:00.000000Z')`,
		`INSERT INTO sessions (id, title, parent_id, forked_from_seq, created_at, updated_at) VALUES ('fork', '', 'src', 0, '2026-11-22T08:00:02.000000Z', '2026-11-22T08:00:02.000000Z')`,
		// A real run in the source, whose prompt happens to look like a fork's.
		`INSERT INTO runs (id, kind, session_id, status, prompt, created_at, updated_at)
			VALUES ('real-1', 'run', 'src', 'completed', 'forked from session x at seq 3', '2026-11-22T08:00:01.000000Z', '2026-11-22T08:00:01.000000Z')`,
		// The fork's synthetic run, as ForkSession wrote it.
		`INSERT INTO runs (id, kind, session_id, status, prompt, turns, created_at, updated_at)
			VALUES ('synthetic', 'run', 'fork', 'completed', 'forked from session src at seq 9', 10, '2026-11-22T08:00:02.000000Z', '2026-11-22T08:00:02.000000Z')`,
		// A later run in the fork, with the same prompt typed by hand.
		`INSERT INTO runs (id, kind, session_id, status, prompt, created_at, updated_at)
			VALUES ('real-2', 'run', 'fork', 'completed', 'forked from session src at seq 9', '2026-11-22T08:00:03.000000Z', '2026-11-22T08:00:03.000000Z')`,
	)
	if got := listedIDs(t, db, 0); !reflect.DeepEqual(got, []string{"real-2", "real-1"}) {
		t.Errorf("ListRuns after the migration = %v, want the real runs only", got)
	}
	if r, err := db.GetRun(ctx, "synthetic"); err != nil || !r.Fork {
		t.Errorf("old fork run = %+v, %v; want it marked Fork", r, err)
	}
}

// The fork's copied run ends as every run does: its run.completed says
// why (completed), and so does the run's row.
func TestForkRunEndsWithAReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	forkSource(t, db)
	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err != nil {
		t.Fatal(err)
	}
	evs, err := db.ListSessionEvents(ctx, "fork", 0, 0)
	if err != nil || len(evs) == 0 {
		t.Fatalf("fork's events: %d, %v", len(evs), err)
	}
	last := evs[len(evs)-1]
	var d event.RunFinishedData
	if err := last.Decode(&d); err != nil || last.Type != event.RunCompleted || d.Reason != event.ReasonCompleted {
		t.Errorf("fork's last event = %s %s (%v), want run.completed with reason completed", last.Type, last.Data, err)
	}
	r, err := db.GetRun(ctx, last.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != event.StatusCompleted || r.Reason != event.ReasonCompleted {
		t.Errorf("fork's run: status %q reason %q, want completed, completed", r.Status, r.Reason)
	}
}
