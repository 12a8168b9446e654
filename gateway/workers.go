package gateway

import (
	"context"
	"time"

	"agent/event"
	"agent/gateway/api"
	"agent/store"
)

// A gateway with Config.Workers drives no run itself (docs/ARCHITECTURE.md#a-run-on-many-machines-end-to-end):
// run.start queues the run in the store, `agent worker` processes claim
// and drive it, and run.cancel asks the run's worker to stop it. Every
// gateway on the store serves every session: what workers persist reaches
// the session's subscribers through follow, which reads the store when
// PostgreSQL notifies it of new events (and every followPoll besides), so
// clients of any gateway get the same events, in seq order, live and on
// replay.

// followPoll is how often a gateway reads the store for new events of
// its followed sessions without a notification.
const followPoll = 500 * time.Millisecond

// endPoll is how often a gateway looks whether a worker's run has ended.
const endPoll = 100 * time.Millisecond

// follow publishes, to each session's subscribers, the events workers
// persisted since the last it published, until the gateway stops.
func (s *Server) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	notified := make(chan string, 256)
	go func() {
		_ = s.db.Listen(ctx, []string{store.ChannelEvents}, func(_, sessionID string) {
			select {
			case notified <- sessionID:
			default: // full: the next poll catches up
			}
		})
	}()
	t := time.NewTicker(followPoll)
	defer t.Stop()
	// Sessions nobody watches here are read at the next tick, once, however
	// many notifications came: their events only feed the metrics.
	unwatched := map[*session]bool{}
	for {
		select {
		case <-s.quit:
			return
		case id := <-notified:
			sess, ok := s.sessions.loaded(id)
			switch {
			case id == "":
				s.catchUpAll(ctx, unwatched)
			case ok && sess.hub.size() > 0:
				s.catchUp(ctx, sess)
			case ok:
				unwatched[sess] = true
			}
		case <-t.C:
			s.catchUpAll(ctx, unwatched)
		}
	}
}

// catchUpAll catches up the sessions someone watches and those in
// unwatched, which it empties.
func (s *Server) catchUpAll(ctx context.Context, unwatched map[*session]bool) {
	for _, sess := range s.sessions.all() {
		if sess.hub.size() > 0 || unwatched[sess] {
			s.catchUp(ctx, sess)
		}
	}
	clear(unwatched)
}

// catchUp publishes the session's stored events after the last one its
// hub published.
func (s *Server) catchUp(ctx context.Context, sess *session) {
	sess.appendMu.Lock()
	defer sess.appendMu.Unlock()
	for {
		evs, err := s.db.ListSessionEvents(ctx, sess.id, sess.hub.lastSeq(), replayPage)
		if err != nil {
			s.log.Error("read a session's new events", "session_id", sess.id, "err", err)
			return
		}
		for _, e := range evs {
			sess.hub.publish(newItem(e))
			sess.metrics.observe(e)
		}
		if len(evs) < replayPage {
			return
		}
	}
}

// queueResume queues a run of a session for a worker to resume.
func (s *Server) queueResume(ctx context.Context, row *store.Run) (*api.RunStartResult, error) {
	if err := s.db.QueueRun(ctx, row.ID); err != nil {
		return nil, err
	}
	s.log.Info("run queued for a worker", "run_id", row.ID, "session_id", row.SessionID, "resumed", true)
	return &api.RunStartResult{RunID: row.ID, SessionID: row.SessionID, Status: event.StatusQueued}, nil
}

// stopQueued stops a run workers drive. One no worker claimed yet ends
// here and now, even while another run of its session is driven: its one
// event takes the session's next seq in its own transaction. Otherwise it
// asks the run's worker to stop it, and waits a little for the run to
// end, so the answer can show how it ended.
func (s *Server) stopQueued(ctx context.Context, row *store.Run, kind string, cause error) (*api.RunInfo, error) {
	claim, err := s.db.ClaimQueuedRun(ctx, row.ID, s.sup.Owner(), s.sup.LeaseTTL())
	if err != nil {
		return nil, err
	}
	if claim != nil {
		persist := context.WithoutCancel(ctx)
		end := &storedSink{db: s.db, sessionID: row.SessionID, runID: row.ID, owner: s.sup.Owner()}
		if err := end.Emit(persist, s.unstartedEnd(persist, row.ID, cause)); err != nil {
			return nil, err // the lease expires and a worker ends it
		}
		if err := s.sup.Release(persist, row.ID); err != nil {
			s.log.Error("release lease", "run_id", row.ID, "err", err)
		}
	} else {
		ok, err := s.db.RequestStop(ctx, row.ID, kind)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errorf(api.CodeConflict, "run %s is not queued or running (status %s)", row.ID, row.ShownStatus())
		}
		select {
		case <-s.ended(ctx, row.ID):
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
		}
	}
	if row, err = s.db.GetRun(context.WithoutCancel(ctx), row.ID); err != nil {
		return nil, err
	}
	info := s.runInfo(row)
	return &info, nil
}

// ended returns a channel closed once the run's drive has ended: its
// status is no longer running and it waits for no worker to start it; a
// run parked on a wait has ended its drive, though it is queued for the
// worker that wakes it. It is nil for a run this gateway would drive
// itself (the local queue says when those end).
func (s *Server) ended(ctx context.Context, runID string) <-chan struct{} {
	if !s.cfg.Workers {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(endPoll)
		defer t.Stop()
		for {
			row, err := s.db.GetRun(ctx, runID)
			if err != nil || row.Status == event.StatusWaiting || (row.Status != event.StatusRunning && row.Queue != event.StatusWaiting) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-s.quit:
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// storedSink records one event of a run no process drives (a rewind, the
// end of a run stopped before a worker claimed it) in a session that
// workers write to. The gateway's own journal of the session may be
// behind what workers stored, so it writes through a journal opened for
// the one event, which takes the session's next seq in its transaction;
// follow then publishes it, as every worker event. With owner, the write
// must hold the run's lease; with idle, no other run of the session may be
// driven (a rewind changes the files it works on).
type storedSink struct {
	db               *store.DB
	sessionID, runID string
	owner            string
	idle             bool
}

func (k *storedSink) Emit(ctx context.Context, e event.Event) error {
	if e.RunID == "" {
		e.RunID = k.runID
	}
	if k.idle {
		if err := sessionIdle(ctx, k.db, k.sessionID, k.runID); err != nil {
			return err
		}
	}
	j, err := k.db.SessionJournal(ctx, k.sessionID)
	if err != nil {
		return err
	}
	if k.owner != "" {
		j.Fence(k.owner)
	}
	j.Unshown(0)
	if _, err := j.Append(ctx, e); err != nil {
		return err
	}
	return j.Close(ctx)
}

// sessionIdle refuses (conflict) while a run of the session other than
// runID is being driven by a worker.
func sessionIdle(ctx context.Context, db *store.DB, sessionID, runID string) error {
	held, err := db.SessionHeld(ctx, sessionID, runID)
	if err != nil {
		return err
	}
	if held {
		return errorf(api.CodeConflict, "session %s has a run in progress; rewind after it ends", sessionID)
	}
	return nil
}
