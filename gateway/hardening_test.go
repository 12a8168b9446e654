package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"
)

// rawConn opens a TCP connection to the gateway and sends what it is
// given, for requests a well-behaved client would not make.
func (e *env) rawConn(send string) net.Conn {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			e.t.Fatal(err)
		}
	}
	return c
}

// closedBy reports whether the server closes c before the deadline:
// reading it ends with EOF or a reset rather than a timeout. What the
// server sent before closing is skipped.
func closedBy(c net.Conn, deadline time.Time) bool {
	_ = c.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, c)
	var nerr net.Error
	return !(errors.As(err, &nerr) && nerr.Timeout())
}

const wsUpgrade = "GET /ws HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// TestIdleConnectionsDoNotLockOut: sockets that never authenticate
// (silent ones, half-sent requests, WebSockets that never send connect)
// beyond MaxConnections neither pile up nor keep an authorised client
// out: each new connection takes the place of the oldest of them.
func TestIdleConnectionsDoNotLockOut(t *testing.T) {
	t.Parallel()
	const maxConns = 8
	// The header and connect timeouts are far away: only the cap may
	// close a connection here.
	e := newEnv(t, func(c *gateway.Config) {
		c.MaxConnections = maxConns
		c.ReadHeaderTimeout, c.ConnectTimeout = time.Hour, time.Hour
	})
	var idle []net.Conn
	for i := range 5 * maxConns {
		send := ""
		switch i % 3 {
		case 1:
			send = "GET /v1/sessions HTTP/1.1\r\nHost: gateway\r\n" // never finished
		case 2:
			send = wsUpgrade // upgraded, then never sends connect
		}
		idle = append(idle, e.rawConn(send))
	}

	start := time.Now()
	hc := &http.Client{Timeout: gatewaytest.Patience, Transport: &http.Transport{}}
	req, _ := http.NewRequest("GET", "http://"+e.addr+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("an authorised request behind %d idle connections: %v", len(idle), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("authorised request: %s", resp.Status)
	}
	ctx, cancel := gatewaytest.Timeout(3 * time.Second)
	defer cancel()
	c, err := gatewaytest.Dial(ctx, e.addr, gatewaytest.Options{Token: e.token})
	if err != nil {
		t.Fatalf("an authorised WebSocket behind idle connections: %v", err)
	}
	defer c.Close()
	if err := c.Call(ctx, api.MethodSessionList, nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > gatewaytest.Patience {
		t.Errorf("authorised clients took %s", d)
	}

	// Long before the header and connect timeouts, the gateway holds no
	// more than its cap: it closes all the others.
	closed := make(chan bool, len(idle))
	deadline := time.Now().Add(gatewaytest.Patience)
	for _, c := range idle {
		go func() { closed <- closedBy(c, deadline) }() // the kept ones end at the test's cleanup
	}
	n := 0
	for range len(idle) - maxConns {
		if <-closed {
			n++
		}
	}
	if open := len(idle) - n; open > maxConns {
		t.Errorf("%d of %d idle unauthenticated connections still open, want at most %d", open, len(idle), maxConns)
	}
}

// TestConnectionCapAllBusy: when every connection does authorised work,
// one more is answered 503 at once, not left hanging.
func TestConnectionCapAllBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.MaxConnections = 2 })
	e.dial()
	e.dial()
	c := e.rawConn("GET /healthz HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + e.token + "\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(gatewaytest.Patience))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("over the cap: %v, want a 503", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), api.CodeUnavailable) {
		t.Errorf("over the cap: %s %v %s", resp.Status, resp.Header, body)
	}
}

// TestRefusalCloses: a refused request does not get a keep-alive
// connection to sit on.
func TestRefusalCloses(t *testing.T) {
	t.Parallel()
	// Far away: only the refusal may close the connection.
	e := newEnv(t, func(c *gateway.Config) { c.IdleTimeout = time.Hour })
	for _, req := range []string{
		"GET /v1/sessions HTTP/1.1\r\nHost: gateway\r\n\r\n",
		"GET /v1/sessions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer wrong\r\n\r\n",
		"GET /v1/sessions HTTP/1.1\r\nHost: gateway\r\nOrigin: https://evil.example\r\nAuthorization: Bearer " + e.token + "\r\n\r\n",
		strings.Replace(wsUpgrade, "\r\n\r\n", "\r\nAuthorization: Bearer wrong\r\n\r\n", 1),
	} {
		c := e.rawConn(req)
		_ = c.SetReadDeadline(time.Now().Add(gatewaytest.Patience))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 401 && resp.StatusCode != 403 {
			t.Errorf("%q: %s", req, resp.Status)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%q: the connection stayed open after the refusal (%v)", req, err)
		}
	}
}

