package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"agent/adapter"
	"agent/event"
	"agent/orchestrator"
	"agent/store"
)

// Why a run was stopped: the cause of its context.
var (
	errCancelled = errors.New("cancelled by a client")
	errDrained   = errors.New("gateway stopped")
	errTimedOut  = errors.New("timed out")
	errLeaseLost = errors.New("lease lost")
)

// reasonDrained is the reason of a run the gateway interrupted when it
// stopped; the next start finds runs by it and resumes them.
const reasonDrained = "gateway stopped; resumable"

// runPhaseID is the phase a ModeRun child reports; the adapter needs
// one. Events are stripped of it, so a gateway run's stream reads like
// `agent run --json`.
const runPhaseID = "run"

// startRun creates a run in a session and queues it. holder is the
// connection asking (0 for HTTP), for the session's write lock.
func (s *Server) startRun(ctx context.Context, p RunStartParams, holder uint64) (*RunStartResult, error) {
	// Stop takes admit exclusively: a run is either created and queued
	// before the gateway drains, or refused.
	s.admit.RLock()
	defer s.admit.RUnlock()
	if s.stopping.Load() {
		return nil, errDraining
	}
	p.Input = strings.TrimSpace(p.Input)
	if p.Input == "" {
		return nil, errorf(CodeBadRequest, "input is empty: say what the run should do")
	}
	if p.SessionID == "" {
		return nil, errorf(CodeBadRequest, "session_id is required; create a session with session.create")
	}
	sess, _, err := s.sessions.open(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	if err := s.sessions.checkWrite(sess.id, holder); err != nil {
		return nil, err
	}
	st, ws, err := s.resolve(p)
	if err != nil {
		return nil, err
	}

	sess.startMu.Lock()
	defer sess.startMu.Unlock()
	if p.IdempotencyKey != "" {
		prev, err := s.db.RunByIdempotencyKey(ctx, sess.id, p.IdempotencyKey)
		if err == nil {
			return &RunStartResult{RunID: prev.ID, SessionID: sess.id, Status: s.runStatus(prev)}, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	kind := store.KindRun
	if st.Harness {
		kind = store.KindHarness
	}
	row := &store.Run{
		ID: uuid.NewString(), Kind: kind, SessionID: sess.id, Prompt: p.Input, Workspace: ws.Root(),
		Model: st.Model, Config: st.encode(), MaxIterations: st.MaxIterations, CompletionPromise: st.Until,
		IdempotencyKey: p.IdempotencyKey,
	}
	if err := s.db.CreateRun(ctx, row, s.owner, s.cfg.LeaseTTL); err != nil {
		if errors.Is(err, store.ErrDuplicateKey) { // another process was first
			if prev, err := s.db.RunByIdempotencyKey(ctx, sess.id, p.IdempotencyKey); err == nil {
				return &RunStartResult{RunID: prev.ID, SessionID: sess.id, Status: s.runStatus(prev)}, nil
			}
		}
		return nil, err
	}
	running, err := s.queue.add(&run{id: row.ID, sessionID: sess.id})
	if err != nil {
		// Unreachable while admit is held; never leave a run behind.
		s.endUnstarted(ctx, &run{id: row.ID, sessionID: sess.id}, errDrained)
		return nil, err
	}
	status := RunQueued
	if running {
		status = RunRunning
	}
	s.log.Info("run queued", "run_id", row.ID, "session_id", sess.id, "kind", kind, "status", status)
	return &RunStartResult{RunID: row.ID, SessionID: sess.id, Status: status}, nil
}

// runStatus is a stored run's status, or queued while it waits here.
func (s *Server) runStatus(r *store.Run) string {
	if _, running, ok := s.queue.get(r.ID); ok && !running {
		return RunQueued
	}
	return r.Status
}

func (s *Server) runInfo(r *store.Run) RunInfo {
	info := RunInfo{
		RunID: r.ID, SessionID: r.SessionID, Kind: r.Kind, Status: s.runStatus(r), Prompt: r.Prompt,
		Workspace: r.Workspace, Model: r.Model, Result: r.Result, Reason: r.Reason, ExitCode: r.ExitCode,
		Turns: r.Turns, Usage: r.Usage, Iteration: r.IterationCount, Reclaims: r.Reclaims,
		IdempotencyKey: r.IdempotencyKey, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if !r.FinishedAt.IsZero() {
		t := r.FinishedAt
		info.FinishedAt = &t
	}
	return info
}

// cancelRun stops a queued or running run and waits a little for its
// terminal event, so the answer can show how it ended.
func (s *Server) cancelRun(ctx context.Context, id string) (*RunInfo, error) {
	if id == "" {
		return nil, errorf(CodeBadRequest, "run_id is required")
	}
	row, err := s.db.GetRun(ctx, id)
	if err != nil {
		return nil, err
	}
	waiting, found := s.queue.stop(row.ID, errCancelled)
	switch {
	case !found:
		return nil, errorf(CodeConflict, "run %s is not running here (status %s)", row.ID, row.Status)
	case waiting != nil:
		s.endUnstarted(ctx, waiting, errCancelled)
	default:
		if r, _, ok := s.queue.get(row.ID); ok {
			select {
			case <-r.done:
			case <-time.After(10 * time.Second):
			case <-ctx.Done():
			}
		}
	}
	if row, err = s.db.GetRun(context.WithoutCancel(ctx), row.ID); err != nil {
		return nil, err
	}
	info := s.runInfo(row)
	return &info, nil
}

// endUnstarted records the end of a run that never started: cancelled
// while queued, or still queued when the gateway stopped. Its lease is
// kept if that cannot be recorded, for the next start to reclaim the run.
func (s *Server) endUnstarted(ctx context.Context, r *run, cause error) {
	defer s.queue.forget(r)
	persist := context.WithoutCancel(ctx)
	typ, fin, _ := stopped(cause)
	fin.Reason += " before it started"
	if errors.Is(cause, errDrained) {
		fin.Reason = reasonDrained // the next start looks for exactly this
	}
	e := event.New(typ, fin)
	e.RunID = r.id
	sess, _, err := s.sessions.open(persist, r.sessionID)
	if err == nil {
		_, err = sess.append(persist, e)
	}
	if err != nil {
		s.log.Error("record the end of a queued run; the next start reclaims it", "run_id", r.id, "err", err)
		return
	}
	if err := s.db.ReleaseLease(persist, r.id, s.owner); err != nil {
		s.log.Error("release lease", "run_id", r.id, "err", err)
	}
}

// sink persists a run's events through its session, which then fans
// them out.
type sink struct {
	sess  *session
	runID string
}

// Emit is for the orchestrator: its events must be kept even while the
// run is being stopped, so ctx's cancellation is ignored.
func (k *sink) Emit(ctx context.Context, e event.Event) error {
	_, err := k.emit(context.WithoutCancel(ctx), e)
	return err
}

func (k *sink) emit(ctx context.Context, e event.Event) (event.Event, error) {
	if e.RunID == "" {
		e.RunID = k.runID
	}
	return k.sess.append(ctx, e)
}

// execute drives a run that the queue started, from run.started to its
// terminal event, then gives up its lease. If the terminal event cannot
// be written the lease is kept, to expire: the next start reclaims the
// run rather than lose it.
func (s *Server) execute(ctx context.Context, r *run) {
	persist := context.WithoutCancel(ctx)
	log := s.log.With("run_id", r.id, "session_id", r.sessionID)
	row, err := s.db.GetRun(persist, r.id)
	if err != nil {
		log.Error("load run", "err", err)
		return
	}
	sess, _, err := s.sessions.open(persist, r.sessionID)
	if err != nil {
		log.Error("open session", "err", err)
		return
	}
	k := &sink{sess: sess, runID: r.id}
	began := s.cfg.Now()
	finish := func(typ string, fin event.RunFinishedData) {
		fin.DurationMS = s.cfg.Now().Sub(began).Milliseconds()
		// Nothing carries out what the run left pending any more.
		if _, err := s.db.MarkPendingUnknown(persist, r.id, ""); err != nil {
			log.Error("mark pending effects unknown", "err", err)
		}
		if _, err := k.emit(persist, event.New(typ, fin)); err != nil {
			log.Error("record the end of the run; the next start reclaims it", "err", err)
			return
		}
		if err := s.db.ReleaseLease(persist, r.id, s.owner); err != nil {
			log.Error("release lease", "err", err)
		}
		log.Info("run ended", "status", fin.Status, "exit_code", fin.ExitCode, "reason", fin.Reason)
	}

	st, err := decodeSettings(row, s.cfg.RunTimeout)
	if err != nil {
		finish(event.RunFailed, event.RunFinishedData{Status: "failed", Reason: err.Error(), ExitCode: 1})
		return
	}
	ctx, stop := context.WithTimeoutCause(ctx, st.Timeout, fmt.Errorf("timed out after %s: %w", st.Timeout, errTimedOut))
	defer stop()

	if _, err := k.emit(persist, event.New(event.RunStarted, event.RunStartedData{
		Prompt: row.Prompt, Model: st.Model, Workspace: row.Workspace, Tools: st.Offered,
		Resumed: r.resumed, Until: st.Until, MaxIterations: st.MaxIterations,
	})); err != nil {
		log.Error("record run.started", "err", err)
		finish(event.RunFailed, event.RunFinishedData{Status: "failed", Reason: "the gateway could not persist the run: " + err.Error(), ExitCode: 1})
		return
	}
	log.Info("run started", "kind", row.Kind, "resumed", r.resumed)
	if st.Harness {
		finish(s.driveHarness(ctx, row, st, k, r.resumed))
		return
	}
	finish(s.driveChild(ctx, row, st, k, r.resumed))
}

// driveChild runs the whole loop in one `agent runner` child.
func (s *Server) driveChild(ctx context.Context, row *store.Run, st settings, k *sink, resumed bool) (string, event.RunFinishedData) {
	persist := context.WithoutCancel(ctx)
	spec, err := s.childSpec(ctx, row, st, resumed)
	if err != nil {
		return s.failure(ctx, row.ID, fmt.Errorf("prepare the run: %w", err))
	}
	cfg := adapter.Config{
		Exe: s.cfg.Exe, Env: s.cfg.Env, Grace: s.cfg.KillGrace, HeartbeatTimeout: s.cfg.HeartbeatTimeout,
		// The run's context enforces the timeout; this is only a backstop.
		Timeout: st.Timeout + time.Minute,
		OnEvent: func(e event.Event) error {
			e.PhaseID, e.Attempt = "", 0
			_, err := k.emit(persist, e)
			return err
		},
		OnIntent: func(in event.EffectIntentData) adapter.Control {
			return s.intent(persist, row.ID, in)
		},
	}
	if s.cfg.LogDir != "" {
		cfg.LogPath = filepath.Join(s.cfg.LogDir, row.ID+".log")
	}
	res, runErr := adapter.Run(ctx, cfg, spec)
	return s.childOutcome(ctx, row.ID, res, runErr)
}

// childSpec is the child's PhaseSpec: the session's earlier conversation
// and, for a reclaimed run, where it stood (as `agent resume` rebuilds it).
func (s *Server) childSpec(ctx context.Context, row *store.Run, st settings, resumed bool) (adapter.PhaseSpec, error) {
	spec := adapter.PhaseSpec{
		RunID: row.ID, SessionID: row.SessionID, PhaseID: runPhaseID, Attempt: 1, Workspace: row.Workspace,
		Mode: adapter.ModeRun, Model: st.model(), Prompt: row.Prompt, Tools: st.Tools,
		MaxTurns: st.MaxTurns, Until: st.Until, MaxIterations: st.MaxIterations,
	}
	prior, err := s.db.SessionPrior(ctx, row.SessionID, row.ID)
	if err != nil {
		return spec, err
	}
	spec.Prior = prior
	if !resumed {
		return spec, nil
	}
	if spec.History, err = s.db.Conversation(ctx, row.ID); err != nil {
		return spec, err
	}
	calls, err := s.db.ToolCalls(ctx, row.ID)
	if err != nil {
		return spec, err
	}
	for _, c := range calls {
		if c.Status == "started" {
			spec.Started = append(spec.Started, c.CallID)
		}
	}
	receipts, err := s.db.Receipts(ctx, row.ID, "")
	if err != nil {
		return spec, err
	}
	for _, r := range receipts {
		if r.State == store.ReceiptDone {
			spec.Receipts = append(spec.Receipts, event.ReceiptData{Type: r.Type, Key: r.Key, Details: r.Details})
		}
	}
	spec.Iteration, spec.Turns, spec.Usage = row.IterationCount, row.Turns, row.Usage
	return spec, nil
}

// intent answers a child's effect.intent: persisted before the ack, and
// never repeated once done or lost (DESIGN.md §6), as the orchestrator
// does for phases.
func (s *Server) intent(ctx context.Context, runID string, in event.EffectIntentData) adapter.Control {
	return orchestrator.IntentAck(ctx, s.db, store.Receipt{Key: in.Key, RunID: runID, Tool: in.Tool, Type: in.ReceiptType}, false)
}

// childOutcome decides a child run's terminal event, like the fast
// path's finalEvent: a runner.result decides, else why it was stopped,
// else the crash.
func (s *Server) childOutcome(ctx context.Context, runID string, res *adapter.Result, runErr error) (string, event.RunFinishedData) {
	if res == nil {
		return s.failure(ctx, runID, runErr)
	}
	fin := event.RunFinishedData{Status: res.Status, Result: res.Output, Turns: res.Turns, Usage: res.Usage, Reason: res.Reason}
	switch res.Status {
	case adapter.StatusCompleted:
		fin.Reason = "completed"
		return event.RunCompleted, fin
	case adapter.StatusFailed:
		fin.ExitCode = 1
		if res.ExitCode == 3 {
			fin.ExitCode = 3 // the runner's code for a model provider failure
		}
		return event.RunFailed, fin
	}
	// No runner.result: the totals so far are the store's.
	fin.Turns, fin.Usage = s.totals(ctx, runID)
	if typ, stop, ok := stopped(context.Cause(ctx)); ok {
		stop.Result, stop.Turns, stop.Usage = fin.Result, fin.Turns, fin.Usage
		return typ, stop
	}
	fin.Status, fin.ExitCode = "failed", 1
	if runErr != nil {
		fin.Reason = "the gateway could not persist the run's events: " + runErr.Error()
	}
	return event.RunFailed, fin
}

// failure is the terminal event of a run that stopped on an error.
func (s *Server) failure(ctx context.Context, runID string, err error) (string, event.RunFinishedData) {
	if typ, fin, ok := stopped(context.Cause(ctx)); ok {
		fin.Turns, fin.Usage = s.totals(ctx, runID)
		return typ, fin
	}
	fin := event.RunFinishedData{Status: "failed", ExitCode: 1, Reason: fmt.Sprint(err)}
	fin.Turns, fin.Usage = s.totals(ctx, runID)
	return event.RunFailed, fin
}

// stopped maps why a run's context ended to its terminal event.
func stopped(cause error) (string, event.RunFinishedData, bool) {
	switch {
	case errors.Is(cause, errDrained):
		return event.RunInterrupted, event.RunFinishedData{Status: "interrupted", Reason: reasonDrained, ExitCode: 130}, true
	case errors.Is(cause, errCancelled):
		return event.RunCancelled, event.RunFinishedData{Status: "cancelled", Reason: "cancelled by a client", ExitCode: 130}, true
	case errors.Is(cause, errTimedOut):
		return event.RunFailed, event.RunFinishedData{Status: "failed", Reason: strings.TrimSuffix(cause.Error(), ": "+errTimedOut.Error()), ExitCode: 1}, true
	case errors.Is(cause, errLeaseLost):
		return event.RunInterrupted, event.RunFinishedData{Status: "interrupted", Reason: "lost the run lease to another process", ExitCode: 4}, true
	}
	return "", event.RunFinishedData{}, false
}

// totals are the turns and tokens the store has counted for a run.
func (s *Server) totals(ctx context.Context, runID string) (int, event.Usage) {
	r, err := s.db.GetRun(context.WithoutCancel(ctx), runID)
	if err != nil {
		return 0, event.Usage{}
	}
	return r.Turns, r.Usage
}

// getRun is run.get.
func (s *Server) getRun(ctx context.Context, id string) (*RunInfo, error) {
	if id == "" {
		return nil, errorf(CodeBadRequest, "run_id is required")
	}
	row, err := s.db.GetRun(ctx, id)
	if err != nil {
		return nil, err
	}
	info := s.runInfo(row)
	return &info, nil
}
