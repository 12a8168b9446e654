package gateway

import (
	"context"
	"errors"

	"agent/checkpoint"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
)

// CheckpointListParams name the run whose checkpoints to list.
type CheckpointListParams struct {
	RunID string `json:"run_id"`
}

// CheckpointList answers checkpoint.list.
type CheckpointList struct {
	RunID       string             `json:"run_id"`
	Checkpoints []store.Checkpoint `json:"checkpoints"`
}

// CheckpointRewindParams rewind a run's files: all of them (To 0 or 1)
// or those first changed at checkpoint To or later. Force restores files
// changed after the run too.
type CheckpointRewindParams struct {
	RunID string `json:"run_id"`
	To    int    `json:"to,omitempty"`
	Force bool   `json:"force,omitempty"`
}

func (s *Server) listCheckpoints(ctx context.Context, p CheckpointListParams) (*CheckpointList, error) {
	row, err := s.db.GetRun(ctx, p.RunID)
	if err != nil {
		return nil, err
	}
	cps, err := s.db.Checkpoints(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	return &CheckpointList{RunID: row.ID, Checkpoints: append([]store.Checkpoint{}, cps...)}, nil
}

// rewind restores a finished run's files. A run still active holds its
// lease, so the supervisor refuses it (conflict).
func (s *Server) rewind(ctx context.Context, p CheckpointRewindParams) (any, error) {
	if p.To < 0 {
		return nil, errorf(api.CodeBadRequest, "to must be a checkpoint number, 1 or more")
	}
	row, err := s.db.GetRun(ctx, p.RunID)
	if err != nil {
		return nil, err
	}
	// A session's clients see rewind.completed live; a run outside any
	// session records it in its own journal.
	var record supervisor.Sink
	switch {
	case row.SessionID != "" && s.cfg.Workers:
		if err := sessionIdle(ctx, s.db, row.SessionID, row.ID); err != nil {
			return nil, err
		}
		record = &storedSink{db: s.db, sessionID: row.SessionID, runID: row.ID, idle: true}
	case row.SessionID != "":
		sess, _, err := s.sessions.open(ctx, row.SessionID)
		if err != nil {
			return nil, err
		}
		record = &sink{sess: sess, runID: row.ID}
	}
	rep, err := s.sup.Rewind(ctx, row, max(p.To, 1), p.Force, record)
	var held *store.LeaseHeldError
	var rng *checkpoint.RangeError
	switch {
	case errors.As(err, &held):
		return nil, errorf(api.CodeConflict, "run %s is still running; rewind it after it ends", row.ID)
	case errors.As(err, &rng):
		return nil, errorf(api.CodeBadRequest, "to: %v; checkpoint.list shows the run's checkpoints", err)
	case err != nil:
		return nil, err
	}
	return rep, nil
}
