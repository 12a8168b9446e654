package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"agent/event"
	"agent/store"
)

// Store is what the engine needs from the database; *store.DB has it.
type Store interface {
	CreateJob(ctx context.Context, j *store.Job) error
	UpdateJob(ctx context.Context, j *store.Job) error
	GetJob(ctx context.Context, idOrName string) (*store.Job, error)
	ListJobs(ctx context.Context) ([]store.Job, error)
	DeleteJob(ctx context.Context, id string) error
	SetJobEnabled(ctx context.Context, id string, enabled bool, next time.Time) error

	DueJobs(ctx context.Context, now time.Time) ([]store.Job, error)
	NextRunAt(ctx context.Context) (time.Time, error)
	FireTicks(ctx context.Context, fs []store.Firing) ([]store.Fired, error)
	ClaimTick(ctx context.Context, jobID string, scheduledFor time.Time, attempt int, status string) (store.JobRun, error)
	UpdateJobRun(ctx context.Context, r store.JobRun) error
	JobRuns(ctx context.Context, jobID string, limit int) ([]store.JobRun, error)
	RunningJobRuns(ctx context.Context, jobID string) ([]store.JobRun, error)
}

// Config defaults.
const (
	DefaultPollInterval      = 5 * time.Second
	DefaultMaxConcurrentRuns = 2
	DefaultMissedGrace       = time.Minute
)

// ErrNotRunning is returned by RunNow when the engine is not started
// (scheduling is off).
var ErrNotRunning = errors.New("scheduler is not running")

// errStopped and errDeleted say why a tick's context ended.
var (
	errStopped = errors.New("the scheduler stopped")
	errDeleted = errors.New("the job was deleted")
)

// Config is what an Engine needs. Zero values take the defaults.
type Config struct {
	Store      Store      // required
	Dispatcher Dispatcher // required
	Clock      Clock      // default: the wall clock
	Rand       func() float64
	// PollInterval is the longest the engine sleeps between looks at the
	// store; it sleeps less when a job is due sooner. Default 5s.
	PollInterval time.Duration
	// MaxConcurrentRuns bounds runs in flight across all jobs; further
	// ticks wait, first come first served, as queued. Default 2.
	MaxConcurrentRuns int
	// RecoveryPolicy is the missed-run policy of jobs whose policy sets
	// none: MissedSkip (default) or MissedRunOnceOnRecovery.
	RecoveryPolicy string
	// MissedGrace is how late a tick may be found and still run as
	// scheduled; a later one, or one followed by another tick already due,
	// was missed (the gateway was down, or the clock jumped). Default 1m.
	MissedGrace time.Duration
	// CheckTools, if set, vets a job's tool allowlist when the job is
	// saved and again before each dispatch.
	CheckTools func(tools []string) error
	// Events receives job.* events. It must not block or call the Engine.
	Events func(event.Event)
	Logger *slog.Logger // default: discard
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxConcurrentRuns == 0 {
		c.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	if c.RecoveryPolicy == "" {
		c.RecoveryPolicy = MissedSkip
	}
	if c.MissedGrace == 0 {
		c.MissedGrace = DefaultMissedGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("scheduler config: store is required")
	case c.Dispatcher == nil:
		return errors.New("scheduler config: dispatcher is required")
	case c.PollInterval < 0:
		return fmt.Errorf("scheduler config: poll interval must be positive, got %s", c.PollInterval)
	case c.MaxConcurrentRuns < 0:
		return fmt.Errorf("scheduler config: max concurrent runs must be positive, got %d", c.MaxConcurrentRuns)
	case c.MissedGrace < 0:
		return fmt.Errorf("scheduler config: missed grace must be positive, got %s", c.MissedGrace)
	case c.RecoveryPolicy != MissedSkip && c.RecoveryPolicy != MissedRunOnceOnRecovery:
		return fmt.Errorf("scheduler config: recovery policy %q: want %s or %s", c.RecoveryPolicy, MissedSkip, MissedRunOnceOnRecovery)
	}
	return nil
}

// Engine fires due ticks of scheduled jobs. Its job methods (CreateJob,
// ListJobs, …) work whether or not it is started; ticks fire, and RunNow
// works, only between Start and Stop.
type Engine struct {
	cfg   Config
	store Store
	clock Clock
	log   *slog.Logger
	slots *limiter
	wake  chan struct{} // a job changed: look at the store again

	mu      sync.Mutex
	running bool
	ctx     context.Context // of the running engine; its cancellation stops ticks
	cancel  context.CancelCauseFunc
	jobs    map[string]*jobState // jobs with ticks in flight
	wg      sync.WaitGroup       // the loop and every tick

	// idle, in tests, is called each time the loop has armed its timer
	// for wait and is about to sleep.
	idle func(wait time.Duration)
}

// jobState is a job's ticks in flight, for the overlap policy.
type jobState struct {
	active  int                // ticks dispatching, running, retrying or waiting for a slot
	parked  int                // of those, ticks whose run waits for a person or a time
	pending *tick              // queue_one: the tick waiting for active to reach 0
	ticks   map[*tick]struct{} // all of them, to cancel on delete
}

// New returns an engine; it fires nothing until Start.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Engine{
		cfg:   cfg,
		store: cfg.Store,
		clock: cfg.Clock,
		log:   cfg.Logger,
		slots: newLimiter(cfg.MaxConcurrentRuns),
		wake:  make(chan struct{}, 1),
		jobs:  make(map[string]*jobState),
	}, nil
}

