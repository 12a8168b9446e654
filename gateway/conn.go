package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"agent/event"
	"agent/gateway/api"
	"agent/store"

	"github.com/coder/websocket"
)

// WebSocket limits.
const (
	maxFrame   = api.MaxFrame // the largest frame a client may send
	replayPage = 512          // events read from the store at a time during a replay
)

// Close statuses the gateway uses.
const (
	StatusGoingAway       = websocket.StatusGoingAway
	StatusPolicyViolation = websocket.StatusPolicyViolation
)

// conn is one WebSocket client. Requests are handled one at a time, in
// order; event frames come from one goroutine per attached session.
type conn struct {
	s      *Server
	id     uint64
	ws     *websocket.Conn
	frames *frameConn      // ws's socket: the gateway's text frames go straight to it
	ctx    context.Context // ends when the connection does
	cancel context.CancelFunc
	via    string // who answers a wait through it: the web view or an API client
	// protect marks the TCP connection as doing authorised work once
	// connect succeeds, so it is not evicted over the connection cap;
	// release undoes it at cleanup.
	protect func() (release func())
	release func()

	mu      sync.Mutex
	subs    map[string]*attachment // attached sessions
	jobSub  *subscriber            // job events, when the gateway has a scheduler
	closing bool                   // shutdown began: attach nothing more
	streams sync.WaitGroup         // session streams and the job stream, until each ends; Add only under mu while !closing
	wg      sync.WaitGroup         // pings; Add only under mu while !closing

	// live is set once the client has connected: it is pinged from then on.
	live atomic.Bool
	// Frames begun and written: keepalive closes a connection whose
	// frames make no progress.
	writesBegun, writesDone atomic.Uint64
	// Only keepalive touches these.
	pinged, stallSince time.Time
	doneSeen           uint64
}

// serveWS upgrades /ws after the checks every request gets.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	authed, e := s.checkRequest(r, true)
	if e != nil {
		writeError(w, e)
		return
	}
	hj := &hijackInto{ResponseWriter: w}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		InsecureSkipVerify: true, // the Origin was checked above, with a clearer answer
	})
	if err != nil {
		return // Accept has answered the client
	}
	ws.SetReadLimit(maxFrame)
	// A page's connection ends when it signs out.
	ctx, release := s.endWithSession(context.Background(), r)
	ctx, cancel := context.WithCancel(ctx)
	c := &conn{s: s, id: s.nextID.Add(1), ws: ws, frames: hj.conn, ctx: ctx, cancel: cancel, subs: map[string]*attachment{},
		protect: protector(r), via: event.ViaGateway}
	if authed {
		c.via = requestVia(r)
	}

	s.connMu.Lock()
	if s.connsClosed {
		s.connMu.Unlock()
		ws.Close(StatusGoingAway, "the gateway is stopping")
		release()
		cancel()
		return
	}
	s.conns[c] = struct{}{}
	s.connsWG.Add(1)
	s.connMu.Unlock()
	// The connection is read in a goroutine of its own and this handler
	// returns: what the HTTP server held for the upgrade request (the
	// request, its headers, the response and its buffer) is let go, which
	// each client would otherwise hold for as long as it stays.
	go func() {
		defer func() {
			release()
			s.connMu.Lock()
			delete(s.conns, c)
			s.connsGone++
			s.connMu.Unlock()
			s.connsWG.Done()
		}()
		c.serve(authed)
	}()
}

func (c *conn) serve(authed bool) {
	defer c.cleanup()
	if !c.handshake(authed) {
		return
	}
	c.pinged = time.Now()
	c.live.Store(true)
	c.forwardJobs()
	for {
		_, data, err := c.ws.Read(c.ctx)
		if err != nil {
			return
		}
		req, e := parseFrame(data)
		if e != nil {
			c.reply(req.ID, nil, e)
			continue
		}
		result, then, err := c.handle(req)
		if !c.reply(req.ID, result, err) {
			return
		}
		if then != nil {
			then()
		}
	}
}

// parseFrame reads a client's request frame. On an error, the Request
// has the ID to answer, if it could be read.
func parseFrame(data []byte) (api.Request, *api.Error) {
	var req api.Request
	if err := json.Unmarshal(data, &req); err != nil || req.Type != api.FrameReq || req.Method == "" {
		return req, errorf(api.CodeBadRequest, "a frame must be {\"type\":\"req\",\"id\":…,\"method\":…,\"params\":{…}}")
	}
	return req, nil
}

