package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"agent/adapter"
	"agent/event"
	"agent/orchestrator"
	"agent/store"
	"agent/telemetry"
)

// Phase attempts on many machines (docs/SCHEMA.md#attempt_queue, Config.QueueAttempts):
// the worker driving a harness run queues each phase attempt in the store
// rather than starting its child; any worker claims it and runs the child
// (DriveAttempt), writing the child's events to the run's journal and
// answering its intents from the outbox, both fenced by its hold on the
// attempt; the harness reads the result and verifies it as it would a
// child of its own.

// unitSpec is what a worker needs to run an attempt's child. Like the
// spec, it holds no secret: those travel in each worker's environment.
type unitSpec struct {
	Spec      adapter.PhaseSpec `json:"spec"`
	TimeoutMS int64             `json:"timeout_ms"`
	LogPath   string            `json:"log_path,omitempty"`
}

// attemptPoll is how often a harness reads the attempts it queued.
const attemptPoll = 100 * time.Millisecond

// stopWait is how long a harness waits, past the child's grace, for a
// worker to record how an attempt it asked to stop ended.
const stopWait = 5 * time.Second

// queuedAttempts is the spawner of a harness whose phase attempts any
// worker may run. The planner still runs here: its plan is needed before
// anything else can start. The drive's trace, if any, gets each attempt's
// events from the store once it has ended, as a child's would have come.
func (s *Supervisor) queuedAttempts(r *store.Run, sink Sink) orchestrator.Spawner {
	return func(ctx context.Context, cfg adapter.Config, spec adapter.PhaseSpec) (*adapter.Result, error) {
		if spec.Mode != adapter.ModePhase {
			return adapter.Run(ctx, cfg, spec)
		}
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		raw, err := json.Marshal(unitSpec{Spec: spec, TimeoutMS: cfg.Timeout.Milliseconds(), LogPath: cfg.LogPath})
		if err != nil {
			return nil, err
		}
		k := store.AttemptKey{RunID: spec.RunID, PhaseID: spec.PhaseID, Attempt: spec.Attempt}
		if err := s.db.QueueAttempt(ctx, store.AttemptUnit{AttemptKey: k, SessionID: r.SessionID, Spec: raw}, s.cfg.Owner); err != nil {
			return nil, err
		}
		grace := cfg.Grace
		if grace <= 0 {
			grace = 10 * time.Second // the adapter's default
		}
		res := s.awaitAttempt(ctx, k, grace)
		if trace := traceOf(sink); trace != nil {
			s.traceAttempt(context.WithoutCancel(ctx), trace, k)
		}
		return res, nil
	}
}

// traceAttempt adds to a harness's trace the events a worker stored for
// one of its attempts; the harness recorded the attempt's phase.* events.
func (s *Supervisor) traceAttempt(ctx context.Context, trace *telemetry.Trace, k store.AttemptKey) {
	evs, err := s.db.ListEvents(ctx, k.RunID, 0, 0)
	if err != nil {
		s.log.Warn("trace a phase attempt", "attempt", k.String(), "err", err)
		return
	}
	for _, e := range evs {
		if e.PhaseID == k.PhaseID && e.Attempt == k.Attempt && !strings.HasPrefix(e.Type, "phase.") {
			trace.Observe(e)
		}
	}
}

// awaitAttempt waits for a queued attempt's result. When ctx ends it asks
// the attempt's worker to stop it and waits for that, up to the child's
// grace and stopWait; an attempt whose worker is gone is taken back and
// reported lost.
func (s *Supervisor) awaitAttempt(ctx context.Context, k store.AttemptKey, grace time.Duration) *adapter.Result {
	persist := context.WithoutCancel(ctx)
	cancelled := &adapter.Result{Status: event.StatusCancelled, Reason: "stopped with the harness"}
	tick := time.NewTicker(attemptPoll)
	defer tick.Stop()
	var stopped time.Time // when the worker was asked to stop it
	for {
		u, err := s.db.GetAttemptUnit(persist, k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Only this harness deletes it, or one that took the run over.
			return cancelled
		case err != nil:
			s.log.Error("read a queued attempt", "attempt", k.String(), "err", err)
		case u.State == event.StatusDone:
			_, _ = s.db.EndAttempt(persist, k, "")
			var res adapter.Result
			if err := json.Unmarshal(u.Result, &res); err != nil || res.Status == "" {
				return &adapter.Result{Status: event.StatusCrashed, Reason: fmt.Sprintf("worker %s left an unreadable result", u.Holder)}
			}
			return &res
		case s.db.UnitAbandoned(u):
			if taken, err := s.db.EndAttempt(persist, k, u.Holder); err != nil || !taken {
				break // it finished meanwhile, or the store failed: read it again
			}
			if !stopped.IsZero() {
				return cancelled
			}
			return &adapter.Result{Status: event.StatusLost,
				Reason: fmt.Sprintf("worker %s running the attempt stopped answering", u.Holder)}
		}
		if ctx.Err() != nil {
			switch {
			case stopped.IsZero():
				stopped = time.Now()
				if running, err := s.db.StopAttempt(persist, k, store.StopInterrupt); err == nil && !running {
					return cancelled // no worker had claimed it
				}
			case time.Since(stopped) > grace+stopWait:
				_, _ = s.db.EndAttempt(persist, k, "")
				return cancelled
			}
		}
		if ctx.Err() != nil {
			<-tick.C
			continue
		}
		select {
		case <-tick.C:
		case <-ctx.Done(): // ask the worker to stop it at once
		}
	}
}