// Start starts firing ticks and returns at once. Job runs a previous
// process left queued or running are recorded as failed, as interrupted
// (a claimed tick is never run twice), unless the Dispatcher hands the
// run back (Reattacher). Ticks missed while nothing was running get the
// job's missed-run policy on the first look at the store.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		return errors.New("start scheduler: already started")
	}
	stale, err := e.store.RunningJobRuns(ctx, "")
	if err != nil {
		return fmt.Errorf("start scheduler: %w", err)
	}
	var adopted []*tick
	now := e.clock.Now()
	for _, r := range stale {
		if t := e.reattach(ctx, r); t != nil {
			adopted = append(adopted, t)
			continue
		}
		r.Status, r.CompletedAt = event.StatusFailed, now
		r.ErrorText = "interrupted: the gateway stopped before the run ended"
		if err := e.store.UpdateJobRun(ctx, r); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("start scheduler: %w", err)
		}
	}
	e.ctx, e.cancel = context.WithCancelCause(ctx)
	e.running = true
	for _, t := range adopted {
		e.adopt(t)
	}
	e.wg.Add(1)
	go e.loop(e.ctx)
	return nil
}

// reattach returns a tick for a run the previous engine left running, if
// the Dispatcher still has that run.
func (e *Engine) reattach(ctx context.Context, r store.JobRun) *tick {
	ra, ok := e.cfg.Dispatcher.(Reattacher)
	if !ok || r.Status != event.StatusRunning && r.Status != event.StatusWaiting || r.RunID == "" {
		return nil
	}
	row, err := e.store.GetJob(ctx, r.JobID)
	if err != nil {
		return nil
	}
	j, err := jobFromRow(*row)
	if err != nil {
		return nil
	}
	done, ok := ra.Reattach(r.RunID)
	if !ok || done == nil {
		return nil
	}
	return &tick{job: j, run: r, trigger: TriggerRecovery, adopted: done}
}

// adopt starts watching a reattached run (e.mu held). Its run is already
// going, so it takes a slot whether or not one is free.
func (e *Engine) adopt(t *tick) {
	js := e.jobs[t.job.ID]
	if js == nil {
		js = &jobState{ticks: make(map[*tick]struct{})}
		e.jobs[t.job.ID] = js
	}
	t.ctx, t.cancel = context.WithCancelCause(e.ctx)
	js.active++
	js.ticks[t] = struct{}{}
	e.slots.take()
	e.wg.Add(1)
	go e.runTick(t)
}

