package gateway

import (
	"context"
	"errors"

	"agent/checkpoint"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
)

func (s *Server) listCheckpoints(ctx context.Context, p api.CheckpointListParams) (*api.CheckpointList, error) {
	row, err := s.db.GetRun(ctx, p.RunID)
	if err != nil {
		return nil, err
	}
	cps, err := s.db.Checkpoints(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	return &api.CheckpointList{RunID: row.ID, Checkpoints: append([]store.Checkpoint{}, cps...)}, nil
}

// rewind restores a finished run's files. A run still active holds its
// lease, so the supervisor refuses it (conflict).
func (s *Server) rewind(ctx context.Context, p api.CheckpointRewindParams) (any, error) {
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
