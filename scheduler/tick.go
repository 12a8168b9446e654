package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"agent/event"
	"agent/store"
)

// tick is one claimed tick of a job in flight: its attempts run one after
// another in runTick.
type tick struct {
	job     Job
	run     store.JobRun    // the attempt-1 row
	trigger string          // TriggerSchedule, TriggerRecovery or TriggerManual
	ctx     context.Context // ends on Stop or when the job is deleted
	cancel  context.CancelCauseFunc
	// ready, for a queue_one tick behind a running one, is closed when
	// its turn comes; nil if it may go at once.
	ready chan struct{}
	// slot is the tick's place in the queue for a run slot, nil when it
	// holds none and waits for none. Set under e.mu before the tick's
	// goroutine may read it (at launch, or before ready is closed).
	slot chan struct{}
	// adopted is the done channel of a run a previous engine dispatched
	// for t.run and the Dispatcher handed back (Reattacher): the first
	// attempt is watched, not started.
	adopted <-chan Result
}

// outcome is how one attempt ended.
type outcome struct {
	status string // event.StatusCompleted, JobRunFailed or JobRunCancelled
	err    string
	runID  string
}

// runTick runs a tick's attempts: each waits for a slot, is dispatched,
// and ends when its run's done channel closes; a failed attempt is retried
// after a backoff until MaxAttempts. Attempts never overlap, because the
// next starts only after the previous run's process is gone.
func (e *Engine) runTick(t *tick) {
	defer e.wg.Done()
	last := e.runAttempts(t)
	// The job is free again before its last event goes out, so a client
	// reacting to job.completed is not told its run_now overlaps.
	e.finish(t)
	if last != nil {
		e.publish(*last)
	}
}

// runAttempts runs the tick's attempts and returns its last event.
func (e *Engine) runAttempts(t *tick) *event.Event {
	bg := context.WithoutCancel(t.ctx) // bookkeeping outlives cancellation
	if t.ready != nil {
		select {
		case <-t.ready:
		case <-t.ctx.Done():
			e.record(bg, t.run, outcome{status: event.StatusCancelled, err: cancelText(t.ctx)})
			return nil
		}
	}
	p := t.job.Policy
	row := t.run
	for attempt := row.Attempt; ; attempt++ {
		if attempt > t.run.Attempt {
			r, err := e.store.ClaimTick(bg, t.job.ID, t.run.ScheduledFor, attempt, event.StatusQueued)
			if err != nil {
				// Taken by another process, or the job was deleted.
				e.logError(t.ctx, "claim retry", err)
				return nil
			}
			row = r
		}
		var out outcome
		if t.adopted != nil && attempt == t.run.Attempt {
			out = e.watchAdopted(t, row)
		} else {
			out = e.attempt(t, row)
		}
		data := e.tickData(t, row, out)
		switch {
		case out.status == event.StatusWaiting:
			// The engine stopped while the run waits: it waits on, and
			// the next engine reattaches it.
			return nil
		case out.status == event.StatusCompleted:
			ev := e.newEvent(EventJobCompleted, data, out.runID, attempt)
			return &ev
		case out.status == event.StatusFailed && attempt < p.Retry.MaxAttempts && t.ctx.Err() == nil:
			delay := p.Retry.Delay(attempt, e.cfg.Rand())
			backoff := e.clock.After(delay) // armed before the event, so a test that sees it can move the clock
			data.WillRetry, data.RetryInMS = ptr(true), delay.Milliseconds()
			e.publish(e.newEvent(EventJobFailed, data, out.runID, attempt))
			select {
			case <-backoff:
			case <-t.ctx.Done():
				// The next attempt records the cancellation and ends the tick.
			}
		default:
			// Retries used up, cancelled, or the engine is stopping.
			data.WillRetry = ptr(false)
			ev := e.newEvent(EventJobFailed, data, out.runID, attempt)
			return &ev
		}
	}
}

// attempt runs one attempt: slot, dispatch, wait for the run to end or
// time out, record the outcome in row.
func (e *Engine) attempt(t *tick, row store.JobRun) outcome {
	bg := context.WithoutCancel(t.ctx)
	if t.slot == nil {
		t.slot = e.slots.enqueue() // a retry queues when its backoff ends
	}
	cancelled := outcome{status: event.StatusCancelled}
	select {
	case <-t.slot:
		t.slot = nil
	case <-t.ctx.Done():
		cancelled.err = cancelText(t.ctx)
		return e.record(bg, row, cancelled) // finish gives up the place in the queue
	}
	if t.ctx.Err() != nil { // both were ready: never start a run once cancelled
		e.slots.release()
		cancelled.err = cancelText(t.ctx)
		return e.record(bg, row, cancelled)
	}
	out, ok := e.dispatch(t, row)
	e.slots.release()
	if ok {
		row.RunID, row.Status, row.StartedAt = out.runID, event.StatusRunning, out.startedAt
	}
	return e.record(bg, row, out.outcome)
}

