package gateway

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"agent/event"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
)

// reasonDrained is the detail of a run the gateway interrupted when it
// stopped; the next start finds runs by it and resumes them.
const reasonDrained = "gateway stopped; resumable"

// Why the gateway stops a run: the causes its context ends with.
var (
	errDrained     = supervisor.Interrupt(reasonDrained)
	errInterrupted = supervisor.Interrupt("") // as Ctrl-C says it locally
	errCancelled   = supervisor.CancelledByClient
)

// Limits of fields clients send.
const (
	maxTitle          = 200     // characters of a session's title
	maxInput          = 1 << 20 // bytes of a run's input, as `agent run` reads from stdin
	maxIdempotencyKey = 200     // bytes
)

// checkRunFields checks the fields of run.start that need no state.
func checkRunFields(p api.RunStartParams) *api.Error {
	switch {
	case len(p.Input) > maxInput:
		return errorf(api.CodeBadRequest, "input has %d bytes; at most %d (1 MiB) are accepted", len(p.Input), maxInput)
	case strings.TrimSpace(p.Input) == "":
		return errorf(api.CodeBadRequest, "input is empty: say what the run should do")
	case len(p.IdempotencyKey) > maxIdempotencyKey:
		return errorf(api.CodeBadRequest, "idempotency_key has %d bytes; at most %d are accepted", len(p.IdempotencyKey), maxIdempotencyKey)
	}
	return nil
}

// checkTitle checks a session title a client gives.
func checkTitle(title string) *api.Error {
	if n := utf8.RuneCountInString(title); n > maxTitle {
		return errorf(api.CodeBadRequest, "title has %d characters; at most %d are accepted", n, maxTitle)
	}
	return nil
}

