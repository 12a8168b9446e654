package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a running fake. It is safe for concurrent use.
type Server struct {
	script  Script
	http    *http.Server
	url     string
	closing chan struct{} // closed by Close to release hanging handlers

	mu       sync.Mutex
	closed   bool
	active   sync.WaitGroup // running handlers; Close waits for them
	seq      int            // chat requests that took a turn position
	served   []bool         // turns already served, when turns are routed by When
	requests []RecordedRequest
	log      *os.File
}

// NewServer starts a server on 127.0.0.1 for the duration of a test.
func NewServer(t testing.TB, s Script) *Server {
	t.Helper()
	srv, err := Start(s)
	if err != nil {
		t.Fatalf("llmtest: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Start starts a server on a free port of 127.0.0.1.
func Start(s Script) (*Server, error) { return Listen("127.0.0.1:0", s) }

// Listen starts a server on addr, e.g. "127.0.0.1:8080".
func Listen(addr string, s Script) (*Server, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("start fake model: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("start fake model: %w", err)
	}
	srv := &Server{script: s, closing: make(chan struct{}), url: "http://" + ln.Addr().String() + "/v1"}
	if s.LogPath != "" {
		if err := srv.SetLog(s.LogPath); err != nil {
			ln.Close()
			return nil, err
		}
	}
	srv.http = &http.Server{
		Handler: srv,
		// Dropped connections are part of the act; keep stderr clean.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go srv.http.Serve(ln)
	return srv, nil
}

// URL returns the base URL, ending in /v1: clients POST {URL}/chat/completions.
func (s *Server) URL() string { return s.url }

// Close stops the server, releases hanging turns and waits for handlers.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()

	s.http.Close()
	s.active.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
}

// SetLog appends every later request body to path as one JSON line, so a
// test can inspect what a separate process sent.
func (s *Server) SetLog(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open request log: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Close()
	}
	s.log = f
	return nil
}

// Requests returns the chat requests received so far, in arrival order.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordedRequest(nil), s.requests...)
}

// RequestCount returns how many chat requests arrived.
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// ServeHTTP routes /v1/chat/completions and /v1/models.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "llmtest: server closed")
		return
	}
	s.active.Add(1)
	s.mu.Unlock()
	defer s.active.Done()

	switch r.URL.Path {
	case "/v1/chat/completions", "/chat/completions":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "llmtest: use POST")
			return
		}
		s.chat(w, r)
	case "/v1/models", "/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"llmtest","object":"model","owned_by":"llmtest"}]}`)
	default:
		writeError(w, http.StatusNotFound, "llmtest: no route "+r.URL.Path+"; POST /v1/chat/completions")
	}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	rec := RecordedRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Turn: -1, At: time.Now()}
	parseErr := json.Unmarshal(body, &rec.parsed)

	// Pick the turn and record the request under one lock, so turns are
	// served strictly in arrival order.
	s.mu.Lock()
	var turn Turn
	var seq int
	var exhausted, tooLong, standing bool
	var window, tokens int
	if parseErr == nil {
		window, tokens, tooLong = s.script.tooLong(body)
		rec.TooLong = tooLong
		turn, standing = s.standing(rec)
	}
	if parseErr == nil && !tooLong && !standing {
		s.seq++
		seq = s.seq
		n := len(s.script.Turns)
		switch {
		case s.script.routed():
			rec.Turn = s.route(rec)
			exhausted = rec.Turn < 0
		case seq <= n:
			rec.Turn = seq - 1
		case s.script.Loop && n > 0:
			rec.Turn = (seq - 1) % n
		default:
			exhausted = true
		}
		if rec.Turn >= 0 {
			turn = s.script.Turns[rec.Turn]
		}
	}
	s.requests = append(s.requests, rec)
	s.writeLog(body)
	s.mu.Unlock()

	switch {
	case parseErr != nil:
		writeError(w, http.StatusBadRequest, "llmtest: request body is not JSON: "+parseErr.Error())
		return
	case tooLong:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, contextError(s.script.ContextError, window, tokens))
		return
	case exhausted:
		writeError(w, http.StatusInternalServerError,
			fmt.Sprintf("llmtest: script exhausted after %d turns", len(s.script.Turns)))
		return
	}

	ctx := r.Context()
	if !s.gate(ctx, turn.Gate) {
		return
	}
	raw := turn.has(QuirkJinja500) || turn.Status != 0 && turn.Status != http.StatusOK || turn.Body != ""
	if !(turn.KeepaliveMS > 0 && rec.Stream() && !raw) {
		// A keep-alive stream spends its delay sending comments instead.
		if !s.pause(ctx, turn.DelayMS) {
			return
		}
		turn.DelayMS = 0
	}
	for k, v := range turn.Headers {
		w.Header().Set(k, v)
	}
	switch {
	case turn.has(QuirkJinja500):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`)
		return
	case turn.Status != 0 && turn.Status != http.StatusOK || turn.Body != "":
		s.raw(w, turn)
		return
	}

	model := rec.parsed.Model
	if model == "" {
		model = "llmtest"
	}
	usage := usageFor(turn, body)
	if !rec.Stream() {
		w.Header().Set("Content-Type", "application/json")
		w.Write(completion(turn, seq, model, usage))
		return
	}
	s.stream(ctx, w, turn, streamPlan(turn, seq, model, usage))
}

// raw writes a scripted HTTP response.
func (s *Server) raw(w http.ResponseWriter, t Turn) {
	status := t.Status
	if status == 0 {
		status = http.StatusOK
	}
	body := t.Body
	if body == "" {
		body = fmt.Sprintf(`{"error":{"message":"llmtest: scripted HTTP %d","type":"llmtest","code":%d}}`, status, status)
	}
	if w.Header().Get("Content-Type") == "" {
		switch b := bytes.TrimSpace([]byte(body)); {
		case bytes.HasPrefix(b, []byte("data:")) || bytes.HasPrefix(b, []byte(":")):
			w.Header().Set("Content-Type", "text/event-stream")
		case bytes.HasPrefix(b, []byte("{")):
			w.Header().Set("Content-Type", "application/json")
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// stream writes a planned SSE stream.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, t Turn, p plan) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if t.KeepaliveMS > 0 {
		if rc.Flush() != nil || !s.wait(ctx, w, rc, t, t.DelayMS) {
			return
		}
	}

	send := func(data string) bool {
		var b bytes.Buffer
		if t.has(QuirkKeepalive) {
			b.WriteString(": OPENROUTER PROCESSING\n\n\n")
		}
		if t.has(QuirkEventLines) {
			b.WriteString("event: message\n")
		}
		b.WriteString("data: " + data + "\n\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	n := len(p.chunks)
	if p.ending != endDone {
		n = p.cutAt
	}
	for i := 0; i < n; i++ {
		if i > 0 && !s.wait(ctx, w, rc, t, t.ChunkDelayMS) {
			return
		}
		if !send(p.chunks[i]) {
			return
		}
	}
	switch p.ending {
	case endDone:
		if s.wait(ctx, w, rc, t, t.ChunkDelayMS) {
			send("[DONE]")
		}
	case endError:
		send(p.errObj)
	case endDisconnect:
		// Drop the connection without the chunked-encoding trailer, as a
		// crashed upstream would.
		if conn, _, err := rc.Hijack(); err == nil {
			conn.Close()
		}
	case endCutOff:
		// Return: the body ends properly, just without the rest.
	case endHang:
		s.wait(ctx, w, rc, t, -1)
	}
}

// wait pauses a stream for ms milliseconds, or until the client leaves
// when ms is negative, sending a keep-alive comment every t.KeepaliveMS
// meanwhile. It reports false if the client left or the server is closing.
func (s *Server) wait(ctx context.Context, w io.Writer, rc *http.ResponseController, t Turn, ms int) bool {
	if t.KeepaliveMS <= 0 {
		if ms >= 0 {
			return s.pause(ctx, ms)
		}
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		return false
	}
	var end <-chan time.Time
	if ms >= 0 {
		if ms == 0 {
			return ctx.Err() == nil
		}
		timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer timer.Stop()
		end = timer.C
	}
	tick := time.NewTicker(time.Duration(t.KeepaliveMS) * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-end:
			return true
		case <-tick.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return false
			}
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		}
	}
}

// gate waits until g (a Turn's Gate) is closed, or at once when it is
// nil; it reports false if the client left or the server is closing.
func (s *Server) gate(ctx context.Context, g <-chan struct{}) bool {
	if g == nil {
		return true
	}
	select {
	case <-g:
		return true
	case <-ctx.Done():
	case <-s.closing:
	}
	return false
}

// pause waits ms milliseconds; it reports false if the client left or
// the server is closing.
func (s *Server) pause(ctx context.Context, ms int) bool {
	if ms <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.closing:
	}
	return false
}

// writeLog appends body as one line; s.mu must be held.
func (s *Server) writeLog(body []byte) {
	if s.log == nil {
		return
	}
	var b bytes.Buffer
	if json.Compact(&b, body) != nil {
		// Not JSON: log it as a JSON string so the file stays JSON lines.
		b.Reset()
		data, _ := json.Marshal(string(body))
		b.Write(data)
	}
	b.WriteByte('\n')
	s.log.Write(b.Bytes())
}

func writeError(w http.ResponseWriter, status int, msg string) {
	data, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "llmtest", "code": status}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(data)
}

// standing returns the standing turn whose When the request's messages
// contain, if any. Callers hold s.mu.
func (s *Server) standing(rec RecordedRequest) (Turn, bool) {
	if len(s.script.Standing) == 0 {
		return Turn{}, false
	}
	var text strings.Builder
	for _, m := range rec.Messages() {
		text.WriteString(m.Content)
		text.WriteByte('\n')
	}
	for _, t := range s.script.Standing {
		if t.When != "" && strings.Contains(text.String(), t.When) {
			return t, true
		}
	}
	return Turn{}, false
}

// route picks the first unserved turn, in script order, whose When the
// request's messages contain; -1 if none. Callers hold s.mu.
func (s *Server) route(rec RecordedRequest) int {
	if s.served == nil {
		s.served = make([]bool, len(s.script.Turns))
	}
	var text strings.Builder
	for _, m := range rec.Messages() {
		text.WriteString(m.Content)
		text.WriteByte('\n')
	}
	all := text.String()
	for i, t := range s.script.Turns {
		if !s.served[i] && (t.When == "" || strings.Contains(all, t.When)) {
			s.served[i] = true
			return i
		}
	}
	return -1
}
