package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"agent/event"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
)

// People in the loop (docs/PROTOCOL.md#waits): the inbox of waiting runs,
// the answers this gateway takes (wait.answer, the HTTP routes, the web
// view), all through supervisor.Answer, and the waking of its waiting
// runs. A run that waits has ended its drive and freed its slot; it goes
// on when answered, through any channel (this gateway, another process on
// the store, a link), or at its deadline, also after a restart. On a
// shared store (Config.Workers) the workers' queue wakes it instead
// (store.QueueParkedRun, ResolveWait), for whichever worker is free.

// defaultWakePoll is how often a gateway looks in the store for waits an
// other process answered or whose deadline passed; its own answers wake a
// run at once, and PostgreSQL notifies it of the others.
const defaultWakePoll = 50 * time.Millisecond

// Limits of an answer's fields.
const (
	maxAnswer = maxInput // bytes of an answer or a reason
	maxWho    = 200      // characters
)

func (s *Server) waitRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/waiting", s.bounded(s.httpWaiting))
	mux.HandleFunc("POST /v1/runs/{id}/waits/{wait}", s.bounded(s.httpAnswer))
	mux.HandleFunc("POST /v1/runs/{id}/signals/{name}", s.bounded(s.httpSignal))
}

// requestVia is the channel an authenticated request answers through: the
// web view when its page's cookie signed it in, else the gateway's API.
func requestVia(r *http.Request) string {
	if _, hasBearer := bearer(r); !hasBearer {
		if _, err := r.Cookie(cookieName(r)); err == nil {
			return event.ViaWeb
		}
	}
	return event.ViaGateway
}

// answerWait is wait.answer: one decision on one wait, which the first
// answer from any channel wins; the run is woken at once.
func (s *Server) answerWait(ctx context.Context, p api.WaitAnswerParams, via string) (*api.WaitInfo, error) {
	switch {
	case p.RunID == "":
		return nil, errorf(api.CodeBadRequest, "run_id is required")
	case p.WaitID == "":
		return nil, errorf(api.CodeBadRequest, "wait_id is required: GET /v1/waiting lists the open waits")
	case len(p.Text) > maxAnswer || len(p.Reason) > maxAnswer:
		return nil, errorf(api.CodeBadRequest, "the answer or reason has more than %d bytes", maxAnswer)
	case utf8.RuneCountInString(p.Who) > maxWho:
		return nil, errorf(api.CodeBadRequest, "who has more than %d characters", maxWho)
	}
	d := supervisor.Decision{WaitID: p.WaitID, Decide: p.Decision, Via: via, Who: p.Who}
	switch p.Decision {
	case supervisor.DecideAllow:
		d.Always = p.Always
	case supervisor.DecideDeny:
		d.Text = strings.TrimSpace(p.Reason)
	case supervisor.DecideAnswer:
		d.Text = strings.TrimSpace(p.Text)
		if d.Text == "" {
			return nil, errorf(api.CodeBadRequest, "text is required: the answer to the question")
		}
	case supervisor.DecideSignal:
		if p.Name == "" {
			return nil, errorf(api.CodeBadRequest, "name is required: the signal's name")
		}
		if len(p.Data) > 0 && !json.Valid(p.Data) {
			return nil, errorf(api.CodeBadRequest, "data must be JSON")
		}
		d.Name, d.Data = p.Name, p.Data
	default:
		return nil, errorf(api.CodeBadRequest, "decision %q: want %s, %s or %s", p.Decision,
			supervisor.DecideAllow, supervisor.DecideDeny, supervisor.DecideAnswer)
	}
	return s.decide(ctx, p.RunID, d)
}

// decide gives a run's wait its answer and wakes the run.
func (s *Server) decide(ctx context.Context, runID string, d supervisor.Decision) (*api.WaitInfo, error) {
	row, err := s.db.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	w, err := supervisor.Answer(ctx, s.db, row.ID, d)
	if err != nil {
		return nil, err
	}
	s.log.Info("wait answered", "run_id", row.ID, "wait_id", w.Waiting.WaitID, "outcome", w.Resolution.Outcome, "via", d.Via)
	s.wakeSoon()
	info := api.NewWaitInfo(row, w)
	return &info, nil
}

