package scheduler

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/event"
)

// send delivers r on a run's done channel without ending it: that the
// run waits, or goes on.
func (d *fakeDispatcher) send(t *testing.T, runID string, r Result) {
	t.Helper()
	for _, c := range d.starts() {
		if c.runID == runID {
			select {
			case c.done <- r:
				return
			case <-time.After(waitTimeout):
				t.Fatalf("the engine did not take %+v of %s", r, runID)
			}
		}
	}
	t.Fatalf("no run %s", runID)
}

// A job's run that waits for a person (docs/PROTOCOL.md#waits) has not
// failed and is not retried. It still holds its job, so skip_if_running
// skips a tick meanwhile, saying why; it frees its run slot, so another
// job's run starts; and its timeout stops while it waits and starts anew
// when it goes on.
func TestWaitingRunHoldsItsJobNotASlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0, func(c *Config) { c.MaxConcurrentRuns = 1 })
	deploy := h.create(JobSpec{Name: "deploy", CronExpr: "0 11 * * *", Policy: policy(func(p *Policy) { p.Timeout = 5 * time.Minute })})
	report := h.create(JobSpec{Name: "report", CronExpr: "0 12 * * *", Policy: policy(func(p *Policy) { p.Timeout = time.Hour })})
	h.start()
	eleven := time.Date(2026, 1, 3, 11, 0, 0, 0, time.UTC)
	h.advanceTo(eleven)
	h.disp.waitStarts(t, 1)
	h.rec.wait(t, EventJobStarted, 1)

	h.disp.send(t, "run-1", Result{Status: event.StatusWaiting})
	h.waitStatuses(deploy.ID, "waiting")
	h.advance(time.Second) // a tick of its own for run_now
	skipped, err := h.eng.RunNow(ctx, deploy.ID)
	if err != nil || skipped.Status != event.StatusSkipped || !strings.Contains(skipped.ErrorText, "waiting for a person") {
		t.Errorf("run_now while the run waits = %+v, %v; want skipped, saying it waits", skipped, err)
	}
	if _, err := h.eng.RunNow(ctx, report.ID); err != nil {
		t.Fatal(err)
	}
	if calls := h.disp.waitStarts(t, 2); calls[1].job.ID != report.ID {
		t.Errorf("second run is %s's, want report's: the waiting run frees its slot", calls[1].job.Name)
	}

	h.advanceTo(eleven.Add(10 * time.Minute)) // past the timeout, waiting
	h.disp.send(t, "run-1", Result{Status: event.StatusRunning})
	h.waitStatuses(deploy.ID, "running", "skipped")
	h.advanceTo(eleven.Add(14 * time.Minute))
	if _, cancels, _ := h.disp.snapshot(); len(cancels) != 0 {
		t.Fatalf("cancelled %v: time spent waiting counted against the timeout", cancels)
	}
	h.advanceTo(eleven.Add(15 * time.Minute)) // 5 minutes since it went on
	if got := h.disp.waitCancels(t, 1); got[0] != "run-1" {
		t.Errorf("cancelled %v, want run-1 once it ran 5 minutes", got)
	}
	if f := h.rec.wait(t, EventJobFailed, 1); f[0].Error != "timed out after 5m0s" {
		t.Errorf("job.failed %+v", f[0])
	}
	if n := len(h.rec.of(EventJobFailed)); n != 1 {
		t.Errorf("%d job.failed, want only the timeout's: waiting is no failure", n)
	}
	h.disp.finish("run-2", Result{Status: event.StatusCompleted})
	h.rec.wait(t, EventJobCompleted, 1)
}

// A gateway that stops while a job's run waits leaves it waiting: not
// cancelled, not failed. The next engine takes the run back, still
// waiting (it holds no slot), and records how it ends.
func TestStopLeavesAWaitingRunWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0, func(c *Config) { c.MaxConcurrentRuns = 1 })
	deploy := h.create(JobSpec{Name: "deploy", CronExpr: "0 11 * * *"})
	report := h.create(JobSpec{Name: "report", CronExpr: "0 12 * * *"})
	h.start()
	eleven := time.Date(2026, 1, 3, 11, 0, 0, 0, time.UTC)
	h.advanceTo(eleven)
	first := h.disp.waitStarts(t, 1)[0]
	h.disp.send(t, "run-1", Result{Status: event.StatusWaiting})
	h.waitStatuses(deploy.ID, "waiting")
	close(first.done) // the gateway stops watching it
	h.stop()
	if _, cancels, _ := h.disp.snapshot(); len(cancels) != 0 {
		t.Errorf("stopping cancelled %v", cancels)
	}
	h.waitStatuses(deploy.ID, "waiting")
	if n := len(h.rec.of(EventJobFailed)); n != 0 {
		t.Errorf("%d job.failed for a run that waits", n)
	}

	alive := make(chan Result, 2)
	h.cfg.Dispatcher = &reattachDispatcher{fakeDispatcher: h.disp, alive: map[string]chan Result{"run-1": alive}}
	h.eng = h.newEngine()
	h.start()
	h.waitStatuses(deploy.ID, "waiting")
	if _, err := h.eng.RunNow(ctx, report.ID); err != nil {
		t.Fatal(err)
	}
	if calls := h.disp.waitStarts(t, 2); calls[1].job.ID != report.ID {
		t.Errorf("second run is %s's, want report's: the adopted waiting run holds no slot", calls[1].job.Name)
	}
	alive <- Result{Status: event.StatusRunning}
	alive <- Result{Status: event.StatusCompleted}
	close(alive)
	h.rec.wait(t, EventJobCompleted, 1)
	h.waitStatuses(deploy.ID, "completed")
	if got := h.rec.of(EventJobCompleted); !slices.ContainsFunc(got, func(d TickData) bool { return d.RunID == "run-1" }) {
		t.Errorf("job.completed %+v, want run-1's", got)
	}
	h.disp.finish("run-2", Result{Status: event.StatusCompleted})
	h.rec.wait(t, EventJobCompleted, 2)
	if h.eng.slots.free != 1 {
		t.Errorf("%d slots free once both ended, want 1", h.eng.slots.free)
	}
}