// dispatched is an attempt that got as far as a run.
type dispatched struct {
	outcome
	startedAt time.Time
}

// dispatch starts the run and waits until it has ended and its process is
// gone. ok is false if no run was started.
func (e *Engine) dispatch(t *tick, row store.JobRun) (d dispatched, ok bool) {
	bg := context.WithoutCancel(t.ctx)
	p := t.job.Policy
	fail := func(err error) (dispatched, bool) {
		return dispatched{outcome: outcome{status: event.StatusFailed, err: err.Error()}}, false
	}
	if e.cfg.CheckTools != nil {
		if err := e.cfg.CheckTools(p.Tools); err != nil {
			return fail(fmt.Errorf("tools: %w", err))
		}
	}
	scheduledFor := row.ScheduledFor.In(t.job.Schedule.Location())
	prompt, err := RenderPrompt(t.job.PromptTemplate, PromptData{
		JobID: t.job.ID, JobName: t.job.Name, ScheduledFor: scheduledFor, Attempt: row.Attempt,
	})
	if err != nil {
		return fail(err)
	}
	runID, done, err := e.cfg.Dispatcher.Start(t.ctx, t.job, Tick{
		JobRunID: row.ID, ScheduledFor: scheduledFor, Attempt: row.Attempt, MaxAttempts: p.Retry.MaxAttempts,
		Manual: t.trigger == TriggerManual, Prompt: prompt, Tools: p.Tools, Timeout: p.Timeout,
		Sandbox: p.Sandbox, Network: p.Network, MaxTokens: p.MaxTokens, MaxCost: p.MaxCost, Ask: p.Ask,
		OutputSchema: p.OutputSchema,
	})
	if err != nil {
		if t.ctx.Err() != nil {
			return dispatched{outcome: outcome{status: event.StatusCancelled, err: cancelText(t.ctx)}}, false
		}
		return fail(fmt.Errorf("dispatch: %w", err))
	}
	if done == nil {
		return fail(errors.New("dispatch: the dispatcher returned no done channel"))
	}
	d.runID, d.startedAt = runID, e.clock.Now()
	row.RunID, row.Status, row.StartedAt = runID, event.StatusRunning, d.startedAt
	if err := e.store.UpdateJobRun(bg, row); err != nil {
		e.logError(bg, "record job run start", err)
	}
	e.publish(e.newEvent(EventJobStarted, e.tickData(t, row, outcome{runID: runID}), runID, row.Attempt))
	d.outcome = e.wait(t, row, done, p.Timeout)
	return d, true
}

// watchAdopted waits for a run a previous engine started, under what is
// left of its timeout (all of it, once a waiting run goes on), holding
// the slot Start took for it.
func (e *Engine) watchAdopted(t *tick, row store.JobRun) outcome {
	left := max(0, row.StartedAt.Add(t.job.Policy.Timeout).Sub(e.clock.Now()))
	out := e.wait(t, row, t.adopted, left)
	e.slots.release()
	return e.record(context.WithoutCancel(t.ctx), row, out)
}