// startRun creates a run in a session and queues it. holder is the
// connection asking (0 for HTTP), for the session's write lock. Without a
// session_id it creates the session once the run's options hold, so a
// refused run leaves none behind.
func (s *Server) startRun(ctx context.Context, p api.RunStartParams, holder uint64) (*api.RunStartResult, error) {
	// Stop takes admit exclusively: a run is either created and queued
	// before the gateway drains, or refused.
	s.admit.RLock()
	defer s.admit.RUnlock()
	if s.stopping.Load() {
		return nil, errDraining
	}
	if e := checkRunFields(p); e != nil {
		return nil, e
	}
	if e := checkTitle(p.Title); e != nil {
		return nil, e
	}
	p.Input = strings.TrimSpace(p.Input)
	var sess *session
	var srow *store.Session
	var err error
	if p.SessionID != "" {
		if sess, srow, err = s.sessions.open(ctx, p.SessionID); err != nil {
			return nil, err
		}
		if srow.Local {
			return nil, localSession(srow.ID)
		}
		if err := s.sessions.checkWrite(sess.id, holder); err != nil {
			return nil, err
		}
	}
	opts, ws, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	if sess == nil {
		if srow, err = s.sessions.create(ctx, cmp.Or(p.Title, title(p.Input)), ""); err != nil {
			return nil, err
		}
		if sess, _, err = s.sessions.open(ctx, srow.ID); err != nil {
			return nil, err
		}
	}

	sess.startMu.Lock()
	defer sess.startMu.Unlock()
	// session.delete (or agent sessions delete) may have taken it since.
	if _, err := s.db.GetSession(ctx, sess.id); err != nil {
		return nil, err
	}
	if p.IdempotencyKey != "" {
		prev, err := s.db.RunByIdempotencyKey(ctx, sess.id, p.IdempotencyKey)
		if err == nil {
			return &api.RunStartResult{RunID: prev.ID, SessionID: sess.id, Status: s.runStatus(prev)}, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	row, err := s.sup.Create(ctx, supervisor.NewRun{
		Prompt: p.Input, Workspace: ws.Root(), SessionID: sess.id, IdempotencyKey: p.IdempotencyKey, Options: opts,
		Queue: s.cfg.Workers,
	})
	if err != nil {
		if errors.Is(err, store.ErrDuplicateKey) { // another process was first
			if prev, err := s.db.RunByIdempotencyKey(ctx, sess.id, p.IdempotencyKey); err == nil {
				return &api.RunStartResult{RunID: prev.ID, SessionID: sess.id, Status: s.runStatus(prev)}, nil
			}
		}
		return nil, err
	}
	if srow.Title == "" { // a session with no title yet takes this run's
		if err := s.db.TitleSession(ctx, sess.id, title(p.Input)); err != nil {
			s.log.Warn("title session", "session_id", sess.id, "err", err)
		}
	}
	if s.cfg.Workers {
		s.log.Info("run queued for a worker", "run_id", row.ID, "session_id", sess.id, "kind", row.Kind)
		return &api.RunStartResult{RunID: row.ID, SessionID: sess.id, Status: event.StatusQueued}, nil
	}
	return s.enqueue(ctx, &run{id: row.ID, sessionID: sess.id}, row.Kind)
}

// resumeRun is run.resume: it continues a run of a session that ended
// without completing (interrupted, failed, or left by a dead process), as
// `agent resume` does.
func (s *Server) resumeRun(ctx context.Context, p api.RunResumeParams, holder uint64) (*api.RunStartResult, error) {
	s.admit.RLock()
	defer s.admit.RUnlock()
	if s.stopping.Load() {
		return nil, errDraining
	}
	if p.RunID == "" {
		return nil, errorf(api.CodeBadRequest, "run_id is required")
	}
	row, _, err := s.sup.Load(ctx, p.RunID)
	var gone *supervisor.NotResumableError
	if errors.As(err, &gone) {
		return nil, errorf(api.CodeConflict, "%v", err)
	}
	if err != nil {
		return nil, err
	}
	if row.SessionID == "" {
		return nil, errorf(api.CodeConflict, "run %s was not started in a gateway session; resume it with: agent resume %s", row.ID, row.ID)
	}
	if srow, err := s.db.GetSession(ctx, row.SessionID); err == nil && srow.Local {
		return nil, localSession(srow.ID)
	}
	if _, _, live := s.queue.get(row.ID); live && !s.leftQueue(ctx, row) {
		return nil, errorf(api.CodeConflict, "run %s is already queued or running here", row.ID)
	}
	if err := s.sessions.checkWrite(row.SessionID, holder); err != nil {
		return nil, err
	}
	if s.cfg.Workers {
		return s.queueResume(ctx, row)
	}
	if err := s.sup.Acquire(ctx, row.ID); err != nil {
		return nil, err
	}
	return s.enqueue(ctx, &run{id: row.ID, sessionID: row.SessionID, resumed: true, resend: p.ResendUnknown}, row.Kind)
}

// leftQueue reports whether a run whose drive has ended (its end is
// stored: a client may have seen it and asked again at once) has left the
// queue, waiting a little for the drive's last steps (its notifications)
// to finish. A run the store says is running is live.
func (s *Server) leftQueue(ctx context.Context, row *store.Run) bool {
	if row.Status == event.StatusRunning || row.Status == event.StatusQueued {
		return false
	}
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, _, live := s.queue.get(row.ID); !live {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// enqueue queues a run whose lease the gateway holds.
func (s *Server) enqueue(ctx context.Context, r *run, kind string) (*api.RunStartResult, error) {
	running, err := s.queue.add(r)
	if err != nil {
		// Unreachable while admit is held; never leave a run behind.
		s.endUnstarted(ctx, r, errDrained)
		return nil, err
	}
	status := event.StatusQueued
	if running {
		status = event.StatusRunning
	}
	s.log.Info("run queued", "run_id", r.id, "session_id", r.sessionID, "kind", kind, "resumed", r.resumed, "status", status)
	return &api.RunStartResult{RunID: r.id, SessionID: r.sessionID, Status: status}, nil
}

// runStatus is a stored run's status as people are shown it, or queued
// while it waits here.
func (s *Server) runStatus(r *store.Run) string {
	if _, running, ok := s.queue.get(r.ID); ok && !running {
		return event.StatusQueued
	}
	return r.ShownStatus()
}

func (s *Server) runInfo(r *store.Run) api.RunInfo {
	info := s.db.RunView(r)
	info.Status = s.runStatus(r)
	return info
}

// cancelRun is run.cancel: it stops a queued or running run, resumably
// (mode interrupt) or for good (cancel, the default), and waits a little
// for its terminal event, so the answer can show how it ended.
func (s *Server) cancelRun(ctx context.Context, p api.RunCancelParams) (*api.RunInfo, error) {
	if p.RunID == "" {
		return nil, errorf(api.CodeBadRequest, "run_id is required")
	}
	cause := errCancelled
	switch p.Mode {
	case "", api.CancelModeCancel:
	case api.CancelModeInterrupt:
		cause = errInterrupted
	default:
		return nil, errorf(api.CodeBadRequest, "mode %q: want %s or %s", p.Mode, api.CancelModeInterrupt, api.CancelModeCancel)
	}
	row, err := s.db.GetRun(ctx, p.RunID)
	if err != nil {
		return nil, err
	}
	if s.cfg.Workers {
		kind := store.StopCancel
		if p.Mode == api.CancelModeInterrupt {
			kind = store.StopInterrupt
		}
		return s.stopQueued(ctx, row, kind, cause)
	}
	waiting, found := s.queue.stop(row.ID, cause)
	switch {
	case !found && row.Status == event.StatusWaiting && row.SessionID != "":
		if p.Mode == api.CancelModeInterrupt {
			return nil, errorf(api.CodeConflict, "run %s waits already: nothing runs until it is answered (wait.answer) or cancelled", row.ID)
		}
		if err := s.cancelWaiting(ctx, row, cause); err != nil {
			return nil, err
		}
	case !found:
		return nil, errorf(api.CodeConflict, "run %s is not running here (status %s)", row.ID, row.Status)
	case waiting != nil:
		s.endUnstarted(ctx, waiting, cause)
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

// endUnstarted records the end of a run that never started: stopped
// while queued, or still queued when the gateway stopped. Its lease is
// kept if that cannot be recorded, for the next start to reclaim the run.
func (s *Server) endUnstarted(ctx context.Context, r *run, cause error) {
	defer s.queue.forget(r)
	persist := context.WithoutCancel(ctx)
	sess, _, err := s.sessions.open(persist, r.sessionID)
	if err == nil {
		_, err = sess.append(persist, s.unstartedEnd(persist, r.id, cause))
	}
	if err != nil {
		s.log.Error("record the end of a queued run; the next start reclaims it", "run_id", r.id, "err", err)
		return
	}
	if err := s.sup.Release(persist, r.id); err != nil {
		s.log.Error("release lease", "run_id", r.id, "err", err)
	}
}

// unstartedEnd is the terminal event of a run stopped with cause while it
// waited to start.
func (s *Server) unstartedEnd(ctx context.Context, runID string, cause error) event.Event {
	typ, fin := supervisor.Ending(supervisor.Outcome{Cause: cause})
	row, err := s.db.GetRun(ctx, runID)
	switch {
	case err == nil && row.Status == event.StatusWaiting:
		fin.Detail += " while it waited"
	case !errors.Is(cause, errDrained): // the next start looks for exactly reasonDrained
		fin.Detail += " before it started"
	}
	if err == nil {
		fin.Turns, fin.Usage = row.Turns, row.Usage // a resumed run has some already
	}
	e := event.New(typ, fin)
	e.RunID = runID
	return e
}

// sink persists a run's events through its session, which then fans
// them out.
type sink struct {
	sess  *session
	runID string
}

// Emit persists e in the session; its events are kept even while the run
// is being stopped, so ctx's cancellation is ignored.
func (k *sink) Emit(ctx context.Context, e event.Event) error {
	if e.RunID == "" {
		e.RunID = k.runID
	}
	_, err := k.sess.append(context.WithoutCancel(ctx), e)
	return err
}

// execute drives a run that the queue started, in an `agent runner`
// child, through the supervisor: from run.started to its terminal event.
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
	opts, err := supervisor.DecodeOptions(row)
	if err != nil {
		// Nothing can drive it; say so rather than leave it running.
		typ, fin := supervisor.Ending(supervisor.Outcome{Err: err})
		if _, err := sess.append(persist, withRun(event.New(typ, fin), r.id)); err == nil {
			_ = s.sup.Release(persist, r.id)
		}
		log.Error("run has unreadable options", "err", err)
		return
	}
	if opts.Timeout == 0 {
		opts.Timeout = supervisor.Duration(s.cfg.RunTimeout)
	}
	log.Info("run started", "kind", row.Kind, "resumed", r.resumed)
	end, err := s.sup.Drive(ctx, row, supervisor.Drive{
		Options: opts, Resume: r.resumed, ResendUnknown: r.resend, Child: true, Sink: &sink{sess: sess, runID: r.id},
	})
	if err != nil {
		log.Error("the end of the run was not recorded; the next start reclaims it", "err", err)
		return
	}
	if end.Type == event.RunWaiting {
		log.Info("run waits; its slot is free", "detail", end.Data.Detail)
		s.parked(r)
		return
	}
	log.Info("run ended", "status", end.Data.Status, "exit_code", end.Data.ExitCode, "reason", end.Data.Reason, "detail", end.Data.Detail)
	if r.woken {
		s.wakes.driven(r.id, false)
	}
	s.resumeWhenLimited(r.id, end.Data)
}

func withRun(e event.Event, runID string) event.Event {
	e.RunID = runID
	return e
}

// getRun is run.get.
func (s *Server) getRun(ctx context.Context, id string) (*api.RunInfo, error) {
	if id == "" {
		return nil, errorf(api.CodeBadRequest, "run_id is required")
	}
	row, err := s.db.GetRun(ctx, id)
	if err != nil {
		return nil, err
	}
	info := s.runInfo(row)
	return &info, nil
}

// localSession refuses a run in agent chat's local session: the chat
// keeps its sequence, which a gateway's session hub would write too.
func localSession(id string) *api.Error {
	return errorf(api.CodeConflict, "session %s is agent chat's, kept in the local store: go on in it with agent chat --session %s", id, id)
}
