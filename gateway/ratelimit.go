package gateway

import (
	"context"
	"time"

	"agent/event"
	"agent/gateway/api"
)

// A run the provider rate-limited for longer than its retries allow ends
// run.interrupted, reason rate_limited, with resume_after (README.md#context-and-spend).
// The gateway resumes it by itself then: when it ends that way here, and
// at start for those an earlier gateway left waiting.

// resumeAfter schedules the resume of a rate-limited run at at.
func (s *Server) resumeAfter(runID string, at time.Time) {
	wait := max(time.Until(at), 0)
	s.log.Info("run paused by a rate limit; resuming it later", "run_id", runID, "at", at.Format(time.RFC3339))
	time.AfterFunc(wait, func() {
		if s.stopping.Load() {
			return // the next start schedules it again
		}
		if _, err := s.resumeRun(context.Background(), api.RunResumeParams{RunID: runID}, 0); err != nil {
			s.log.Warn("could not resume a rate-limited run", "run_id", runID, "err", err)
		}
	})
}

// resumeWhenLimited schedules the resume of a run that just ended
// rate-limited.
func (s *Server) resumeWhenLimited(runID string, end event.RunFinishedData) {
	if end.Reason != event.ReasonRateLimited {
		return
	}
	s.resumeAfter(runID, end.ResumeAt(time.Now()))
}

// scheduleRateLimited schedules the runs an earlier gateway left paused
// by a rate limit.
func (s *Server) scheduleRateLimited(ctx context.Context) error {
	paused, err := s.db.RateLimited(ctx)
	if err != nil {
		return err
	}
	for _, p := range paused {
		s.resumeAfter(p.RunID, p.ResumeAfter)
	}
	return nil
}