// waiting is the inbox: every open wait of a run that waits.
func (s *Server) waiting(ctx context.Context) (*api.WaitingList, error) {
	return api.Inbox(ctx, s.db)
}

func (s *Server) httpWaiting(w http.ResponseWriter, r *http.Request) {
	list, err := s.waiting(r.Context())
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// httpAnswer is POST /v1/runs/ID/waits/WAIT_ID: wait.answer over HTTP.
func (s *Server) httpAnswer(w http.ResponseWriter, r *http.Request) {
	var p api.WaitAnswerParams
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		writeError(w, errorf(api.CodeBadRequest, "body: want {\"decision\":\"allow|deny|answer\",…}: %v", err))
		return
	}
	p.RunID, p.WaitID = r.PathValue("id"), r.PathValue("wait")
	info, err := s.answerWait(r.Context(), p, requestVia(r))
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// httpSignal is POST /v1/runs/ID/signals/NAME: the signal the run waits
// for (wait_for_signal), its body the JSON data it carries (or none).
func (s *Server) httpSignal(w http.ResponseWriter, r *http.Request) {
	var data json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&data); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, errorf(api.CodeBadRequest, "body: want the signal's data as JSON, or nothing: %v", err))
		return
	}
	if string(data) == "null" {
		data = nil
	}
	d := supervisor.Decision{Decide: supervisor.DecideSignal, Name: r.PathValue("name"), Data: data, Via: requestVia(r)}
	info, err := s.decide(r.Context(), r.PathValue("id"), d)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// wakes is the gateway's record of waking its waiting runs.
type wakes struct {
	kick chan struct{} // a wait was answered, or a run parked: look now

	mu sync.Mutex
	// elsewhere are waiting runs outside sessions, `agent run`'s: agent
	// resume or --resume continues them, not a gateway.
	elsewhere map[string]bool
	// stuck counts, by run, the drives in a row that parked again with an
	// answer still unjournaled, and when the last began: such a run is
	// woken again only after a growing pause, never in a tight loop.
	stuck map[string]stuckRun
}

type stuckRun struct {
	times int
	woken time.Time
}

func newWakes() *wakes {
	return &wakes{kick: make(chan struct{}, 1), elsewhere: map[string]bool{}, stuck: map[string]stuckRun{}}
}

// wakeSoon makes the wake loop look at once.
func (s *Server) wakeSoon() {
	select {
	case s.wakes.kick <- struct{}{}:
	default:
	}
}

// wakeLoop wakes the waiting runs that may go on, until the gateway
// stops: at once when this gateway answers or a run parks, when
// PostgreSQL says another process answered, at the soonest deadline, and
// every WakePoll besides (another process's answer on SQLite).
func (s *Server) wakeLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.db.Listen(ctx, []string{store.ChannelWaits}, func(string, string) { s.wakeSoon() }) }()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.wakes.kick:
		case <-t.C:
		}
		wait := s.cfg.WakePoll
		if next := s.wakeWaiting(ctx); !next.IsZero() && time.Until(next) < wait {
			wait = max(time.Until(next), 0)
		}
		t.Reset(wait)
	}
}

// wakeWaiting queues the waiting runs that may go on now, and returns the
// soonest deadline of the others.
func (s *Server) wakeWaiting(ctx context.Context) time.Time {
	ids, next, err := s.db.Wakeable(ctx, s.db.Now())
	if err != nil {
		s.log.Error("look for waiting runs to wake", "err", err)
		return time.Time{}
	}
	for _, id := range ids {
		s.wakeRun(ctx, id)
	}
	return next
}

