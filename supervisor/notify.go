package supervisor

import (
	"context"
	"errors"
	"time"

	"agent/event"
	"agent/notify"
	"agent/store"
)

// Notifications (docs/PROTOCOL.md#notifications): a drive that parks or
// ends plans what config.toml's [[notify]] channels are told, for every
// front-end, and this process sends it; a gateway also retries what is
// due, of every run (DeliverNotifications). Package notify does the rest.

// notifier is the supervisor's Notifier. AGENT_NOTIFY_TIMEOUT (one try)
// and AGENT_NOTIFY_BACKOFF (the first retry's delay) exist for tests.
func (s *Supervisor) notifier() *notify.Notifier {
	knob := func(name string) time.Duration {
		d, _ := time.ParseDuration(s.Getenv(name))
		return max(d, 0)
	}
	return notify.New(notify.Config{
		DB: s.db, Home: s.cfg.Home, Getenv: s.Getenv, Record: s.recordEvent, HowToAnswer: HowToAnswer, Logger: s.log,
		Timeout: knob("AGENT_NOTIFY_TIMEOUT"), Backoff: knob("AGENT_NOTIFY_BACKOFF"),
	})
}

// notifyEnd tells the channels how a drive of r ended: a park (its open
// waits) or a terminal event. A notification is never a reason for the
// drive to fail: a problem is logged, and the notification's own
// failures are warnings in the run's events.
func (s *Supervisor) notifyEnd(ctx context.Context, r *store.Run, end End) {
	if err := s.notify.Ended(ctx, r, end.Type); err != nil {
		s.log.Warn("notify", "run_id", r.ID, "err", err)
	}
}

// DeliverNotifications sends the notifications that fall due, of every
// run, until ctx ends: the retries, and what processes without such a
// loop planned (a CLI run's, a worker's). While it runs, this process's
// drives leave their sending to it.
func (s *Supervisor) DeliverNotifications(ctx context.Context) { s.notify.Run(ctx) }

// NotifyJobFailed tells the channels on job_failed that a scheduled job
// failed its last attempt: e is its job.failed event, naming the
// attempt's run; attempt identifies the tick and attempt, text says what
// failed.
func (s *Supervisor) NotifyJobFailed(ctx context.Context, e event.Event, attempt, text string) error {
	return s.notify.JobFailed(ctx, e, attempt, text)
}

// errRecordElsewhere is a session run's event that only its gateway, whose
// journal of the session numbers its events, may record.
var errRecordElsewhere = errors.New("the run's session is written by its gateway")

// recordEvent writes e, an event of a run no drive of this process is
// writing, under a lease taken for this one write, so that a process
// driving the run meanwhile is never written across: then e is not
// recorded. A session's run goes through Config.RecordInSession if set.
func (s *Supervisor) recordEvent(ctx context.Context, runID string, e event.Event) error {
	r, err := s.db.GetRun(ctx, runID)
	switch {
	case err != nil:
		return err
	case r.SessionID != "" && s.cfg.RecordInSession != nil:
		return s.cfg.RecordInSession(ctx, r, e)
	case r.SessionID != "" && !s.cfg.Unshown:
		return errRecordElsewhere
	}
	owner := store.NewLeaseOwner()
	if err := s.db.AcquireLease(ctx, runID, owner, s.cfg.LeaseTTL); err != nil {
		return err
	}
	defer s.db.ReleaseLease(context.WithoutCancel(ctx), runID, owner) //nolint:errcheck // it expires anyway
	j, err := s.journal(ctx, runID, r.SessionID)
	if err != nil {
		return err
	}
	j.Fence(owner)
	if r.SessionID != "" {
		j.Unshown(0) // workers write the session too, each taking its seqs as it writes
	}
	e.RunID = runID
	if _, err := j.Append(ctx, e); err != nil {
		return err
	}
	return j.Close(ctx)
}
