package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"agent/event"
	"agent/store"
)

// The rate-limit pause is a wait (docs/PROTOCOL.md#waits): a single run
// the provider rate-limited past its retries records run.waiting, kind
// sleep, reason rate_limited, until its resume_after, and parks, so that
// whatever wakes waiting runs (a gateway, a worker, agent resume) continues
// it then. A harness still ends run.interrupted, reason rate_limited.

// sleepRateLimited records the pause of a rate-limited run whose drive
// ends with fin; false if it could not be recorded (the run then ends
// interrupted, as before).
func (s *Supervisor) sleepRateLimited(ctx context.Context, runID string, sink Sink, fin event.RunFinishedData) bool {
	at := fin.ResumeAt(time.Now()).UTC().Format(time.RFC3339)
	var id [6]byte
	_, _ = rand.Read(id[:])
	w := event.RunWaitingData{
		WaitID: "w" + hex.EncodeToString(id[:]), Kind: event.WaitSleep, Until: at, OnTimeout: event.OnTimeoutContinue,
		Reason: event.ReasonRateLimited, ResumeAfter: at,
	}
	warn := event.New(event.Warning, event.WarningData{Message: "the model provider rate-limited the run: " + fin.Detail + "; it goes on after " + at})
	if err := sink.Emit(ctx, warn); err != nil {
		s.log.Error("record a rate limit's pause", "run_id", runID, "err", err)
		return false
	}
	if err := sink.Emit(ctx, event.New(event.RunWaiting, w)); err != nil {
		s.log.Error("record a rate limit's pause", "run_id", runID, "err", err)
		return false
	}
	return true
}

// resolveOwnWaits records, before a resumed run goes on, the end of the
// pauses this package made (a rate limit's): no loop asks them again.
// Their deadline resolves them (expireWaits); one not due yet stays open,
// and a later wake-up resolves it.
func (s *Supervisor) resolveOwnWaits(ctx context.Context, runID string, sink Sink) error {
	if err := s.expireWaits(ctx, runID); err != nil {
		return err
	}
	ws, err := s.db.Waits(ctx, runID)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if ownWait(w) && w.Resolution != nil && !w.Journaled {
			if err := sink.Emit(ctx, event.New(event.WaitResolved, *w.Resolution)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ownWait is a wait this package made rather than a loop's.
func ownWait(w store.Wait) bool {
	return w.PhaseID == "" && w.Waiting.CallID == "" && w.Waiting.Kind == event.WaitSleep && w.Waiting.Reason == event.ReasonRateLimited
}