// Stop stops firing ticks, cancels the runs in flight (recording them as
// cancelled) and returns when every run it dispatched has ended.
func (e *Engine) Stop() {
	e.mu.Lock()
	if !e.running {
		e.mu.Unlock()
		return
	}
	e.running = false
	e.cancel(errStopped)
	e.mu.Unlock()
	e.wg.Wait()
}

// nudge wakes the loop after a job changed, so a new next_run_at that is
// sooner than its current sleep is not missed.
func (e *Engine) nudge() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// loop looks for due jobs, then sleeps until the earliest next_run_at or
// PollInterval, whichever is sooner; an idle engine costs two index reads
// per PollInterval whatever the number of jobs.
func (e *Engine) loop(ctx context.Context) {
	defer e.wg.Done()
	for ctx.Err() == nil {
		wait := e.scan(ctx)
		if wait <= 0 {
			continue
		}
		timer := e.clock.After(wait)
		if e.idle != nil {
			e.idle(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer:
		case <-e.wake:
		}
	}
}

// scan fires the due jobs and returns how long to sleep.
func (e *Engine) scan(ctx context.Context) time.Duration {
	poll := e.cfg.PollInterval
	now := e.clock.Now()
	due, err := e.store.DueJobs(ctx, now)
	if err != nil {
		e.logError(ctx, "read due jobs", err)
		return poll
	}
	if len(due) > 0 {
		if err := e.fire(ctx, due, now); err != nil {
			e.logError(ctx, "fire ticks", err)
			return poll
		}
	}
	next, err := e.store.NextRunAt(ctx)
	if err != nil {
		e.logError(ctx, "read next run time", err)
		return poll
	}
	if !next.IsZero() {
		return min(poll, next.Sub(e.clock.Now()))
	}
	return poll
}

func (e *Engine) logError(ctx context.Context, what string, err error) {
	if ctx.Err() == nil {
		e.log.Error("scheduler: "+what, "err", err)
	}
}

// fireBatch bounds one claim transaction.
const fireBatch = 4096

// fire decides each due job's tick, claims the ticks and advances the
// jobs' next_run_at in batched transactions, then starts the claimed
// ticks. It holds e.mu throughout, so no RunNow interleaves with the
// overlap decisions, and starts ticks only after the last batch: their
// bookkeeping writes would otherwise queue the later batches behind them
// when many jobs share a minute.
func (e *Engine) fire(ctx context.Context, due []store.Job, now time.Time) error {
	var evs []event.Event
	defer func() { e.publish(evs...) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return nil
	}
	var claimed []planned
	var err error
	for len(due) > 0 && err == nil {
		n := min(fireBatch, len(due))
		var c []planned
		c, err = e.claim(ctx, due[:n], now)
		claimed = append(claimed, c...)
		due = due[n:]
	}
	// Claimed ticks run even if a later batch failed: nothing else would.
	for _, p := range claimed {
		if p.run.Status == event.StatusSkipped {
			evs = append(evs, e.skippedEvent(p.job, p.run, p.trigger, p.run.ErrorText))
			continue
		}
		evs = append(evs, e.triggeredEvent(p.job, p.run, p.trigger))
		e.launch(p.job, p.run, p.trigger)
	}
	return err
}

// planned is one due job's decision.
type planned struct {
	job     Job
	trigger string
	run     store.JobRun // the claimed tick, once FireTicks took it
}

// claim plans a batch of due jobs and commits it (e.mu held). It returns
// the ticks it claimed.
func (e *Engine) claim(ctx context.Context, due []store.Job, now time.Time) ([]planned, error) {
	fs := make([]store.Firing, 0, len(due))
	plans := make([]planned, 0, len(due))
	for _, row := range due {
		j, err := jobFromRow(row)
		var f store.Firing
		var p planned
		if err == nil {
			if f, p = e.plan(j, now); f.Next.IsZero() {
				err = fmt.Errorf("job %s: schedule %q has no tick in the next five years", j.Name, j.CronExpr)
			}
		}
		if err != nil {
			// A row that cannot be scheduled would be due forever: pause it.
			e.log.Error("scheduler: pausing job that cannot be scheduled", "job_id", row.ID, "err", err)
			if err := e.store.SetJobEnabled(ctx, row.ID, false, time.Time{}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			continue
		}
		fs = append(fs, f)
		plans = append(plans, p)
	}
	fired, err := e.store.FireTicks(ctx, fs)
	if err != nil {
		return nil, err
	}
	var claimed []planned
	for i, res := range fired {
		if res.Claimed {
			plans[i].run = *fs[i].Run
			claimed = append(claimed, plans[i])
		}
	}
	return claimed, nil
}

// plan decides what one due job does at now. The ticks due since its
// next_run_at coalesce into the latest: it runs as scheduled if it is at
// most MissedGrace late. Otherwise it was missed too (the gateway was
// down, or the clock jumped), and the missed-run policy runs it once or
// not at all.
func (e *Engine) plan(j Job, now time.Time) (store.Firing, planned) {
	last, next := lastTick(j.Schedule, j.NextRunAt, now)
	tickAt, trigger := last, TriggerSchedule
	if now.Sub(last) > e.cfg.MissedGrace {
		missed := j.Policy.Missed
		if missed == "" {
			missed = e.cfg.RecoveryPolicy
		}
		if missed == MissedRunOnceOnRecovery {
			trigger = TriggerRecovery
		} else {
			tickAt = time.Time{}
		}
		e.log.Info("scheduler: missed ticks", "job_id", j.ID, "name", j.Name,
			"first", j.NextRunAt, "last", last, "policy", missed)
	} else if last.After(j.NextRunAt) {
		e.log.Info("scheduler: ticks superseded by a later one", "job_id", j.ID, "name", j.Name,
			"first", j.NextRunAt, "running", last)
	}
	f := store.Firing{JobID: j.ID, From: j.NextRunAt, Next: next}
	if !tickAt.IsZero() {
		status, reason := e.admit(j)
		f.Run = &store.JobRun{ScheduledFor: tickAt, Attempt: 1, Status: status, ErrorText: reason}
	}
	return f, planned{job: j, trigger: trigger}
}

// lastTick returns the latest tick at or before now and the tick after
// it, given that from is a tick at or before now. It starts its walk close
// to now, so a per-second job after a month of downtime costs at most a
// minute of ticks.
func lastTick(s Schedule, from, now time.Time) (last, next time.Time) {
	last = from
	for _, back := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		if c := now.Add(-back); c.After(last) {
			if t := s.Next(c); !t.IsZero() && !t.After(now) {
				last = t
				break
			}
		}
	}
	for next = s.Next(last); !next.IsZero() && !next.After(now); next = s.Next(next) {
		last = next
	}
	return last, next
}

// admit applies the overlap policy (e.mu held): a new tick of j is queued
// (it runs now, or when a slot or its turn comes) or skipped.
func (e *Engine) admit(j Job) (status, reason string) {
	js := e.jobs[j.ID]
	if js == nil || js.active == 0 || j.Policy.Overlap == OverlapParallel {
		return event.StatusQueued, ""
	}
	if j.Policy.Overlap == OverlapQueueOne {
		if js.pending == nil {
			return event.StatusQueued, ""
		}
		return event.StatusSkipped, "skipped: a run is in progress and another tick is already queued (overlap queue_one)"
	}
	if js.parked == js.active {
		return event.StatusSkipped, "skipped: the previous run is still in progress, waiting for a person or a time (overlap skip_if_running)"
	}
	return event.StatusSkipped, "skipped: the previous run is still in progress (overlap skip_if_running)"
}

// launch starts a claimed tick (e.mu held). It joins the queue for a
// run slot now, so slots go to ticks in the order they were claimed;
// behind a running tick of a queue_one job it first waits for its turn.
func (e *Engine) launch(j Job, run store.JobRun, trigger string) {
	js := e.jobs[j.ID]
	if js == nil {
		js = &jobState{ticks: make(map[*tick]struct{})}
		e.jobs[j.ID] = js
	}
	t := &tick{job: j, run: run, trigger: trigger}
	t.ctx, t.cancel = context.WithCancelCause(e.ctx)
	if js.active > 0 && j.Policy.Overlap == OverlapQueueOne {
		t.ready = make(chan struct{})
		js.pending = t
	} else {
		js.active++
		t.slot = e.slots.enqueue()
	}
	js.ticks[t] = struct{}{}
	e.wg.Add(1)
	go e.runTick(t)
}

// finish releases a tick's hold on its job and lets a pending tick go.
func (e *Engine) finish(t *tick) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t.cancel(nil)
	if t.slot != nil {
		e.slots.abandon(t.slot) // cancelled while queued for a slot
	}
	js := e.jobs[t.job.ID]
	delete(js.ticks, t)
	if js.pending == t {
		js.pending = nil // cancelled while waiting for its turn
	} else {
		js.active--
		if js.active == 0 && js.pending != nil {
			p := js.pending
			js.pending = nil
			js.active++
			p.slot = e.slots.enqueue()
			close(p.ready)
		}
	}
	if len(js.ticks) == 0 {
		delete(e.jobs, t.job.ID)
	}
}

