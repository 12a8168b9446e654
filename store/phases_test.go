package store

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"agent/event"
)

const onePhaseMission = `{"objective":"o","phases":[{"id":"a","max_attempts":2},{"id":"b","depends_on":["a"]}]}`

// phaseByID returns the phase of the run's plan with this id.
func phaseByID(t *testing.T, db *DB, runID, id string) Phase {
	t.Helper()
	ps, err := db.PlanState(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps.Phases {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("phase %s not in plan", id)
	return Phase{}
}

func TestPhaseFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name        string
		data        event.PhaseData
		wantPhase   string
		wantAttempt string
	}{
		{"failed for good", event.PhaseData{Status: "failed", Reason: "no evidence"}, event.StatusFailed, event.StatusFailed},
		{"status defaults to failed", event.PhaseData{Reason: "no evidence"}, event.StatusFailed, event.StatusFailed},
		{"unknown status is failed", event.PhaseData{Status: "exploded"}, event.StatusFailed, event.StatusFailed},
		{"passed is no way to fail", event.PhaseData{Status: "passed"}, event.StatusFailed, event.StatusFailed},
		{"timeout", event.PhaseData{Status: "timeout"}, event.StatusFailed, event.StatusTimeout},
		{"crashed, will retry", event.PhaseData{Status: "crashed", WillRetry: true}, event.StatusPending, event.StatusCrashed},
		{"interrupted runs again", event.PhaseData{Status: "interrupted"}, event.StatusPending, event.StatusInterrupted},
		{"cancelled runs again", event.PhaseData{Status: "cancelled"}, event.StatusPending, event.StatusCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			createRun(t, db, "run-1")
			appendSeq(t, db, "run-1",
				planEvent(onePhaseMission),
				phaseEvent(event.PhaseStarted, "a", 1, nil),
				phaseEvent(event.PhaseFailed, "a", 1, tt.data),
			)
			if p := phaseByID(t, db, "run-1", "a"); p.Status != tt.wantPhase || p.Attempts != 1 {
				t.Errorf("phase = %s attempts %d, want %s 1", p.Status, p.Attempts, tt.wantPhase)
			}
			as, err := db.Attempts(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(as) != 1 || as[0].Status != tt.wantAttempt || as[0].Reason != tt.data.Reason || as[0].FinishedAt.IsZero() {
				t.Errorf("attempts = %+v, want one %s", as, tt.wantAttempt)
			}
		})
	}
}

func TestResetBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	appendSeq(t, db, "run-1",
		planEvent(onePhaseMission),
		phaseEvent(event.PhaseStarted, "a", 1, nil),
		phaseEvent(event.PhaseFailed, "a", 1, event.PhaseData{Reason: "no evidence", WillRetry: true}),
		phaseEvent(event.PhaseStarted, "a", 2, nil),
		phaseEvent(event.PhaseFailed, "a", 2, event.PhaseData{Reason: "no evidence"}),
	)
	if p := phaseByID(t, db, "run-1", "a"); p.Status != event.StatusFailed || p.Attempts != 2 || p.BudgetBase != 0 {
		t.Fatalf("before reset: %s attempts %d base %d, want failed 2 0", p.Status, p.Attempts, p.BudgetBase)
	}

	if err := db.ResetBudget(ctx, "run-1", "a"); err != nil {
		t.Fatal(err)
	}
	p := phaseByID(t, db, "run-1", "a")
	if p.Status != event.StatusPending || p.Attempts != 2 || p.BudgetBase != 2 || p.MaxAttempts != 2 {
		t.Errorf("after reset: %s attempts %d base %d max %d, want pending 2 2 2",
			p.Status, p.Attempts, p.BudgetBase, p.MaxAttempts)
	}

	// The next attempt continues the numbering and counts as the first of
	// the new budget.
	appendSeq(t, db, "run-1", phaseEvent(event.PhaseStarted, "a", 3, nil))
	if p := phaseByID(t, db, "run-1", "a"); p.Status != event.StatusRunning || p.Attempts-p.BudgetBase != 1 {
		t.Errorf("after a new attempt: %s attempts %d base %d, want running with 1 of the new budget used",
			p.Status, p.Attempts, p.BudgetBase)
	}

	if err := db.ResetBudget(ctx, "run-1", "a"); err == nil {
		t.Error("ResetBudget of a running phase succeeded")
	}
	if err := db.ResetBudget(ctx, "run-1", "b"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("ResetBudget of a pending phase: err = %v, want a not-failed error", err)
	}
	if err := db.ResetBudget(ctx, "run-1", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ResetBudget of a missing phase: err = %v, want ErrNotFound", err)
	}
}

func TestInterruptAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	createRun(t, db, "run-1")
	createRun(t, db, "run-2")
	appendSeq(t, db, "run-1",
		planEvent(onePhaseMission),
		phaseEvent(event.PhaseStarted, "a", 1, nil),
		phaseEvent(event.PhaseFailed, "a", 1, event.PhaseData{Reason: "no evidence", WillRetry: true}),
		phaseEvent(event.PhaseStarted, "a", 2, nil), // in flight when the harness died
	)
	appendSeq(t, db, "run-2",
		planEvent(onePhaseMission),
		phaseEvent(event.PhaseStarted, "a", 1, nil), // another run's: untouched
	)

	got, err := db.InterruptAttempts(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("InterruptAttempts = %+v, want one attempt", got)
	}
	a := got[0]
	if a.PhaseID != "a" || a.Attempt != 2 || a.Status != event.StatusInterrupted ||
		a.Reason != "the harness stopped during this attempt" || !a.FinishedAt.Equal(clock.Now()) {
		t.Errorf("interrupted attempt = %+v", a)
	}

	as, err := db.Attempts(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, a := range as {
		statuses = append(statuses, a.Status)
	}
	if want := []string{event.StatusFailed, event.StatusInterrupted}; !reflect.DeepEqual(statuses, want) {
		t.Errorf("attempt statuses = %v, want %v", statuses, want)
	}
	if !reflect.DeepEqual(as[1], a) {
		t.Errorf("stored attempt = %+v\nreturned %+v", as[1], a)
	}
	if p := phaseByID(t, db, "run-1", "a"); p.Status != event.StatusPending || p.Attempts != 2 {
		t.Errorf("phase = %s attempts %d, want pending 2", p.Status, p.Attempts)
	}
	if p := phaseByID(t, db, "run-2", "a"); p.Status != event.StatusRunning {
		t.Errorf("run-2 phase = %s, want running", p.Status)
	}

	// Nothing is running any more.
	if got, err := db.InterruptAttempts(ctx, "run-1"); err != nil || len(got) != 0 {
		t.Errorf("second InterruptAttempts = %+v, %v; want none", got, err)
	}
}
