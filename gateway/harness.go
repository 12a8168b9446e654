package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"agent/event"
	"agent/orchestrator"
	"agent/plan"
	"agent/store"
)

// driveHarness plans a harness run (unless it has a plan already, when
// reclaimed) and executes its phases in the gateway, with no
// confirmation: the client asked for it. The outcome maps to the
// terminal event as in `agent harness`.
func (s *Server) driveHarness(ctx context.Context, row *store.Run, st settings, k *sink, resumed bool) (string, event.RunFinishedData) {
	o, err := orchestrator.New(orchestrator.Config{
		Store: s.db, Sink: k, RunID: row.ID, SessionID: row.SessionID, Workspace: row.Workspace,
		RunDir: filepath.Join(row.Workspace, ".agent", "runs", row.ID),
		Model:  st.model(), Tools: st.Tools, MaxTurns: st.MaxTurns, Parallel: st.Parallel,
		PhaseTimeout: st.phaseTimeout(), Exe: s.cfg.Exe, Env: s.cfg.Env,
		HeartbeatTimeout: s.cfg.HeartbeatTimeout, Grace: s.cfg.KillGrace,
	})
	if err != nil {
		return s.failure(ctx, row.ID, err)
	}
	if _, err := s.db.PlanState(ctx, row.ID); errors.Is(err, store.ErrNotFound) {
		if _, err := o.Plan(ctx, row.Prompt); err != nil {
			return s.harnessFailure(ctx, row.ID, err)
		}
	} else if err != nil {
		return s.failure(ctx, row.ID, err)
	}
	out, err := o.Execute(ctx)
	if err != nil {
		return s.harnessFailure(ctx, row.ID, err)
	}
	fin := event.RunFinishedData{Status: out.Status, Result: out.Result}
	fin.Turns, fin.Usage = s.totals(ctx, row.ID)
	switch out.Status {
	case orchestrator.StatusCompleted:
		fin.Reason = "every phase verified"
		return event.RunCompleted, fin
	case orchestrator.StatusInterrupted:
		return s.failure(ctx, row.ID, errors.New("interrupted"))
	}
	fin.ExitCode = 1
	if out.ProviderFailure {
		fin.ExitCode = 3
	}
	if out.FailedPhase != "" {
		fin.Reason = fmt.Sprintf("phase %s failed after its attempts: %s", out.FailedPhase, strings.Join(out.Reasons, "; "))
	} else {
		fin.Reason = strings.Join(out.Reasons, "; ")
	}
	return event.RunFailed, fin
}

// harnessFailure maps an error that stopped the harness to its terminal
// event: an invalid plan is bad input (exit 2), a provider failure exit 3.
func (s *Server) harnessFailure(ctx context.Context, runID string, err error) (string, event.RunFinishedData) {
	if ctx.Err() != nil {
		return s.failure(ctx, runID, err)
	}
	typ, fin := s.failure(ctx, runID, err)
	var pe *orchestrator.PlanError
	var planErr *plan.Error
	switch {
	case errors.As(err, &planErr):
		fin.ExitCode = 2
	case errors.As(err, &pe) && pe.ProviderFailure:
		fin.ExitCode = 3
	}
	return typ, fin
}