// handshake reads the connect frame. Anything else, a protocol this
// gateway does not speak, or a missing or wrong token ends the
// connection with an error saying so. A client that sends nothing
// within ConnectTimeout is disconnected: the library closes the
// connection when the read's context ends.
func (c *conn) handshake(authed bool) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.ConnectTimeout)
	_, data, err := c.ws.Read(ctx)
	cancel()
	if err != nil {
		c.ws.CloseNow()
		return false
	}
	var req api.Request
	if err := json.Unmarshal(data, &req); err != nil || req.Type != api.FrameReq {
		c.fail("", errorf(api.CodeNotConnected, "the first frame must be connect: {\"type\":\"req\",\"id\":\"1\",\"method\":\"connect\",\"params\":{\"protocol\":%d}}", api.Protocol))
		return false
	}
	if req.Method != api.MethodConnect {
		c.fail(req.ID, errorf(api.CodeNotConnected, "%s before connect: the first request must be connect {\"protocol\":%d}", req.Method, api.Protocol))
		return false
	}
	var p api.ConnectParams
	if len(req.Params) > 0 {
		if err := json.Unmarshal(req.Params, &p); err != nil {
			c.fail(req.ID, errorf(api.CodeBadRequest, "connect params: %v", err))
			return false
		}
	}
	switch {
	case p.Protocol != api.Protocol:
		c.fail(req.ID, errorf(api.CodeProtocol, "protocol %d is not supported: this gateway speaks protocol %d", p.Protocol, api.Protocol))
		return false
	case authed:
	case p.Token == "":
		c.fail(req.ID, &api.Error{Code: api.CodeUnauthorized, Message: msgNoToken})
		return false
	case !c.s.tokenEqual(p.Token):
		c.fail(req.ID, &api.Error{Code: api.CodeUnauthorized, Message: msgBadToken})
		return false
	}
	c.release = c.protect() // before the client hears it is connected
	c.watchJobs()           // so too: it misses no job event from then on
	return c.reply(req.ID, c.s.connectResult(), nil)
}

// fail answers a refused handshake and closes the connection: a res
// frame when there was a request to answer, else an error frame.
func (c *conn) fail(id string, e *api.Error) {
	if id != "" {
		c.reply(id, nil, e)
	} else {
		c.write(api.ErrorFrame{Type: api.FrameError, Error: e})
	}
	c.ws.Close(StatusPolicyViolation, truncate(e.Message, 120))
}

// reply sends a request's response; false means the client is gone.
func (c *conn) reply(id string, result any, err error) bool {
	res := api.Response{Type: api.FrameRes, ID: id, OK: err == nil}
	if err != nil {
		res.Error = toError(err)
		if res.Error.Code == api.CodeInternal {
			c.s.log.Error("request failed", "conn", c.id, "err", err)
		}
	} else {
		res.Result = result
	}
	return c.write(res) == nil
}

func (c *conn) write(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	return c.writeRaw(data)
}

// writeRaw sends one text frame. A client that does not take it within
// writeTimeout is gone: keepalive closes the connection then.
func (c *conn) writeRaw(data []byte) error {
	c.writesBegun.Add(1)
	defer c.writesDone.Add(1)
	return c.frames.writeText(data)
}

// shutdown closes the connection from the gateway's side, once the
// events already on their way to the client have been sent (a client
// watching a drain sees its runs end), or after a few seconds.
func (c *conn) shutdown(code websocket.StatusCode, reason string) {
	c.detach()
	sent := make(chan struct{})
	go func() {
		c.streams.Wait()
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
	}
	c.ws.Close(code, reason)
}

// detach ends every stream of the connection: their channels close, and
// the stream goroutines exit once they have sent what was buffered.
func (c *conn) detach() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	for id, a := range c.subs {
		if sess, ok := c.s.sessions.loaded(id); ok {
			sess.hub.unsubscribe(a.sub)
		}
	}
	if c.jobSub != nil {
		c.s.jobEvents.unsubscribe(c.jobSub)
	}
}

// cleanup runs once the read loop ends: detach every stream, release the
// session locks, wait for the goroutines.
func (c *conn) cleanup() {
	c.detach()
	c.s.sessions.releaseAll(c.id)
	c.ws.CloseNow()
	c.cancel()
	c.streams.Wait()
	c.wg.Wait()
	if c.release != nil {
		c.release()
	}
}

