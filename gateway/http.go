package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"agent/event"
	"agent/gateway/api"
)

// sseKeepalive is how often an idle event stream gets a comment line, so
// proxies and clients can tell it is alive.
const sseKeepalive = 15 * time.Second

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions", s.bounded(s.httpSessions))
	mux.HandleFunc("GET /v1/runs/{id}", s.bounded(s.httpRun))
	mux.HandleFunc("GET /v1/runs/{id}/events", s.httpEvents) // streams: no read deadline
	mux.HandleFunc("GET /v1/runs/{id}/phases", s.bounded(s.httpPhases))
	mux.HandleFunc("POST /v1/runs", s.bounded(s.httpStartRun))
	mux.HandleFunc("GET /metrics", s.bounded(s.httpMetrics))
	s.waitRoutes(mux)
	mux.HandleFunc("/", s.bounded(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	}))
	// /ws checks its own requests: its token may come in the connect frame.
	root := http.NewServeMux()
	root.HandleFunc("/ws", s.serveWS)
	root.HandleFunc("GET /healthz", s.bounded(s.healthz)) // checks its own requests: anyone may ask
	root.Handle("/", s.authenticated(mux))
	s.webRoutes(root)
	s.linkRoutes(root)
	return secureHeaders(root)
}

// authenticated lets through only requests with the token. While one
// is served, its connection is not evicted to make room for another
// (limit.go).
func (s *Server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, e := s.checkRequest(r, false); e != nil {
			writeError(w, e)
			return
		}
		defer protectRequest(r)()
		ctx, release := s.endWithSession(r.Context(), r)
		defer release()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// maxBody is the largest HTTP request body, as a WebSocket frame.
const maxBody = maxFrame

// bounded gives a route that does not stream a deadline for its request
// body (ReadTimeout after the headers) and a size limit. The server has
// no ReadTimeout of its own, which would cut WebSocket and event streams.
func (s *Server) bounded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		h(w, r)
	}
}

