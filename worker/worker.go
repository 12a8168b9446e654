// Package worker is `agent worker` (README.md#a-small-cluster): a process that claims
// queued runs and harness phase attempts from the shared store and drives
// them, up to a number at once, each in an `agent runner` child, exactly
// as a gateway drives its own. Any number of workers on any number of
// machines share one store; a run's lease says which one drives it, and a
// worker that dies has its runs taken over by another once their leases
// expire. A harness run's driver only plans, queues its phase attempts
// and verifies them, so harness runs have slots of their own: a worker
// waiting on attempts never keeps them from being run.
package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"agent/event"
	"agent/store"
	"agent/supervisor"
)

// Config configures a worker.
type Config struct {
	DB  *store.DB
	Sup *supervisor.Supervisor // its owner holds every run this worker drives
	// Concurrency is how many children it runs at once, single runs and
	// phase attempts (default 1); it drives as many harness runs besides.
	Concurrency int
	// Poll is how often it looks for work when nothing told it of any
	// (default 1s); on PostgreSQL a queued run wakes it at once.
	Poll time.Duration
	// RunTimeout bounds each run whose options set no timeout; 0: none.
	RunTimeout time.Duration
	Logger     *slog.Logger

	// drive and driveAttempt drive what it claimed: Sup.Drive and
	// Sup.DriveAttempt, unless a test stands in for them.
	drive        func(context.Context, *store.Run, supervisor.Drive) (supervisor.End, error)
	driveAttempt func(context.Context, *store.AttemptUnit) error
	// listening, if set, is called each time it listens for queued runs
	// on a new connection (PostgreSQL): a test signal.
	listening func()
}

// reasonStopped is the detail of a run a worker interrupted when it
// stopped; the run goes back to the queue for another worker.
const reasonStopped = "worker stopped; requeued"

// stopPoll is how often a worker reads the stop requests of its runs.
const stopPoll = 250 * time.Millisecond

// job is a run or a phase attempt being driven.
type job struct {
	stop    context.CancelCauseFunc
	harness bool // a harness run: it has no child of its own to count
}