// handle runs one request. then, if not nil, runs after the response has
// been sent (session.resume's replay follows its response).
func (c *conn) handle(req api.Request) (result any, then func(), err error) {
	ctx := c.ctx
	s := c.s
	switch req.Method {
	case api.MethodConnect:
		return nil, nil, errorf(api.CodeBadRequest, "already connected")
	case api.MethodSessionCreate:
		var p api.SessionCreateParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		if e := checkTitle(p.Title); e != nil {
			return nil, nil, e
		}
		row, err := s.sessions.create(ctx, p.Title, "")
		if err != nil {
			return nil, nil, err
		}
		// The creator is attached from the start (docs/PROTOCOL.md#replay-and-attachment).
		sess, _, err := s.sessions.open(ctx, row.ID)
		if err != nil {
			return nil, nil, err
		}
		_, then, err := c.attach(sess, 0, false)
		return sessionInfo(row), then, err
	case api.MethodSessionList:
		var p api.SessionListParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		list, err := s.listSessions(ctx, p, c.id)
		return list, nil, err
	case api.MethodSessionGet:
		var p api.SessionParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		d, err := s.sessionDetail(ctx, p.SessionID, c.id)
		return d, nil, err
	case api.MethodSessionFork:
		var p api.SessionForkParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		info, err := s.forkSession(ctx, p)
		return info, nil, err
	case api.MethodSessionDelete:
		var p api.SessionParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		res, err := s.deleteSession(ctx, p.SessionID)
		return res, nil, err
	case api.MethodSessionLock, api.MethodSessionRelease:
		var p api.SessionParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		sess, _, err := s.sessions.open(ctx, p.SessionID)
		if err != nil {
			return nil, nil, err
		}
		if req.Method == api.MethodSessionLock {
			err = s.sessions.lock(sess.id, c.id)
		} else {
			err = s.sessions.release(sess.id, c.id)
		}
		if err != nil {
			return nil, nil, err
		}
		return api.SessionLockResult{SessionID: sess.id, Locked: req.Method == api.MethodSessionLock}, nil, nil
	case api.MethodSessionResume:
		var p api.SessionResumeParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		return c.resume(p)
	case api.MethodRunStart:
		var p api.RunStartParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		// A person can answer a session's questions (its clients, the web
		// view's inbox, a link), so the model may ask unless the client
		// says ask_human: false.
		if p.Options.AskHuman == nil {
			p.Options.AskHuman = new(true)
		}
		if p.SessionID == "" { // a new session: attached from the start, as its creator
			return c.startNew(func() (*api.RunStartResult, error) { return s.startRun(ctx, p, c.id) })
		}
		return c.startOrResume(p.SessionID, func() (*api.RunStartResult, error) { return s.startRun(ctx, p, c.id) })
	case api.MethodRunResume:
		var p api.RunResumeParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		sessionID := ""
		if row, err := s.db.GetRun(ctx, p.RunID); err == nil {
			sessionID = row.SessionID
		}
		return c.startOrResume(sessionID, func() (*api.RunStartResult, error) { return s.resumeRun(ctx, p, c.id) })
	case api.MethodRunCancel:
		var p api.RunCancelParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		info, err := s.cancelRun(ctx, p)
		return info, nil, err
	case api.MethodRunGet:
		var p api.RunParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		info, err := s.getRun(ctx, p.RunID)
		return info, nil, err
	case api.MethodCheckpointList:
		var p api.CheckpointListParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		list, err := s.listCheckpoints(ctx, p)
		return list, nil, err
	case api.MethodCheckpointRewind:
		var p api.CheckpointRewindParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		rep, err := s.rewind(ctx, p)
		return rep, nil, err
	case api.MethodWaitAnswer:
		var p api.WaitAnswerParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		info, err := s.answerWait(ctx, p, c.via)
		return info, nil, err
	case api.MethodJobCreate, api.MethodJobUpdate, api.MethodJobPause, api.MethodJobResume, api.MethodJobDelete,
		api.MethodJobList, api.MethodJobRunNow, api.MethodJobGetRuns:
		if s.jobs != nil { // else unknown: this gateway has no scheduler
			res, err := s.jobMethod(ctx, req)
			return res, nil, err
		}
	}
	return nil, nil, errorf(api.CodeUnknownMethod, "method %q is not supported by this gateway; connect's answer lists the methods it has", req.Method)
}

// attachment is the connection's stream of one session's events.
type attachment struct {
	sub *subscriber
	// quit stops the stream without sending what it holds; it is set
	// before the subscriber is removed, which wakes the stream.
	quit atomic.Bool
	done chan struct{} // closed once the stream has stopped writing

	// Only the stream's goroutine touches these.
	sent  int64   // the last seq sent
	batch []*item // the storage of the last take
}