// bodyError says why a request body could not be read.
func (s *Server) bodyError(err error) *api.Error {
	var tooBig *http.MaxBytesError
	var nerr net.Error
	switch {
	case errors.As(err, &tooBig):
		return errorf(api.CodeBadRequest, "body: larger than %d MiB", maxBody>>20)
	case errors.As(err, &nerr) && nerr.Timeout():
		return errorf(api.CodeBadRequest, "body: it did not arrive within %s", s.cfg.ReadTimeout)
	}
	return errorf(api.CodeBadRequest, "body: want a JSON run.start params object: %v", err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *api.Error) {
	switch e.Code {
	case api.CodeUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="agent gateway"`)
		fallthrough
	case api.CodeForbidden:
		// A refused client gets no keep-alive connection to sit on.
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, httpStatus(e.Code), api.HTTPError{Error: e})
}

func (s *Server) writeErr(w http.ResponseWriter, err error) {
	e := toError(err)
	if e.Code == api.CodeInternal {
		s.log.Error("request failed", "err", err)
	}
	writeError(w, e)
}

// healthz is GET /healthz. Anyone may ask whether the gateway is up (a
// load balancer's or a service manager's probe) and learns nothing else;
// the token, or a signed-in page's cookie, also gets the version. A wrong
// token, or a page's ended session, is refused as on every route.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	_, e := s.checkRequest(r, false)
	switch {
	case e == errNoToken:
		writeJSON(w, http.StatusOK, api.Health{OK: true})
	case e != nil:
		writeError(w, e)
	default:
		defer protectRequest(r)()
		writeJSON(w, http.StatusOK, api.Health{OK: true, Version: s.cfg.Version})
	}
}

func (s *Server) httpSessions(w http.ResponseWriter, r *http.Request) {
	var p api.SessionListParams
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, errorf(api.CodeBadRequest, "limit %q is not a positive number", v))
			return
		}
		p.Limit = n
	}
	switch v := r.URL.Query().Get("include_jobs"); v {
	case "", "false", "0":
	case "true", "1":
		p.IncludeJobs = true
	default:
		writeError(w, errorf(api.CodeBadRequest, "include_jobs %q must be true or false", v))
		return
	}
	list, err := s.listSessions(r.Context(), p, 0)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) httpRun(w http.ResponseWriter, r *http.Request) {
	row, err := s.db.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeErr(w, err)
		return
	}
	evs, err := s.db.ListEvents(r.Context(), row.ID, 0, 0)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.RunDetail{Run: s.runInfo(row), Events: len(evs)})
}

// httpStartRun is POST /v1/runs: run.start over HTTP. Without a
// session_id it creates a session, titled after the input.
func (s *Server) httpStartRun(w http.ResponseWriter, r *http.Request) {
	var p api.RunStartParams
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		writeError(w, s.bodyError(err))
		return
	}
	// The body is in; what follows gets a fresh deadline, as when it
	// passes net/http's background read cancels the request's context.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
	res, err := s.startRun(r.Context(), p, 0)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

// title is a session's title made from the first line of its first input.
func title(input string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(input), "\n")
	return truncate(line, 80)
}

// httpEvents is GET /v1/runs/ID/events?after_seq=N: the run's events as
// Server-Sent Events (id: seq, event: type, data: the event as in
// `agent run --json`), replayed from the store and then live until the
// run ends (its last terminal event: a resumed run has more than one). A reconnecting EventSource's Last-Event-ID works as after_seq.
func (s *Server) httpEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	after, e := afterSeq(r)
	if e != nil {
		writeError(w, e)
		return
	}
	row, err := s.db.GetRun(ctx, r.PathValue("id"))
	if err != nil {
		s.writeErr(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, errorf(api.CodeInternal, "streaming is not supported by this connection"))
		return
	}
	// Join the live stream before reading the store, as session.resume does.
	var sub *subscriber
	if row.SessionID != "" {
		sess, _, err := s.sessions.open(ctx, row.SessionID)
		if err != nil {
			s.writeErr(w, err)
			return
		}
		sub, _ = sess.hub.subscribe()
		defer sess.hub.unsubscribe(sub)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	sent := after
	// replay sends the stored events after sent; false if the client is
	// gone. A terminal event does not end the stream by itself: a run
	// the gateway interrupted may have been resumed since.
	replay := func() bool {
		for {
			evs, err := s.db.ListEvents(ctx, row.ID, sent, replayPage)
			if err != nil {
				writeSSEError(w, toError(err))
				return false
			}
			for _, e := range evs {
				if writeSSE(w, e) != nil {
					return false
				}
				sent = e.Seq
			}
			if len(evs) < replayPage {
				flusher.Flush()
				return true
			}
		}
	}
	if !replay() {
		return
	}
	// A run this gateway is not running has all its events in the store
	// by now, the last ones perhaps written since the first read; unless
	// a worker drives it.
	var done <-chan struct{}
	if live, _, ok := s.queue.get(row.ID); ok {
		done = live.done
	} else if row.Status == event.StatusRunning || row.Queue == event.StatusWaiting {
		done = s.ended(ctx, row.ID)
	}
	if done == nil || sub == nil {
		replay()
		return
	}
	keepalive := time.NewTicker(sseKeepalive)
	defer keepalive.Stop()
	var batch []*item
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-done:
			replay() // its last events, if the live stream had not brought them yet
			return
		case <-sub.wake:
			var open bool
			batch, open = sub.take(batch)
			for _, it := range batch {
				if it.ev.RunID != row.ID || it.ev.Seq <= sent {
					continue
				}
				if writeSSE(w, it.ev) != nil {
					return
				}
				sent = it.ev.Seq
				if event.IsTerminal(it.ev.Type) {
					flusher.Flush()
					return
				}
			}
			flusher.Flush()
			if !open {
				if sub.overflowed {
					writeSSEError(w, errorf(api.CodeSlowConsumer, "this stream fell more than %d events behind; reconnect with after_seq %d (nothing is lost)", s.cfg.SubscriberBuffer, sent))
				}
				return
			}
		}
	}
}

func afterSeq(r *http.Request) (int64, *api.Error) {
	v := r.URL.Query().Get("after_seq")
	if v == "" {
		v = r.Header.Get("Last-Event-ID")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errorf(api.CodeBadRequest, "after_seq %q is not a seq (0 or more)", v)
	}
	return n, nil
}

func writeSSE(w io.Writer, e event.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, data)
	return err
}

// writeSSEError ends a stream with an error event carrying the Error.
func writeSSEError(w io.Writer, e *api.Error) {
	data, _ := json.Marshal(api.HTTPError{Error: e})
	fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
