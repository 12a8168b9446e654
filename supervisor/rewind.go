package supervisor

import (
	"context"
	"os"

	"agent/checkpoint"
	"agent/event"
	"agent/store"
)

// Rewind puts a run's files back as they were before it (from checkpoint
// to on), records rewind.completed in the run, and reports each file. It
// holds the run's lease meanwhile, like a resume, so that nothing adds
// checkpoints or changes the files as they are put back: a run still being
// driven refuses it with a *store.LeaseHeldError. sink records the event;
// nil uses the run's own journal.
func (s *Supervisor) Rewind(ctx context.Context, r *store.Run, to int, force bool, sink Sink) (checkpoint.Report, error) {
	if err := s.Acquire(ctx, r.ID); err != nil {
		return checkpoint.Report{}, err
	}
	defer s.Release(context.WithoutCancel(ctx), r.ID) //nolint:errcheck // best effort: the lease expires anyway

	cps, err := s.db.Checkpoints(ctx, r.ID)
	if err != nil {
		return checkpoint.Report{}, err
	}
	if len(cps) == 0 {
		return checkpoint.Report{RunID: r.ID, Files: []checkpoint.File{}}, nil
	}
	last, err := s.db.LastWrites(ctx, r.ID)
	if err != nil {
		return checkpoint.Report{}, err
	}
	req := checkpoint.Request{RunID: r.ID, Workspace: r.Workspace, LastWrites: last, To: to, Force: force}
	for _, cp := range cps {
		req.Points = append(req.Points, checkpoint.Point{
			Number: cp.Number, Path: cp.Path, Existed: cp.Existed, Blob: cp.Blob, Mode: os.FileMode(cp.Mode),
		})
	}
	rep, err := checkpoint.Rewind(checkpoint.BlobsIn(s.cfg.Home), req)
	if err != nil {
		return rep, err
	}
	// Recorded even when files failed: what was put back is part of the
	// run's history either way.
	persist := context.WithoutCancel(ctx)
	if sink == nil {
		js, err := s.openJournal(persist, r, nil)
		if err != nil {
			return rep, err
		}
		defer js.close(persist) //nolint:errcheck // rewind.completed is written at once
		sink = js
	}
	e := event.New(event.RewindCompleted, rep)
	e.RunID = r.ID
	return rep, sink.Emit(persist, e)
}
