package gateway

import (
	"context"
	"errors"
	"fmt"

	"agent/event"
	"agent/store"
	"agent/supervisor"
)

// reclaim takes over the runs an earlier gateway left: those it was
// running when it died (status running, its lease expired or its process
// gone) and those it interrupted when it stopped (reason reasonDrained).
// Each is resumed or recorded failed, per the reclaim policy; none is
// silently lost. Policy resume continues a crashed run once (a second
// crash fails it) and a cleanly interrupted one every time. Runs outside sessions belong to `agent run` and
// `agent harness`, and are left to `agent resume`.
func (s *Server) reclaim(ctx context.Context) error {
	if err := s.scheduleRateLimited(ctx); err != nil {
		return err
	}
	dead, err := s.db.ReclaimableRuns(ctx)
	if err != nil {
		return err
	}
	for i := range dead {
		if r := &dead[i]; r.SessionID != "" {
			if err := s.reclaimRun(ctx, r, true); err != nil {
				return err
			}
		}
	}
	if s.cfg.ReclaimPolicy != ReclaimResume {
		return nil // drained runs stay interrupted, resumable by hand
	}
	// The store has no query for these yet; the runs table is scanned
	// once per start.
	all, err := s.db.ListRuns(ctx, 0)
	if err != nil {
		return err
	}
	for i := len(all) - 1; i >= 0; i-- { // oldest first
		r := &all[i]
		if r.SessionID != "" && r.Status == event.StatusInterrupted && r.Detail == reasonDrained {
			if err := s.reclaimRun(ctx, r, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// reclaimRun takes one run over. crashed says the gateway died during it
// (rather than stopping cleanly).
func (s *Server) reclaimRun(ctx context.Context, r *store.Run, crashed bool) error {
	log := s.log.With("run_id", r.ID, "session_id", r.SessionID)
	if err := s.sup.Acquire(ctx, r.ID); err != nil {
		var held *store.LeaseHeldError
		if errors.As(err, &held) {
			log.Warn("not reclaiming a run another process holds", "holder", held.Owner)
			return nil
		}
		return err
	}
	sess, _, err := s.sessions.open(ctx, r.SessionID)
	if err != nil {
		return err
	}
	k := &sink{sess: sess, runID: r.ID}
	what := "the gateway stopped during this run"
	if crashed {
		what = "the gateway died during this run"
	}
	// Nothing is carrying out the intents the old gateway left pending.
	if _, err := s.db.MarkPendingUnknown(ctx, r.ID, ""); err != nil {
		return err
	}
	// Only a crash counts against the one reclaim a run gets: a run that
	// keeps killing its gateway must not loop, but a clean stop is not
	// the run's doing.
	resume := s.cfg.ReclaimPolicy == ReclaimResume && (!crashed || r.Reclaims < 1)
	if !resume {
		policy := "fail"
		if s.cfg.ReclaimPolicy == ReclaimResume {
			policy = "resume, and it was already reclaimed once"
		}
		typ, fin := supervisor.Ending(supervisor.Outcome{Err: supervisor.Crashed(fmt.Sprintf("%s; not resumed (reclaim policy %s)", what, policy))})
		fin.Turns, fin.Usage = r.Turns, r.Usage
		if err := k.Emit(ctx, event.New(typ, fin)); err != nil {
			return err
		}
		log.Warn("reclaimed run failed", "detail", fin.Detail)
		return s.sup.Release(ctx, r.ID)
	}
	msg := what + "; resuming it"
	if crashed {
		n, err := s.db.NoteReclaim(ctx, r.ID)
		if err != nil {
			return err
		}
		msg = fmt.Sprintf("%s; resuming it (reclaim %d of 1)", what, n)
	}
	if err := k.Emit(ctx, event.New(event.Warning, event.WarningData{Message: msg})); err != nil {
		return err
	}
	if !crashed {
		// run.started sets it running again; until then it waits in the queue.
		if err := s.db.SetRunStatus(ctx, r.ID, event.StatusRunning); err != nil {
			return err
		}
	}
	if _, err := s.queue.add(&run{id: r.ID, sessionID: r.SessionID, resumed: true}); err != nil {
		return err
	}
	log.Info("run reclaimed", "crashed", crashed)
	return nil
}