// TestConnectionTimeouts: a request's headers, a non-streaming request's
// body and a keep-alive connection's next request each have a deadline.
// Each is short on a gateway of its own, so it cuts nothing else: a
// loaded machine may take longer than it to read a whole request.
func TestConnectionTimeouts(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	headers := newEnv(t, func(c *gateway.Config) { c.ReadHeaderTimeout = d })
	slowHeaders := headers.rawConn("GET /v1/sessions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + headers.token + "\r\n")
	if !closedBy(slowHeaders, time.Now().Add(gatewaytest.Patience)) {
		t.Error("a request whose headers never end was not cut")
	}

	e := newEnv(t, func(c *gateway.Config) { c.ReadTimeout, c.IdleTimeout = d, d })
	auth := "Authorization: Bearer " + e.token + "\r\n"
	// An authorised POST /v1/runs whose body never arrives in full.
	slowBody := e.rawConn("POST /v1/runs HTTP/1.1\r\nHost: gateway\r\n" + auth + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":")
	_ = slowBody.SetReadDeadline(time.Now().Add(gatewaytest.Patience))
	resp, err := http.ReadResponse(bufio.NewReader(slowBody), nil)
	if err != nil {
		t.Fatalf("a body that never arrives: %v, want an answer", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "did not arrive") {
		t.Errorf("a body that never arrives: %s %s", resp.Status, body)
	}

	idle := e.rawConn("GET /healthz HTTP/1.1\r\nHost: gateway\r\n" + auth + "\r\n")
	_ = idle.SetReadDeadline(time.Now().Add(gatewaytest.Patience))
	br := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("an idle keep-alive connection was not closed: %v", err)
	}

	// The event stream is not cut by the read deadline of other routes.
	c := e.dial()
	sid := e.session(c)
	run := e.start(c, sid, "sleep")
	stream := e.rawConn("GET /v1/runs/" + run.RunID + "/events HTTP/1.1\r\nHost: gateway\r\n" + auth + "\r\n")
	if closedBy(stream, time.Now().Add(4*d)) {
		t.Error("the event stream of a running run was cut")
	}
	call[api.RunInfo](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: run.RunID})
}

