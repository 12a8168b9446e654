package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"
)

// A WebSocket client holds nothing of its upgrade request once connected:
// the HTTP handler returns, and the request (with its headers, the
// response and its buffer) is collected while the client stays and is
// served. With a thousand clients that was a third of their memory.
func TestConnectedClientHoldsNoUpgradeRequest(t *testing.T) {
	t.Parallel()
	var upgrade weak.Pointer[http.Request]
	returned := make(chan struct{})
	s, token := startServer(t, func(routes http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ws" {
				upgrade = weak.Make(r)
				defer close(returned)
			}
			routes.ServeHTTP(w, r)
		})
	})
	ctx, cancel := gatewaytest.Timeout(0)
	defer cancel()

	c, err := gatewaytest.Dial(ctx, s.Addr(), gatewaytest.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("the upgrade's handler has not returned while its client is connected")
	}
	for runtime.GC(); upgrade.Value() != nil; runtime.GC() {
		select {
		case <-ctx.Done():
			t.Fatal("the upgrade request is still held while its client is connected")
		case <-time.After(10 * time.Millisecond): // the server's goroutine is on its way out
		}
	}

	// The client is still served: a request, and a frame longer than the
	// buffer a client is read through.
	var info api.SessionInfo
	if err := c.Call(ctx, api.MethodSessionCreate, api.SessionCreateParams{Title: "still here"}, &info); err != nil {
		t.Fatalf("session.create after the handler returned: %v", err)
	}
	long := strings.Repeat("x", 8*clientReadBuffer)
	var listed api.SessionList
	if err := c.Call(ctx, api.MethodSessionList, map[string]string{"padding": long}, &listed); err != nil {
		t.Fatalf("a request of %d bytes: %v", len(long), err)
	}
	if len(listed.Sessions) != 1 || listed.Sessions[0].ID != info.ID {
		t.Fatalf("session.list = %+v, want the one session %s", listed.Sessions, info.ID)
	}
}

// After most clients have left, the sets that held one entry per client
// are rebuilt smaller (a map keeps the room it grew to), and every client
// still connected stays counted, attached and sent events, and leaves as
// before.
func TestShrinkingClientSetsKeepsClients(t *testing.T) {
	t.Parallel()
	s, token := startServer(t, nil)
	ctx, cancel := gatewaytest.Timeout(0)
	defer cancel()
	row, err := s.sessions.create(ctx, "shrink", "")
	if err != nil {
		t.Fatal(err)
	}
	sess, _, err := s.sessions.open(ctx, row.ID)
	if err != nil {
		t.Fatal(err)
	}
	var clients []*gatewaytest.Client
	for range 20 {
		c, err := gatewaytest.Dial(ctx, s.Addr(), gatewaytest.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var res api.SessionResumeResult
		if err := c.Call(ctx, api.MethodSessionResume, api.SessionResumeParams{SessionID: row.ID}, &res); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	for _, c := range clients[2:] {
		c.Close()
	}
	waitClients(ctx, t, s, sess, 2)

	s.shrinkClientSets()
	if n := s.ln.(*connLimiter).count(); n != 2 {
		t.Fatalf("the connection limit counts %d connections after the rebuild, want 2", n)
	}
	run := &store.Run{ID: "shrink-run", SessionID: row.ID, Workspace: t.TempDir()}
	if err := s.cfg.DB.CreateRun(ctx, run, "", 0); err != nil {
		t.Fatal(err)
	}
	e := event.New(event.ToolStarted, event.ToolStartedData{Name: "after-the-rebuild"})
	e.RunID = run.ID
	if _, err := sess.append(ctx, e); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients[:2] {
		if _, err := c.WaitEvent(ctx, func(f api.EventFrame) bool { return f.Event == event.ToolStarted }); err != nil {
			t.Fatalf("client %d after the rebuild: %v", i, err)
		}
	}
	clients[0].Close()
	waitClients(ctx, t, s, sess, 1)
}

// count is how many connections l counts.
func (l *connLimiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// waitClients waits until the server counts n connections and the
// session n subscribers.
func waitClients(ctx context.Context, t *testing.T, s *Server, sess *session, n int) {
	t.Helper()
	for s.connections() != n || sess.hub.size() != n {
		select {
		case <-ctx.Done():
			t.Fatalf("%d connections and %d subscribers, want %d of each", s.connections(), sess.hub.size(), n)
		case <-time.After(10 * time.Millisecond): // a client's close reaches its server goroutine
		}
	}
}

// A client that sends its first frame with the upgrade request, before
// the server's answer, is read from the server's buffer and answered.
func TestFrameSentWithTheUpgradeIsRead(t *testing.T) {
	t.Parallel()
	s, token := startServer(t, nil)
	ctx, cancel := gatewaytest.Timeout(0)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	frame, err := clientText([]byte(`{"type":"req","id":"1","method":"connect","params":{"protocol":1,"token":"` + token + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(append([]byte(upgradeRequest(s.Addr())), frame...)); err != nil { // one write: one segment
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	var reply []byte
	cl := &rawClient{}
	buf := make([]byte, 4096)
	for reply == nil {
		n, err := br.Read(buf)
		if err != nil {
			t.Fatalf("no answer to the connect frame sent with the upgrade: %v", err)
		}
		cl.frames(buf[:n], func(p []byte) { reply = bytes.Clone(p) })
	}
	if !bytes.Contains(reply, []byte(`"id":"1"`)) || !bytes.Contains(reply, []byte(`"ok":true`)) {
		t.Fatalf("connect answered %s, want ok", reply)
	}
}

// startServer starts a gateway in a temporary home, its handler wrapped
// by wrap if not nil, and returns it with its token.
func startServer(t *testing.T, wrap func(http.Handler) http.Handler) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const token = "conn-test-token-0123456789"
	s, err := New(Config{Listen: "127.0.0.1:0", Token: token, DB: db, DefaultWorkspace: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		s.http.Handler = wrap(s.http.Handler)
	}
	ctx, cancel := gatewaytest.Timeout(0)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, token
}
