package gateway

import (
	"context"
	"errors"

	"agent/event"
	"agent/store"
)

// CheckpointListParams name the run whose checkpoints to list.
type CheckpointListParams struct {
	RunID string `json:"run_id"`
}

// CheckpointInfo is one checkpoint: the state of a file before the run
// first changed it.
type CheckpointInfo struct {
	Number  int    `json:"number"`
	Seq     int64  `json:"seq"`
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	Bytes   int64  `json:"bytes"`
	Tool    string `json:"tool,omitempty"`
	CallID  string `json:"call_id,omitempty"`
}

// CheckpointList answers checkpoint.list.
type CheckpointList struct {
	RunID       string           `json:"run_id"`
	Checkpoints []CheckpointInfo `json:"checkpoints"`
}

// CheckpointRewindParams rewind a run's files: all of them (To 0 or 1)
// or those first changed at checkpoint To or later. Force restores files
// changed after the run too.
type CheckpointRewindParams struct {
	RunID string `json:"run_id"`
	To    int    `json:"to,omitempty"`
	Force bool   `json:"force,omitempty"`
}

// Rewinder puts a run's files back and records rewind.completed through
// record; it returns the per-file report. `agent gateway` supplies the
// same implementation `agent rewind` uses.
type Rewinder func(ctx context.Context, run *store.Run, to int, force bool,
	record func(context.Context, event.Event) error) (any, error)

func (s *Server) listCheckpoints(ctx context.Context, p CheckpointListParams) (*CheckpointList, error) {
	row, err := s.db.GetRun(ctx, p.RunID)
	if err != nil {
		return nil, err
	}
	cps, err := s.db.Checkpoints(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	out := &CheckpointList{RunID: row.ID, Checkpoints: []CheckpointInfo{}}
	for _, c := range cps {
		out.Checkpoints = append(out.Checkpoints, CheckpointInfo{
			Number: c.Number, Seq: c.Seq, Path: c.Path, Existed: c.Existed, Bytes: c.Bytes, Tool: c.Tool, CallID: c.CallID,
		})
	}
	return out, nil
}

// rewind restores a finished run's files. A run still active here holds
// its lease, so the rewinder refuses it (conflict).
func (s *Server) rewind(ctx context.Context, p CheckpointRewindParams) (any, error) {
	if s.cfg.Rewind == nil {
		return nil, errorf(CodeUnknownMethod, "this gateway cannot rewind")
	}
	if p.To < 0 {
		return nil, errorf(CodeBadRequest, "to must be a checkpoint number, 1 or more")
	}
	row, err := s.db.GetRun(ctx, p.RunID)
	if err != nil {
		return nil, err
	}
	to := max(p.To, 1)
	record := func(ctx context.Context, e event.Event) error {
		if row.SessionID == "" {
			j, err := s.db.Journal(ctx, row.ID, "")
			if err != nil {
				return err
			}
			_, err = j.Append(ctx, e)
			return err
		}
		sess, _, err := s.sessions.open(ctx, row.SessionID)
		if err != nil {
			return err
		}
		_, err = sess.append(ctx, e)
		return err
	}
	rep, err := s.cfg.Rewind(ctx, row, to, p.Force, record)
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		return nil, errorf(CodeConflict, "run %s is still running; rewind it after it ends", row.ID)
	}
	return rep, err
}