// TestConnectFrameTimeout: a WebSocket that sends no connect frame after
// the upgrade is disconnected after ConnectTimeout, with or without a
// token in its header.
func TestConnectFrameTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.ConnectTimeout = 300 * time.Millisecond })
	for _, header := range []bool{false, true} {
		ctx, cancel := gatewaytest.Timeout(3 * time.Second)
		c, err := gatewaytest.Dial(ctx, e.addr, gatewaytest.Options{Token: e.token, HeaderToken: header, NoConnect: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitClosed(ctx); ctx.Err() != nil {
			t.Errorf("header token %v: still connected without a connect frame: %v", header, err)
		}
		cancel()
		c.Close()
	}
	// The raw socket too, which does not even answer the close handshake.
	raw := e.rawConn(wsUpgrade)
	if !closedBy(raw, time.Now().Add(gatewaytest.Patience)) {
		t.Error("a silent upgraded socket was not closed")
	}
}

// TestWorkspaceRoots: run.start works only in the default workspace, a
// --workspace-root, and below them, after resolving symlinks and
// comparing whole path components.
func TestWorkspaceRoots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ws, more, evil, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "more"), filepath.Join(dir, "ws-evil"), filepath.Join(dir, "outside")
	for _, d := range []string{ws, filepath.Join(ws, "sub"), more, evil, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "cassette.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, db, ws, func(c *gateway.Config) { c.WorkspaceRoots = []string{more} })
	c := e.dial()
	sid := e.session(c)
	for _, w := range []string{"/", "/etc", evil, filepath.Join(ws, "link"), filepath.Join(ws, "sub", "..", "..", "ws-evil"), filepath.Join(ws, "nope", "..", "..", "outside"), filepath.Join(ws, "link", "missing")} {
		err := c.Call(context.Background(), api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo x", Workspace: w}, nil)
		if gatewaytest.ErrCode(err) != api.CodeBadRequest || !strings.Contains(err.Error(), "workspace") || !strings.Contains(err.Error(), "--workspace-root") {
			t.Errorf("workspace %s: %v, want bad_request naming workspace and --workspace-root", w, err)
		}
	}
	// A cassette is read from inside the roots only.
	err = c.Call(context.Background(), api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo x",
		Options: api.RunOptions{Replay: filepath.Join(outside, "cassette.jsonl")}}, nil)
	if gatewaytest.ErrCode(err) != api.CodeInvalidOptions || !strings.Contains(err.Error(), "options.replay") {
		t.Errorf("a cassette outside the roots: %v", err)
	}
	// And only from a regular file: a FIFO or a device would block or
	// never end.
	if err := syscall.Mkfifo(filepath.Join(ws, "cassette.fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cassette := range []string{"cassette.fifo", "/dev/zero"} {
		ctx, cancel := gatewaytest.Timeout(5 * time.Second)
		err = c.Call(ctx, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo x", Options: api.RunOptions{Replay: cassette}}, nil)
		cancel()
		if gatewaytest.ErrCode(err) != api.CodeInvalidOptions || !strings.Contains(err.Error(), "options.replay") {
			t.Errorf("cassette %s: %v", cassette, err)
		}
	}
	resp, body := e.request("POST", "/v1/runs", `{"input":"echo x","workspace":"/"}`, e.bearer())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "--workspace-root") {
		t.Errorf("POST /v1/runs in /: %s %s", resp.Status, body)
	}
	if runs, _ := e.db.ListRuns(context.Background(), 0); len(runs) != 0 {
		t.Fatalf("refused workspaces created %d runs", len(runs))
	}
	if list, _ := e.db.ListSessions(context.Background(), 0, true); len(list) != 1 {
		t.Errorf("%d sessions, want 1: a refused POST /v1/runs made one", len(list))
	}

	for _, w := range []string{filepath.Join(ws, "sub"), more} {
		r := call[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo in " + filepath.Base(w), Workspace: w})
		evs := ofRun(waitTerminal(t, c, r.RunID), r.RunID)
		if last := evs[len(evs)-1]; last.Event != "run.completed" {
			t.Errorf("workspace %s: %s", w, types(evs))
		}
	}
}

// TestBaseURLAllowlist: the gateway sends its API key only to its own
// model endpoint, unless it was started with --allow-any-base-url.
func TestBaseURLAllowlist(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	for _, u := range []string{"http://127.0.0.1:9999/v1", "http://127.0.0.1:9/v2", "http://attacker.example/v1", "http://127.0.0.1:9@attacker.example/v1"} {
		err := c.Call(context.Background(), api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo x", Options: api.RunOptions{BaseURL: u}}, nil)
		if gatewaytest.ErrCode(err) != api.CodeInvalidOptions || !strings.Contains(err.Error(), "options.base_url") || !strings.Contains(err.Error(), "--allow-any-base-url") {
			t.Errorf("base_url %s: %v, want invalid_options naming options.base_url and --allow-any-base-url", u, err)
		}
	}
	resp, body := e.request("POST", "/v1/runs", `{"input":"echo x","options":{"base_url":"http://127.0.0.1:9999/v1"}}`, e.bearer())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "options.base_url") {
		t.Errorf("POST /v1/runs: %s %s", resp.Status, body)
	}
	if runs, _ := e.db.ListRuns(context.Background(), 0); len(runs) != 0 {
		t.Fatalf("refused base URLs created %d runs", len(runs))
	}
	// Its own endpoint, however spelt, is fine.
	r := call[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo own", Options: api.RunOptions{BaseURL: "HTTP://127.0.0.1:9/v1/"}})
	waitTerminal(t, c, r.RunID)

	open := newEnv(t, func(c *gateway.Config) { c.AllowAnyBaseURL = true })
	oc := open.dial()
	osid := open.session(oc)
	r = call[api.RunStartResult](t, oc, api.MethodRunStart, api.RunStartParams{SessionID: osid, Input: "echo any", Options: api.RunOptions{BaseURL: "http://127.0.0.1:9999/v1"}})
	waitTerminal(t, oc, r.RunID)
	// Then the usual check of a remote endpoint without a key applies.
	err := oc.Call(context.Background(), api.MethodRunStart, api.RunStartParams{SessionID: osid, Input: "echo x", Options: api.RunOptions{BaseURL: "https://api.example.com/v1"}}, nil)
	if gatewaytest.ErrCode(err) != api.CodeInvalidOptions || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("remote base_url without a key: %v", err)
	}
}

// TestShortToken: a gateway refuses a token that could be guessed.
func TestShortToken(t *testing.T) {
	home := t.TempDir()
	db, err := store.Open(filepath.Join(home, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = gateway.New(gateway.Config{Token: "x", DB: db, DefaultWorkspace: home})
	if err == nil || !strings.Contains(err.Error(), "at least 16") || !strings.Contains(err.Error(), "AGENT_GATEWAY_TOKEN") || !strings.Contains(err.Error(), "gateway.token") {
		t.Errorf("New with a 1-character token: %v", err)
	}
	if _, err := gateway.New(gateway.Config{Token: strings.Repeat("k", 16), DB: db, DefaultWorkspace: home}); err != nil {
		t.Errorf("New with a 16-character token: %v", err)
	}

	t.Setenv("AGENT_GATEWAY_TOKEN", "abc")
	_, _, err = gateway.ServerToken(home)
	var te *api.TokenError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "AGENT_GATEWAY_TOKEN") || !strings.Contains(err.Error(), "16") {
		t.Errorf("ServerToken with AGENT_GATEWAY_TOKEN=abc: %v", err)
	}
	t.Setenv("AGENT_GATEWAY_TOKEN", strings.Repeat("k", 16))
	if tok, _, err := gateway.ServerToken(home); err != nil || tok != strings.Repeat("k", 16) {
		t.Errorf("ServerToken with 16 characters: %q %v", tok, err)
	}
	t.Setenv("AGENT_GATEWAY_TOKEN", "")
	path := filepath.Join(home, "gateway.token")
	if err := os.WriteFile(path, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := gateway.ServerToken(home); !errors.As(err, &te) || !strings.Contains(err.Error(), path) {
		t.Errorf("ServerToken with a 3-character token file: %v", err)
	}
	// A client still reads what is there: the gateway is the one to refuse.
	if tok, err := api.ClientToken(home); err != nil || tok != "abc" {
		t.Errorf("ClientToken: %q %v", tok, err)
	}
}

// TestFieldLimits: titles, inputs, idempotency keys, job names and HTTP
// bodies have sizes a client cannot exceed.
func TestFieldLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.Scheduler = &gateway.SchedulerConfig{} })
	c := e.dial()
	sid := e.session(c)
	long := strings.Repeat("t", 201)
	if code := callErr(t, c, api.MethodSessionCreate, api.SessionCreateParams{Title: long}); code != api.CodeBadRequest {
		t.Errorf("session.create with a 201-character title: %s", code)
	}
	call[api.SessionInfo](t, c, api.MethodSessionCreate, api.SessionCreateParams{Title: strings.Repeat("é", 200)})
	if code := callErr(t, c, api.MethodSessionFork, api.SessionForkParams{SessionID: sid, Title: long}); code != api.CodeBadRequest {
		t.Errorf("session.fork with a 201-character title: %s", code)
	}
	ctx, cancel := gatewaytest.Timeout(15 * time.Second)
	defer cancel()
	for _, p := range []api.RunStartParams{
		{SessionID: sid, Input: "echo " + strings.Repeat("x", 1<<20)},
		{SessionID: sid, Input: "echo x", IdempotencyKey: strings.Repeat("k", 201)},
	} {
		err := c.Call(ctx, api.MethodRunStart, p, nil)
		if gatewaytest.ErrCode(err) != api.CodeBadRequest || !strings.Contains(err.Error(), "at most") {
			t.Errorf("run.start with %d input bytes, a %d-byte key: %v", len(p.Input), len(p.IdempotencyKey), err)
		}
	}
	err := c.Call(ctx, api.MethodJobCreate, api.JobCreateParams{Name: long, CronExpr: "@hourly", Prompt: "echo x"}, nil)
	if gatewaytest.ErrCode(err) != api.CodeInvalidJob || !strings.Contains(err.Error(), "name") {
		t.Errorf("job.create with a 201-character name: %v", err)
	}

	resp, body := e.request("POST", "/v1/runs", `{"input":"echo `+strings.Repeat("x", 2<<20)+`"}`, e.bearer())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "input") {
		t.Errorf("POST /v1/runs with a 2 MiB input: %s %.200s", resp.Status, body)
	}
	resp, body = e.request("POST", "/v1/runs", `{"input":"echo x","workspace":"`+strings.Repeat("x", 5<<20)+`"}`, e.bearer())
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "larger than 4 MiB") {
		t.Errorf("POST /v1/runs with a 5 MiB body: %s %.200s", resp.Status, body)
	}
	if runs, _ := e.db.ListRuns(ctx, 0); len(runs) != 0 {
		t.Errorf("refused requests created %d runs", len(runs))
	}
	list, _ := e.db.ListSessions(ctx, 0, true)
	for _, s := range list {
		if n := len([]rune(s.Title)); n > 200 {
			t.Errorf("a session titled with %d characters was stored", n)
		}
	}
	if len(list) != 2 {
		t.Errorf("%d sessions, want 2", len(list))
	}
}
