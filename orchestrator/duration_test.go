package orchestrator

import (
	"context"
	"testing"

	"agent/adapter"
	"agent/event"
	"agent/plan"
)

// TestAttemptDurationIsItsClock: an attempt's recorded duration_ms is the
// time from its phase.started to its phase.completed or phase.failed,
// which is how long the boards' clocks show it running: its verification
// (a check that takes a second here) included, passed or failed.
func TestAttemptDurationIsItsClock(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	check := ph("check")
	check.Evidence = plan.Evidence{Type: plan.EvidenceProgrammatic, Command: "sleep 1; test -f done.txt"}
	fx.adopt(check)
	fx.spawn.ChildFunc = func(_ context.Context, c *child) *adapter.Result {
		if c.spec.Attempt == 2 {
			c.writeFile("done.txt", "ok")
		}
		return completed("done")
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v", out)
	}
	started := map[int]event.Event{}
	for _, e := range fx.sink.ofType(event.PhaseStarted) {
		started[e.Attempt] = e
	}
	ends := append(fx.sink.ofType(event.PhaseFailed), fx.sink.ofType(event.PhaseCompleted)...)
	if len(ends) != 2 || len(started) != 2 {
		t.Fatalf("%d attempts started, %d ended; want 2 and 2", len(started), len(ends))
	}
	for _, e := range ends {
		var d event.PhaseData
		if err := e.Decode(&d); err != nil {
			t.Fatal(err)
		}
		clock := e.TS.Sub(started[e.Attempt].TS).Milliseconds()
		if d.DurationMS < 1000 || d.DurationMS < clock-1 || d.DurationMS > clock+1 {
			t.Errorf("attempt %d (%s): duration_ms %d, want the %d ms from its phase.started to its end, the check's second included",
				e.Attempt, e.Type, d.DurationMS, clock)
		}
	}
}
