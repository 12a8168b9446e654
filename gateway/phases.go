package gateway

import (
	"context"
	"net/http"

	"agent/store"
)

// PhaseBoard answers GET /v1/runs/ID/phases: a harness run's phase board
// (store.Board, the same as `agent runs show`), which the web view reads
// again whenever a phase event arrives. A run with no plan yet (or not a
// harness run) has no phases.
type PhaseBoard struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"` // the run's
	*store.Board
}

func (s *Server) httpPhases(w http.ResponseWriter, r *http.Request) {
	board, err := s.phaseBoard(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, board)
}

func (s *Server) phaseBoard(ctx context.Context, runID string) (*PhaseBoard, error) {
	row, err := s.db.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	board, err := s.db.Board(ctx, row)
	if err != nil {
		return nil, err
	}
	return &PhaseBoard{RunID: row.ID, Status: s.runInfo(row).Status, Board: board}, nil
}