// DriveAttempt runs a phase attempt this worker claimed from the attempt
// queue: the child, its events into the run's journal and its intents
// through the outbox, both fenced by the hold on the attempt, which it
// renews meanwhile; then it leaves the result for the harness. A cancelled
// ctx stops the child: the result says cancelled if the harness asked for
// it, lost otherwise (this worker is stopping), and the phase starts a new
// attempt elsewhere. It returns an error when the result could not be left
// (the harness took the attempt back, or the store failed).
func (s *Supervisor) DriveAttempt(ctx context.Context, u *store.AttemptUnit) error {
	k := u.AttemptKey
	persist := context.WithoutCancel(ctx)
	var us unitSpec
	if err := json.Unmarshal(u.Spec, &us); err != nil {
		return s.finishAttempt(persist, k, &adapter.Result{Status: event.StatusCrashed, Reason: "unreadable attempt spec: " + err.Error()})
	}
	run, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	halt := sync.OnceFunc(s.keepAttempt(run, stop, k))
	defer halt()

	j, err := s.journal(persist, k.RunID, u.SessionID)
	if err != nil {
		return s.finishAttempt(persist, k, &adapter.Result{Status: event.StatusCrashed, Reason: err.Error()})
	}
	j.FenceAttempt(s.cfg.Owner, k)
	j.Unshown(deltaFlush)
	sink := &journalSink{runID: k.RunID, journal: j, show: func(event.Event) {}}
	cfg := adapter.Config{
		Exe: s.cfg.Exe, Env: s.cfg.Env, LogPath: us.LogPath, Timeout: time.Duration(us.TimeoutMS) * time.Millisecond,
		Grace: s.cfg.KillGrace, HeartbeatTimeout: s.cfg.HeartbeatTimeout, Blobs: s.blobs(),
		OnEvent: func(e event.Event) error { return sink.Emit(persist, e) },
		OnTask: func(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
			// The harness's run, as the sub-run's parent; its events go to
			// the harness's journal, fenced by this hold on the attempt.
			r, err := s.db.GetRun(ctx, k.RunID)
			if err != nil {
				return event.TaskResultData{}, err
			}
			o, err := DecodeOptions(r)
			if err != nil {
				return event.TaskResultData{}, err
			}
			t := &subagents{s: s, parent: r, opts: o, sink: sink, phaseID: k.PhaseID, attempt: k.Attempt}
			return t.Delegate(ctx, req)
		},
		OnIntent: func(in event.EffectIntentData) adapter.Control {
			r := store.IntentReceipt(k.RunID, k.PhaseID, k.Attempt, in)
			r.AttemptLease = true
			return s.intent(persist, r)
		},
	}
	res, err := adapter.Run(run, cfg, us.Spec)
	if cerr := j.Close(persist); err == nil {
		err = cerr
	}
	halt()
	if errors.Is(err, store.ErrLeaseLost) || errors.Is(context.Cause(run), store.ErrLeaseLost) {
		return fmt.Errorf("attempt %s: %w", k, store.ErrLeaseLost)
	}
	if res == nil || err != nil {
		reason := "the attempt did not run"
		if err != nil {
			reason = err.Error()
		}
		res = &adapter.Result{Status: event.StatusCrashed, Reason: reason}
	}
	if res.Status == event.StatusCancelled && ctx.Err() != nil {
		if now, err := s.db.GetAttemptUnit(persist, k); err == nil && now.StopRequest == "" {
			res.Status, res.Reason = event.StatusLost, fmt.Sprintf("worker %s stopped: %v", s.cfg.Owner, context.Cause(ctx))
		}
	}
	return s.finishAttempt(persist, k, res)
}

func (s *Supervisor) finishAttempt(ctx context.Context, k store.AttemptKey, res *adapter.Result) error {
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return s.db.FinishAttempt(ctx, k, s.cfg.Owner, raw)
}

// keepAttempt renews this worker's hold on an attempt every LeaseTTL/3
// and stops the attempt (ctx's cause wraps store.ErrLeaseLost) once the
// harness took it back.
func (s *Supervisor) keepAttempt(ctx context.Context, stop context.CancelCauseFunc, k store.AttemptKey) (halt func()) {
	return s.keepRenewing(ctx, stop, func(ctx context.Context) error {
		err := s.db.RenewAttempt(ctx, k, s.cfg.Owner, s.cfg.LeaseTTL)
		if errors.Is(err, store.ErrLeaseLost) {
			s.log.Warn("lost a phase attempt", "attempt", k.String(), "err", err)
			return err
		}
		if err != nil {
			s.log.Error("renew a phase attempt", "attempt", k.String(), "err", err)
		}
		return nil
	})
}