// Worker claims and drives runs until its context ends.
type Worker struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	live map[string]job // runs and attempts being driven, by id
	wg   sync.WaitGroup
	// freed wakes the claim loop when a run ends, and work when a run
	// is queued.
	freed chan struct{}
	work  chan struct{}
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Worker, error) {
	if cfg.DB == nil || cfg.Sup == nil {
		return nil, errors.New("worker: a store and a supervisor are required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.drive == nil {
		cfg.drive = cfg.Sup.Drive
	}
	if cfg.driveAttempt == nil {
		cfg.driveAttempt = cfg.Sup.DriveAttempt
	}
	return &Worker{
		cfg: cfg, log: cfg.Logger, live: map[string]job{},
		freed: make(chan struct{}, 1), work: make(chan struct{}, 1),
	}, nil
}

// Run claims and drives runs until ctx ends. Then it interrupts the runs
// it drives, puts them back in the queue for another worker, and returns
// once their children have exited.
func (w *Worker) Run(ctx context.Context) error {
	listen, stopListen := context.WithCancel(context.Background())
	defer stopListen()
	go func() {
		_ = w.cfg.DB.Listen(listen, []string{store.ChannelRuns}, func(channel, _ string) {
			wake(w.work)
			if channel == "" && w.cfg.listening != nil {
				w.cfg.listening()
			}
		})
	}()
	go w.watchStops(listen)

	poll := time.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	for ctx.Err() == nil {
		if w.claimAll(ctx) {
			continue
		}
		select {
		case <-ctx.Done():
		case <-poll.C:
			w.requeueStranded(ctx)
		case <-w.freed:
		case <-w.work:
		}
	}
	w.mu.Lock()
	w.log.Info("stopping: interrupting the runs and attempts this worker drives; they go back to the queue", "live", len(w.live))
	for _, j := range w.live {
		j.stop(supervisor.Interrupt(reasonStopped))
	}
	w.mu.Unlock()
	w.wg.Wait()
	w.log.Info("stopped")
	return nil
}

// claimAll claims work while it has free slots and there is some: phase
// attempts first (a harness waits on them), then single runs, then
// harness runs. It reports whether it should look again at once.
func (w *Worker) claimAll(ctx context.Context) bool {
	for {
		children, harnesses := w.busy()
		claimed := false
		if children < w.cfg.Concurrency {
			u, err := w.cfg.DB.ClaimAttempt(ctx, w.cfg.Sup.Owner(), w.cfg.Sup.LeaseTTL())
			if err != nil {
				return w.claimFailed(ctx, "claim a phase attempt", err)
			}
			if u != nil {
				w.start(u.String(), false, func(ctx context.Context) { w.attempt(ctx, u) })
				continue
			}
			claimed, err = w.claimRun(ctx, store.KindRun)
			if err != nil {
				return w.claimFailed(ctx, "claim a run", err)
			}
		}
		if !claimed && harnesses < w.cfg.Concurrency {
			var err error
			if claimed, err = w.claimRun(ctx, store.KindHarness); err != nil {
				return w.claimFailed(ctx, "claim a harness run", err)
			}
		}
		if !claimed {
			return false
		}
	}
}

// busy counts the children and the harness runs being driven.
func (w *Worker) busy() (children, harnesses int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.live {
		if j.harness {
			harnesses++
		} else {
			children++
		}
	}
	return children, harnesses
}

// claimRun claims and starts a queued run of kind; it reports whether
// there was one.
func (w *Worker) claimRun(ctx context.Context, kind string) (bool, error) {
	c, err := w.cfg.DB.ClaimRun(ctx, w.cfg.Sup.Owner(), w.cfg.Sup.LeaseTTL(), kind)
	if err != nil || c == nil {
		return false, err
	}
	w.start(c.Run.ID, kind == store.KindHarness, func(ctx context.Context) { w.drive(ctx, c) })
	return true, nil
}

func (w *Worker) claimFailed(ctx context.Context, what string, err error) bool {
	if ctx.Err() == nil {
		w.log.Error(what, "err", err)
	}
	return false
}

// start drives a claimed run or attempt on a goroutine of its own.
func (w *Worker) start(id string, harness bool, drive func(context.Context)) {
	ctx, cancel := context.WithCancelCause(context.Background())
	w.mu.Lock()
	w.live[id] = job{stop: cancel, harness: harness}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() {
			cancel(nil)
			w.mu.Lock()
			delete(w.live, id)
			w.mu.Unlock()
			wake(w.freed)
		}()
		drive(ctx)
	}()
}

// attempt runs one claimed phase attempt for the harness that queued it.
func (w *Worker) attempt(ctx context.Context, u *store.AttemptUnit) {
	log := w.log.With("run_id", u.RunID, "phase_id", u.PhaseID, "attempt", u.Attempt)
	log.Info("phase attempt claimed")
	if err := w.cfg.driveAttempt(ctx, u); err != nil {
		log.Error("the attempt's result was not recorded; its harness takes it back", "err", err)
		return
	}
	log.Info("phase attempt ended")
}