// wakeRun takes the lease of a waiting run of a session and queues it to
// continue where it stopped (Drive with Resume: the answer, or the
// deadline's outcome, is journaled first).
func (s *Server) wakeRun(ctx context.Context, id string) {
	if s.wakes.skip(id) || s.stopping.Load() {
		return
	}
	if _, _, live := s.queue.get(id); live {
		return
	}
	row, err := s.db.GetRun(ctx, id)
	if err != nil {
		s.log.Error("read a waiting run", "run_id", id, "err", err)
		return
	}
	if row.SessionID == "" {
		s.wakes.mu.Lock()
		s.wakes.elsewhere[id] = true
		s.wakes.mu.Unlock()
		return
	}
	if err := s.sup.Acquire(ctx, id); err != nil {
		var held *store.LeaseHeldError
		if !errors.As(err, &held) { // held: its driver has it, or is still letting it go
			s.log.Error("take a waiting run's lease", "run_id", id, "err", err)
		}
		return
	}
	// Another process may have continued it before the lease was ours.
	if row, err = s.db.GetRun(ctx, id); err != nil || row.Status != event.StatusWaiting {
		_ = s.sup.Release(ctx, id)
		return
	}
	s.admit.RLock()
	defer s.admit.RUnlock()
	if s.stopping.Load() {
		_ = s.sup.Release(ctx, id)
		return
	}
	if _, err := s.queue.add(&run{id: id, sessionID: row.SessionID, resumed: true, woken: true}); err != nil {
		_ = s.sup.Release(ctx, id)
		return
	}
	s.wakes.woke(id)
	s.log.Info("waiting run woken", "run_id", id, "session_id", row.SessionID)
}

// skip says whether to leave a wakeable run alone for now.
func (w *wakes) skip(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.elsewhere[id] {
		return true
	}
	st, ok := w.stuck[id]
	return ok && st.times > 0 && time.Since(st.woken) < min(100*time.Millisecond<<(st.times-1), time.Minute)
}

func (w *wakes) woke(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.stuck[id]
	st.woken = time.Now()
	w.stuck[id] = st
}

// driven notes how a drive of a woken run ended: parked again without
// journaling an answer it was woken for (stuck), or anything else.
func (w *wakes) driven(id string, stuck bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !stuck {
		delete(w.stuck, id)
		return
	}
	st := w.stuck[id]
	st.times++
	w.stuck[id] = st
}

// parked follows a drive of this gateway that ended with its run waiting:
// its slot is free once the run's goroutine returns, and the wake loop
// then looks again, for an answer that came meanwhile.
func (s *Server) parked(r *run) {
	stuck := false
	if ws, err := s.db.Waits(context.Background(), r.id); err == nil {
		for _, w := range ws {
			stuck = stuck || (w.Resolution != nil && !w.Journaled)
		}
	}
	if r.woken {
		s.wakes.driven(r.id, stuck)
		if stuck {
			s.log.Warn("a woken run parked again without taking its answer; waking it again later", "run_id", r.id)
		}
	}
	go func() {
		<-r.done
		s.wakeSoon()
	}()
}

// cancelWaiting ends a run parked on a wait, which no process drives: it
// takes the run's lease, records the end in its session, and lets the
// lease go. Its open waits are answered by nobody.
func (s *Server) cancelWaiting(ctx context.Context, row *store.Run, cause error) error {
	if s.cfg.Workers {
		_, err := s.stopQueued(ctx, row, store.StopCancel, cause) // parked in the workers' queue
		return err
	}
	if err := s.sup.Acquire(ctx, row.ID); err != nil {
		return err
	}
	persist := context.WithoutCancel(ctx)
	defer func() { _ = s.sup.Release(persist, row.ID) }()
	if now, err := s.db.GetRun(persist, row.ID); err != nil || now.Status != event.StatusWaiting {
		return errorf(api.CodeConflict, "run %s is no longer waiting", row.ID)
	}
	sess, _, err := s.sessions.open(persist, row.SessionID)
	if err != nil {
		return err
	}
	_, err = sess.append(persist, s.unstartedEnd(persist, row.ID, cause))
	return err
}
