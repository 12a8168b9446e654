package gateway

import (
	"context"
	"fmt"

	"agent/event"
	"agent/scheduler"
	"agent/store"
)

// Notifications (docs/PROTOCOL.md#notifications): the gateway sends what
// its drives plan, retries what is due of every run on its store (its
// own, a CLI run's, a worker's), tells the channels on job_failed when a
// job's last attempt fails, and records a notification's warning in the
// run's session.

// startNotifications sends notifications until the gateway stops. A try
// under way when it stops is finished, bounded by its timeout.
func (s *Server) startNotifications() {
	ctx, cancel := context.WithCancel(context.Background())
	s.background.Add(2)
	go func() {
		defer s.background.Done()
		<-s.quit
		cancel()
	}()
	go func() {
		defer s.background.Done()
		s.sup.DeliverNotifications(ctx)
	}()
}

// notifyJob tells the channels on job_failed of a job whose last attempt
// failed. It returns at once, as the scheduler's events must.
func (s *Server) notifyJob(e event.Event) {
	var d scheduler.TickData
	if e.Type != scheduler.EventJobFailed || e.Decode(&d) != nil || d.WillRetry == nil || *d.WillRetry || e.RunID == "" {
		return
	}
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		text := fmt.Sprintf("agent job %q failed its last attempt (%d of %d): %s\nRun: %s", d.Name, d.Attempt, d.MaxAttempts, d.Error, e.RunID)
		if err := s.sup.NotifyJobFailed(context.Background(), e, fmt.Sprintf("%s/%d", d.JobRunID, d.Attempt), text); err != nil {
			s.log.Warn("notify a job's failure", "job_id", d.JobID, "run_id", e.RunID, "err", err)
		}
	}()
}

// recordInSession records an event of a session's run that no drive is
// writing (a notification's warning): through the session this gateway
// numbers, or, where workers write the sessions, through a journal that
// takes the session's next seq as it writes (storedSink).
func (s *Server) recordInSession(ctx context.Context, r *store.Run, e event.Event) error {
	if s.cfg.Workers {
		return (&storedSink{db: s.db, sessionID: r.SessionID, runID: r.ID}).Emit(ctx, e)
	}
	sess, _, err := s.sessions.open(ctx, r.SessionID)
	if err != nil {
		return err
	}
	_, err = sess.append(ctx, withRun(e, r.ID))
	return err
}