// wait waits until row's run has ended and its process is gone, cancelling
// it once it has run for timeout or when the tick is cancelled. While the
// run waits for a person or a time (docs/PROTOCOL.md#waits) it holds no
// process: its job run says waiting, its slot is free and its timeout
// stops; when it goes on it takes a slot again, at once, and has its
// whole timeout again, as the run's own timeout does for each drive. The
// engine stopping leaves a waiting run waiting. wait returns holding a
// slot, which the caller gives back.
func (e *Engine) wait(t *tick, row store.JobRun, done <-chan Result, timeout time.Duration) outcome {
	bg := context.WithoutCancel(t.ctx)
	expire := e.clock.After(timeout)
	parked := false
	record := func(status string) {
		row.Status = status
		if err := e.store.UpdateJobRun(bg, row); err != nil {
			e.logError(bg, "record job run "+status, err)
		}
	}
	park := func(on bool) {
		if on == parked {
			return
		}
		parked = on
		if on {
			expire = nil
			e.slots.release()
			e.countParked(t, 1)
			record(event.StatusWaiting)
			return
		}
		e.slots.take() // the run is going: the ticks behind it wait
		expire = e.clock.After(timeout)
		e.countParked(t, -1)
		record(event.StatusRunning)
	}
	if row.Status == event.StatusWaiting {
		park(true) // an adopted run that waits: no timeout runs
	}
	var out outcome
	for out.status == "" {
		select {
		case r, ok := <-done:
			switch {
			case ok && (r.Status == event.StatusWaiting || r.Status == event.StatusRunning):
				park(r.Status == event.StatusWaiting)
				continue
			case !ok && parked:
				// The dispatcher stopped watching (the gateway stops):
				// the run waits on, for the next engine.
				out = outcome{status: event.StatusWaiting}
			default:
				out = resultOutcome(r, ok)
			}
			drain(done)
		case <-expire:
			if r, ok, ended := endedMeanwhile(done); ended { // it ended as it timed out: its result stands
				out = resultOutcome(r, ok)
			} else {
				e.cfg.Dispatcher.Cancel(row.RunID)
				out = outcome{status: event.StatusFailed, err: fmt.Sprintf("timed out after %s", t.job.Policy.Timeout)}
			}
			drain(done)
		case <-t.ctx.Done():
			if parked && errors.Is(context.Cause(t.ctx), errStopped) {
				// Nothing to stop: it waits on, for the next engine.
				drain(done)
				out = outcome{status: event.StatusWaiting}
				break
			}
			e.cfg.Dispatcher.Cancel(row.RunID)
			drain(done)
			out = outcome{status: event.StatusCancelled, err: cancelText(t.ctx)}
		}
	}
	if parked {
		e.countParked(t, -1)
		e.slots.take()
	}
	out.runID = row.RunID
	return out
}

// countParked counts a tick's run in or out of its job's parked ones.
func (e *Engine) countParked(t *tick, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if js := e.jobs[t.job.ID]; js != nil {
		js.parked += n
	}
}

// endedMeanwhile takes, without blocking, the run's Result if it has ended.
func endedMeanwhile(done <-chan Result) (r Result, ok, ended bool) {
	for {
		select {
		case r, ok = <-done:
			if ok && (r.Status == event.StatusWaiting || r.Status == event.StatusRunning) {
				continue
			}
			return r, ok, true
		default:
			return Result{}, false, false
		}
	}
}

// drain waits until done is closed: the run's process is gone.
func drain(done <-chan Result) {
	for range done {
	}
}

func resultOutcome(r Result, ok bool) outcome {
	switch {
	case !ok:
		return outcome{status: event.StatusFailed, err: "the run ended without a result"}
	case r.Status == event.StatusCompleted:
		return outcome{status: event.StatusCompleted}
	case r.Status == event.StatusCancelled:
		return outcome{status: event.StatusCancelled, err: r.Err}
	}
	if r.Err == "" {
		r.Err = "the run failed"
	}
	return outcome{status: event.StatusFailed, err: r.Err}
}

// record writes an attempt's end to its row and returns out. A run left
// waiting has no end yet: its row says waiting already.
func (e *Engine) record(ctx context.Context, row store.JobRun, out outcome) outcome {
	if out.status == event.StatusWaiting {
		return out
	}
	row.Status, row.ErrorText, row.CompletedAt = out.status, out.err, e.clock.Now()
	if out.runID != "" {
		row.RunID = out.runID
	}
	if err := e.store.UpdateJobRun(ctx, row); err != nil && !errors.Is(err, store.ErrNotFound) {
		e.logError(ctx, "record job run", err)
	}
	return out
}

func (e *Engine) tickData(t *tick, row store.JobRun, out outcome) TickData {
	return TickData{
		JobID: t.job.ID, Name: t.job.Name, ScheduledFor: row.ScheduledFor.In(t.job.Schedule.Location()),
		Attempt: row.Attempt, MaxAttempts: t.job.Policy.Retry.MaxAttempts, RunID: out.runID,
		JobRunID: row.ID, Trigger: t.trigger, Status: statusOf(out), Error: out.err,
	}
}

func statusOf(out outcome) string {
	switch out.status {
	case event.StatusCompleted, event.StatusFailed, event.StatusCancelled:
		return out.status
	}
	return ""
}

// cancelText says why a tick's context ended.
func cancelText(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return "cancelled: the scheduler stopped"
	}
	return "cancelled: " + cause.Error()
}

func ptr[T any](v T) *T { return &v }