// RunNow runs a job once, now, under the same overlap, retry and timeout
// policy as its scheduled ticks, whether or not the job is paused. A tick
// the overlap policy skips is returned with status skipped.
func (e *Engine) RunNow(ctx context.Context, id string) (JobRun, error) {
	row, err := e.store.GetJob(ctx, id)
	if err != nil {
		return JobRun{}, err
	}
	j, err := jobFromRow(*row)
	if err != nil {
		return JobRun{}, err
	}
	var evs []event.Event
	defer func() { e.publish(evs...) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running || e.ctx.Err() != nil {
		return JobRun{}, fmt.Errorf("run job %s now: %w", j.Name, ErrNotRunning)
	}
	at := e.clock.Now().UTC().Truncate(time.Microsecond)
	status, reason := e.admit(j)
	run, err := e.store.ClaimTick(ctx, j.ID, at, 1, status)
	if err != nil {
		return JobRun{}, fmt.Errorf("run job %s now: %w", j.Name, err)
	}
	if status == event.StatusSkipped {
		run.ErrorText = reason
		if err := e.store.UpdateJobRun(ctx, run); err != nil {
			return JobRun{}, fmt.Errorf("run job %s now: %w", j.Name, err)
		}
		evs = append(evs, e.skippedEvent(j, run, TriggerManual, reason))
		return jobRunFromRow(run), nil
	}
	evs = append(evs, e.triggeredEvent(j, run, TriggerManual))
	e.launch(j, run, TriggerManual)
	return jobRunFromRow(run), nil
}

func (e *Engine) triggeredEvent(j Job, run store.JobRun, trigger string) event.Event {
	return e.newEvent(EventJobTriggered, TickData{
		JobID: j.ID, Name: j.Name, ScheduledFor: run.ScheduledFor.In(j.Schedule.Location()),
		Attempt: 1, MaxAttempts: j.Policy.Retry.MaxAttempts, JobRunID: run.ID, Trigger: trigger,
	}, "", 1)
}

func (e *Engine) skippedEvent(j Job, run store.JobRun, trigger, reason string) event.Event {
	return e.newEvent(EventJobSkippedOverlap, TickData{
		JobID: j.ID, Name: j.Name, ScheduledFor: run.ScheduledFor.In(j.Schedule.Location()),
		Attempt: 1, MaxAttempts: j.Policy.Retry.MaxAttempts, JobRunID: run.ID, Trigger: trigger,
		Reason: reason,
	}, "", 1)
}
