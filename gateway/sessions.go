package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"agent/event"
	"agent/gateway/api"
	"agent/store"
)

// session is the gateway's live state of one session: the journal that
// numbers its events and the hub that fans them out. One per session per
// process, since two journals would hand out the same seqs.
type session struct {
	id      string
	hub     *hub
	metrics *metrics

	// appendMu makes append-then-publish atomic, so subscribers see
	// events in seq order.
	appendMu sync.Mutex
	journal  *store.Journal

	// startMu serialises run.start in the session, so an idempotency key
	// is looked up and used atomically.
	startMu sync.Mutex
}

// append persists e through the session journal, then publishes it. The
// event must name its run.
func (s *session) append(ctx context.Context, e event.Event) (event.Event, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	e, err := s.journal.Append(ctx, e)
	if err != nil {
		return e, err
	}
	s.hub.publish(newItem(e))
	s.metrics.observe(e)
	return e, nil
}

// sessions is the registry of live session state and write locks.
type sessions struct {
	db      *store.DB
	buffer  int
	metrics *metrics

	mu    sync.Mutex
	byID  map[string]*session
	locks map[string]uint64 // session id -> id of the connection holding its write lock
}

func newSessions(db *store.DB, buffer int, m *metrics) *sessions {
	return &sessions{db: db, buffer: buffer, metrics: m, byID: map[string]*session{}, locks: map[string]uint64{}}
}

// open resolves id (or a unique prefix) and returns the session's live
// state, loading it on first use, with its stored row.
func (r *sessions) open(ctx context.Context, id string) (*session, *store.Session, error) {
	if id == "" {
		return nil, nil, errorf(api.CodeBadRequest, "session_id is required")
	}
	row, err := r.db.GetSession(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.byID[row.ID]; ok {
		return s, row, nil
	}
	j, err := r.db.SessionJournal(ctx, row.ID)
	if err != nil {
		return nil, nil, err
	}
	// The journal continues after the last stored seq; so does the hub.
	s := &session{id: row.ID, journal: j, hub: newHub(r.buffer, row.LastSeq), metrics: r.metrics}
	r.byID[row.ID] = s
	return s, row, nil
}

// all returns the live state of every session this gateway has loaded.
func (r *sessions) all() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*session, 0, len(r.byID))
	for _, s := range r.byID {
		out = append(out, s)
	}
	return out
}

// create makes a new session; jobID names the job whose tick it is for,
// "" for a client's.
func (r *sessions) create(ctx context.Context, title, jobID string) (*store.Session, error) {
	row := &store.Session{ID: uuid.NewString(), Title: title, JobID: jobID}
	if err := r.db.CreateSession(ctx, row); err != nil {
		return nil, err
	}
	return row, nil
}

// lock gives connection holder the session's write lock; holding it
// already is fine.
func (r *sessions) lock(id string, holder uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.locks[id]; ok && h != holder {
		return errorf(api.CodeSessionLocked, "session %s is locked by another client; it is released when that client disconnects or sends session.release", id)
	}
	r.locks[id] = holder
	return nil
}

// release gives the lock up; releasing a lock one does not hold is a
// conflict, so a client learns it never had it.
func (r *sessions) release(id string, holder uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.locks[id]
	if !ok || h != holder {
		return errorf(api.CodeConflict, "this connection does not hold the lock of session %s", id)
	}
	delete(r.locks, id)
	return nil
}

// releaseAll drops every lock a connection held, when it closes.
func (r *sessions) releaseAll(holder uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, h := range r.locks {
		if h == holder {
			delete(r.locks, id)
		}
	}
}

// checkWrite refuses a run.start in a session another client holds
// locked. holder 0 is a request without a connection (HTTP), which any
// lock refuses.
func (r *sessions) checkWrite(id string, holder uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.locks[id]; ok && (holder == 0 || h != holder) {
		return errorf(api.CodeSessionLocked, "session %s is locked by another client; runs can be started there only by the lock holder", id)
	}
	return nil
}