// drive drives one claimed run from run.started to its terminal event.
func (w *Worker) drive(ctx context.Context, c *store.Claim) {
	r := c.Run
	persist := context.WithoutCancel(ctx)
	log := w.log.With("run_id", r.ID, "session_id", r.SessionID)
	opts, err := supervisor.DecodeOptions(r)
	if err != nil {
		log.Error("run has unreadable options; leaving it to expire", "err", err)
		return
	}
	if opts.Timeout == 0 {
		opts.Timeout = supervisor.Duration(w.cfg.RunTimeout)
	}
	if stop := stopCause(r.StopRequest); stop != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		cancel(stop) // asked to stop while it waited: it ends at once
	}
	log.Info("run claimed", "kind", r.Kind, "resume", c.Resume, "taken_over", c.TakenOver)
	end, err := w.cfg.drive(ctx, r, supervisor.Drive{Options: opts, Resume: c.Resume, Child: true})
	if err != nil {
		log.Error("the end of the run was not recorded; another worker takes it over", "err", err)
		return
	}
	log.Info("run ended", "status", end.Data.Status, "exit_code", end.Data.ExitCode, "reason", end.Data.Reason)
	switch {
	case end.Type == event.RunWaiting:
		// Parked on a wait (docs/PROTOCOL.md#waits): the slot is free, and
		// the run waits in the queue until it may go on, for whichever
		// worker is free then; an answer from anywhere moves it up.
		at, queued, err := w.cfg.DB.QueueParkedRun(persist, r.ID)
		switch {
		case err != nil:
			log.Error("queue the waiting run to go on", "err", err)
		case !queued:
			log.Warn("the run waits for nothing; it stays parked until resumed")
		default:
			log.Info("run waits; queued to go on", "at", at.Format(time.RFC3339))
		}
	case end.Data.Detail == reasonStopped:
		if err := w.cfg.DB.QueueRun(persist, r.ID); err != nil {
			log.Error("requeue the run", "err", err)
		}
	case end.Data.Reason == event.ReasonRateLimited:
		// A harness the provider rate-limited (a single run waits, as
		// above): it waits in the queue until then, for whichever worker
		// is free.
		at := end.Data.ResumeAt(time.Now())
		if err := w.cfg.DB.QueueRunAt(persist, r.ID, at); err != nil {
			log.Error("queue the rate-limited run to resume", "err", err)
			return
		}
		log.Info("run paused by a rate limit; queued to resume", "at", at.Format(time.RFC3339))
	}
}

// requeueStranded queues the waiting runs that may go on but that a worker
// left claimed, dying between parking them and queueing them: any answer
// or deadline wakes a run that waits, whatever happened to its worker.
func (w *Worker) requeueStranded(ctx context.Context) {
	ids, _, err := w.cfg.DB.Wakeable(ctx, w.cfg.DB.Now())
	if err != nil {
		return // the next poll looks again
	}
	for _, id := range ids {
		if r, err := w.cfg.DB.GetRun(ctx, id); err != nil || r.Queue != event.StatusClaimed {
			continue // queued already, or not a worker's run
		}
		if ok, err := w.cfg.DB.RequeueStranded(ctx, id); err != nil {
			w.log.Error("requeue a waiting run its worker left", "run_id", id, "err", err)
		} else if ok {
			w.log.Warn("a waiting run's worker died before it queued the run; queued it", "run_id", id)
		}
	}
}

// watchStops stops the runs a gateway asked to stop (run.cancel), and the
// attempts their harnesses did.
func (w *Worker) watchStops(ctx context.Context) {
	t := time.NewTicker(stopPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if children, harnesses := w.busy(); children+harnesses == 0 {
			continue // nothing to stop: an idle worker leaves the store alone
		}
		reqs, err := w.cfg.DB.StopRequests(ctx, w.cfg.Sup.Owner())
		if err != nil {
			continue
		}
		attempts, err := w.cfg.DB.AttemptStopRequests(ctx, w.cfg.Sup.Owner())
		if err != nil {
			continue
		}
		for k, kind := range attempts {
			reqs[k.String()] = kind
		}
		w.mu.Lock()
		for id, kind := range reqs {
			if j, ok := w.live[id]; ok {
				j.stop(stopCause(kind))
			}
		}
		w.mu.Unlock()
	}
}

// stopCause is the cause a stop request stops a run with, as the gateway's
// run.cancel stops its own runs; nil for no request.
func stopCause(kind string) error {
	switch kind {
	case store.StopCancel:
		return supervisor.CancelledByClient
	case store.StopInterrupt:
		return supervisor.Interrupt("")
	}
	return nil
}

// wake signals ch without blocking; one pending signal is enough.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
