package gateway

import (
	"context"
	"time"

	"agent/checkpoint"
	"agent/store"
)

// retentionEvery is how often the gateway prunes after the prune at start.
const retentionEvery = 24 * time.Hour

// startRetention, when Config.RetentionDays is set, prunes the runs that
// finished more than that many days ago (README.md#retention, store.Prune):
// once now, then every retentionEvery, until Stop, which also ends a
// prune under way between two runs. Each prune logs what it freed.
func (s *Server) startRetention() {
	if s.cfg.RetentionDays <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.background.Add(2)
	go func() {
		defer s.background.Done()
		<-s.quit
		cancel()
	}()
	go func() {
		defer s.background.Done()
		t := time.NewTicker(retentionEvery)
		defer t.Stop()
		for {
			s.prune(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// prune prunes once and logs the outcome.
func (s *Server) prune(ctx context.Context) {
	days := s.cfg.RetentionDays
	o := store.PruneOptions{Before: s.cfg.Now().Add(-time.Duration(days) * 24 * time.Hour)}
	if s.cfg.Home != "" {
		o.Blobs = checkpoint.BlobsIn(s.cfg.Home)
	}
	rep, err := s.db.Prune(ctx, o)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("retention: prune", "retention_days", days, "err", err)
		}
		return
	}
	attrs := []any{"retention_days", days, "runs", len(rep.Runs), "deltas", rep.Deltas,
		"tool_outputs", rep.ToolOutputs, "bytes", rep.Bytes, "blobs", rep.Blobs, "blob_bytes", rep.BlobBytes}
	if rep.BlobsSkipped != "" {
		attrs = append(attrs, "blobs_skipped", rep.BlobsSkipped)
	}
	s.log.Info("retention: pruned runs finished before "+o.Before.UTC().Format(time.DateOnly), attrs...)
}