// lockedBy says who holds a session's lock, as seen by holder.
func (r *sessions) lockedBy(id string, holder uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.locks[id]
	switch {
	case !ok:
		return ""
	case h == holder && holder != 0:
		return "this connection"
	}
	return "another client"
}

// flush writes the journals' buffered deltas, at shutdown.
func (r *sessions) flush(ctx context.Context) error {
	r.mu.Lock()
	all := make([]*session, 0, len(r.byID))
	for _, s := range r.byID {
		all = append(all, s)
	}
	r.mu.Unlock()
	var errs []error
	for _, s := range all {
		s.appendMu.Lock()
		if err := s.journal.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("flush session %s: %w", s.id, err))
		}
		s.appendMu.Unlock()
	}
	return errors.Join(errs...)
}

func sessionInfo(s *store.Session) api.SessionInfo {
	return api.SessionInfo{SessionView: s.View()}
}

// loaded returns a session's live state if it has been opened.
func (r *sessions) loaded(id string) (*session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	return s, ok
}

// listSessions is session.list and GET /v1/sessions.
func (s *Server) listSessions(ctx context.Context, p api.SessionListParams, holder uint64) (*api.SessionList, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.db.ListSessions(ctx, limit, p.IncludeJobs)
	if err != nil {
		return nil, err
	}
	list := &api.SessionList{Sessions: make([]api.SessionInfo, 0, len(rows))}
	for i := range rows {
		info := sessionInfo(&rows[i])
		info.LockedBy = s.sessions.lockedBy(rows[i].ID, holder)
		list.Sessions = append(list.Sessions, info)
	}
	return list, nil
}

// sessionDetail is session.get: the session and its runs.
func (s *Server) sessionDetail(ctx context.Context, id string, holder uint64) (*api.SessionDetail, error) {
	if id == "" {
		return nil, errorf(api.CodeBadRequest, "session_id is required")
	}
	row, err := s.db.GetSession(ctx, id)
	if err != nil {
		return nil, err
	}
	runs, err := s.db.ListSessionRuns(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	d := &api.SessionDetail{Session: sessionInfo(row), Runs: make([]api.RunInfo, 0, len(runs))}
	d.Session.LockedBy = s.sessions.lockedBy(row.ID, holder)
	for i := range runs {
		d.Runs = append(d.Runs, s.runInfo(&runs[i]))
	}
	return d, nil
}

// forkSession is session.fork: a new session whose history is the
// source's up to a seq.
func (s *Server) forkSession(ctx context.Context, p api.SessionForkParams) (*api.SessionInfo, error) {
	if p.SessionID == "" {
		return nil, errorf(api.CodeBadRequest, "session_id is required")
	}
	if p.Seq < 0 {
		return nil, errorf(api.CodeBadRequest, "seq must be 0 (all) or more")
	}
	if e := checkTitle(p.Title); e != nil {
		return nil, e
	}
	row, err := s.db.ForkSession(ctx, p.SessionID, uuid.NewString(), p.Title, p.Seq)
	if err != nil {
		return nil, err
	}
	info := sessionInfo(row)
	return &info, nil
}

// deleteSession is session.delete: the session goes with its runs and
// what they recorded (store.DeleteSession), unless one of its runs is
// running or waiting. No run starts in it meanwhile: run.start takes the
// session's startMu and then finds it gone. Its live state stays until
// the gateway stops, for the streams attached to it; opening it again
// finds it gone from the store.
func (s *Server) deleteSession(ctx context.Context, id string) (*api.SessionDeleteResult, error) {
	if id == "" {
		return nil, errorf(api.CodeBadRequest, "session_id is required")
	}
	live, row, err := s.sessions.open(ctx, id)
	if err != nil {
		return nil, err
	}
	live.startMu.Lock()
	defer live.startMu.Unlock()
	if row, err = s.db.DeleteSession(ctx, row.ID); err != nil {
		return nil, err
	}
	s.log.Info("session deleted", "session_id", row.ID, "runs", row.Runs)
	return &api.SessionDeleteResult{SessionInfo: sessionInfo(row), Deleted: true}, nil
}