// resume is session.resume: it attaches the connection to a session's
// stream from after_seq, or attaches it again from there if it already
// is.
func (c *conn) resume(p api.SessionResumeParams) (any, func(), error) {
	if p.AfterSeq < 0 {
		return nil, nil, errorf(api.CodeBadRequest, "after_seq must be 0 or more")
	}
	sess, _, err := c.s.sessions.open(c.ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	return c.attach(sess, p.AfterSeq, true)
}

// startOrResume runs start, a run.start or run.resume in a session, and
// attaches the connection to that session if it is not yet: from the
// session's last seq before the run, so it receives every event of the
// run, in order, as every other client does (docs/PROTOCOL.md#replay-and-attachment).
func (c *conn) startOrResume(sessionID string, start func() (*api.RunStartResult, error)) (any, func(), error) {
	var sess *session
	var last int64
	if sessionID != "" && !c.attached(sessionID) {
		if s, _, err := c.s.sessions.open(c.ctx, sessionID); err == nil {
			sess, last = s, s.hub.lastSeq()
		}
	}
	res, err := start()
	if err != nil || sess == nil || sess.id != res.SessionID {
		return res, nil, err
	}
	_, then, err := c.attach(sess, last, false)
	if err != nil {
		return res, nil, nil // the run started; the client can still session.resume
	}
	return res, then, nil
}

// startNew runs start, a run.start that creates its session, and attaches
// the connection to the new session from its first event.
func (c *conn) startNew(start func() (*api.RunStartResult, error)) (any, func(), error) {
	res, err := start()
	if err != nil {
		return nil, nil, err
	}
	sess, _, err := c.s.sessions.open(c.ctx, res.SessionID)
	if err != nil {
		return res, nil, nil // the run started; the client can still session.resume
	}
	_, then, err := c.attach(sess, 0, false)
	if err != nil {
		return res, nil, nil
	}
	return res, then, nil
}

func (c *conn) attached(sessionID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.subs[sessionID]
	return ok
}

// attach starts streaming a session's events to the connection: the
// live stream is joined first and buffered, the store's events after
// afterSeq are sent, then the buffer, skipping what the store already
// gave: no gap, no duplicate. With again, an existing stream of the
// session is stopped first; without, an existing one is kept.
func (c *conn) attach(sess *session, afterSeq int64, again bool) (api.SessionResumeResult, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return api.SessionResumeResult{}, nil, errorf(api.CodeUnavailable, "the gateway is stopping")
	}
	old := c.subs[sess.id]
	if old != nil && !again {
		return api.SessionResumeResult{SessionID: sess.id, AfterSeq: afterSeq, LastSeq: sess.hub.lastSeq()}, nil, nil
	}
	if old != nil {
		old.quit.Store(true)
		sess.hub.unsubscribe(old.sub)
	}
	sub, last := sess.hub.subscribe()
	a := &attachment{sub: sub, done: make(chan struct{}), sent: afterSeq}
	c.subs[sess.id] = a
	then := func() {
		if old != nil {
			<-old.done // the old stream has stopped writing
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closing || c.subs[sess.id] != a {
			close(a.done) // detached, or attached again, before it began
			return
		}
		c.streams.Add(1)
		go c.stream(sess, a)
	}
	return api.SessionResumeResult{SessionID: sess.id, AfterSeq: afterSeq, LastSeq: last}, then, nil
}

// stream sends a session's events after a.sent: the replay from the
// store, then the live stream. Once it has caught up, no goroutine waits
// for the next event: the hub's fan-out writes it, and a reader
// (follow) starts only for a client that does not take it at once, or
// to end the stream.
func (c *conn) stream(sess *session, a *attachment) {
	err := replay(c.ctx, c.s.db, sess.id, a, c.writeRaw)
	if err == nil {
		start := func() { go c.follow(sess, a) }
		sendNow := func(items []*item, b *frameBatch) ([]*item, bool) { return c.sendNow(a, items, b) }
		end := func() { c.endStream(sess, a, errStreamEnded) } // detached: nothing to write
		if !a.sub.onDemand(start, sendNow, end) {
			return
		}
		if err = a.drain(c.writeRaw); err == nil {
			return
		}
	}
	c.endStream(sess, a, err)
}

// follow is a session stream's reader, started on demand: it sends what
// the socket did not take at once, then what is queued.
func (c *conn) follow(sess *session, a *attachment) {
	err := errSendFailed
	if c.flush() == nil {
		if err = a.drain(c.writeRaw); err == nil {
			return
		}
	}
	c.endStream(sess, a, err)
}

// sendNow writes items for the hub's fan-out while the socket takes them
// at once, as many frames in one system call as fit b (see sender). a, if
// not nil, is the session stream they belong to: what its replay sent is
// skipped, and nothing is written once it quit.
func (c *conn) sendNow(a *attachment, items []*item, b *frameBatch) (left []*item, blocked bool) {
	unsent := func(it *item) bool { return a == nil || it.ev.Seq > a.sent }
	for len(items) > 0 {
		if a != nil && a.quit.Load() {
			return items, true
		}
		b.reset()
		n := 0
		for ; n < len(items) && !b.full(); n++ {
			if unsent(items[n]) {
				b.add(items[n].frame)
			}
		}
		sent := len(b.ends)
		if sent > 0 {
			sent, blocked = c.frames.tryWrite(b)
		}
		i := 0 // past the item of the last frame sent
		for ; i < n && sent > 0; i++ {
			if unsent(items[i]) {
				if a != nil {
					a.sent = items[i].ev.Seq
				}
				sent--
			}
		}
		if blocked {
			return items[i:], true
		}
		items = items[n:]
	}
	return nil, false
}

// flush sends the rest of a frame the socket took only part of.
func (c *conn) flush() error {
	c.writesBegun.Add(1)
	defer c.writesDone.Add(1)
	return c.frames.flush()
}

// endStream ends a stream that stopped for err: a subscriber that
// overflowed is told where to resume, and disconnected.
func (c *conn) endStream(sess *session, a *attachment, err error) {
	defer c.streams.Done()
	defer close(a.done)
	switch {
	case errors.Is(err, errStreamEnded):
		c.overflowed(sess, a.sub, a.sent)
	case !errors.Is(err, errSendFailed) && !errors.Is(err, errStreamQuit) && c.ctx.Err() == nil:
		c.fail("", errorf(api.CodeInternal, "replay session %s: %v", sess.id, err))
	}
}

// Why a stream stopped, besides a store error.
var (
	errStreamEnded = errors.New("the live stream ended")  // detached, or overflowed
	errSendFailed  = errors.New("the client is gone")     // send failed
	errStreamQuit  = errors.New("attached again instead") // a.quit set
)

// replay sends through send a session's events in the store after
// a.sent. The live stream a joined before the replay began holds what
// comes after, which drain sends, skipping what the replay already sent:
// the client gets every event once, in order.
func replay(ctx context.Context, db *store.DB, sessionID string, a *attachment, send func([]byte) error) error {
	for {
		evs, err := db.ListSessionEvents(ctx, sessionID, a.sent, replayPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if a.quit.Load() {
				return errStreamQuit
			}
			if send(newItem(e).frame) != nil {
				return errSendFailed
			}
			a.sent = e.Seq
		}
		if len(evs) < replayPage {
			return nil
		}
	}
}

// drain sends through send what the live stream holds, skipping what was
// sent already, until nothing is left (nil: the fan-out goes on) or the
// stream ends; it says why.
func (a *attachment) drain(send func([]byte) error) error {
	for {
		if a.quit.Load() {
			return errStreamQuit
		}
		items, open, stop := a.sub.takeOrStop(a.batch)
		if stop {
			return nil
		}
		a.batch = items
		for _, it := range items {
			if a.quit.Load() {
				return errStreamQuit
			}
			if it.ev.Seq <= a.sent {
				continue // the replay sent it already
			}
			if send(it.frame) != nil {
				return errSendFailed
			}
			a.sent = it.ev.Seq
		}
		if !open {
			return errStreamEnded
		}
	}
}

// overflowed tells a subscriber that fell too far behind where to resume,
// and disconnects it; a subscriber simply detached hears nothing.
func (c *conn) overflowed(sess *session, sub *subscriber, sent int64) {
	if !sub.overflowed {
		return
	}
	c.s.log.Warn("slow consumer disconnected", "conn", c.id, "session_id", sess.id, "after_seq", sent)
	e := errorf(api.CodeSlowConsumer, "this connection fell more than %d events behind session %s; reconnect and session.resume with after_seq %d (nothing is lost)", c.s.cfg.SubscriberBuffer, sess.id, sent)
	if data, err := json.Marshal(api.ErrorFrame{Type: api.FrameError, Error: e, SessionID: sess.id, AfterSeq: sent}); err == nil {
		_ = c.frames.writeTextWithin(data, time.Second) // it is behind: it may not take even this
	}
	c.ws.Close(StatusPolicyViolation, fmt.Sprintf("slow consumer: resume with after_seq %d", sent))
}

// decode reads a request's params; absent params are the zero value.
func decode(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errorf(api.CodeBadRequest, "params: %v", err)
	}
	return nil
}

// truncate cuts s to at most n bytes on a rune boundary: a close reason
// must be short and valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
