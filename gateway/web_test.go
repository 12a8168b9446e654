package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"
)

// origin is the Origin of the gateway's own page.
func (e *env) origin() string { return "http://" + e.addr }

// login signs in as the page does and returns the session cookie.
func (e *env) login() *http.Cookie {
	e.t.Helper()
	resp, body := e.request("POST", "/login", `{"token":"`+e.token+`"}`,
		map[string]string{"Content-Type": "application/json", "Origin": e.origin(), "Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "agent_session") {
			return c
		}
	}
	e.t.Fatalf("login set no session cookie: %v", resp.Header.Values("Set-Cookie"))
	return nil
}

func withCookie(c *http.Cookie, h map[string]string) map[string]string {
	out := map[string]string{"Cookie": c.Name + "=" + c.Value}
	for k, v := range h {
		out[k] = v
	}
	return out
}

// TestWebPageHeaders: the page and its files are served without sign-in,
// with a Content-Security-Policy that allows no inline script or style,
// and the page has none.
func TestWebPageHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	resp, body := e.request("GET", "/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
		"img-src 'self' data:", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP allows inline code: %q", csp)
	}
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q", got)
	}
	if got := resp.Header.Get("Referrer-Policy"); got != "no-referrer" {
		t.Errorf("Referrer-Policy %q", got)
	}
	// What the CSP forbids is not there to be blocked.
	for _, tag := range regexp.MustCompile(`<script[^>]*>[^<]*`).FindAllString(body, -1) {
		if !strings.Contains(tag, " src=") || !strings.HasSuffix(tag, ">") {
			t.Errorf("the page has an inline script: %q", tag)
		}
	}
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`\sstyle=`), regexp.MustCompile(`<style`), regexp.MustCompile(`\son[a-z]+=`)} {
		if m := bad.FindString(body); m != "" {
			t.Errorf("the page has inline code: %q", m)
		}
	}
	for path, ct := range map[string]string{"/web/app.js": "text/javascript", "/web/style.css": "text/css", "/web/icon.svg": "image/svg+xml"} {
		resp, _ := e.request("GET", path, "", nil)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ct) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if resp, _ := e.request("GET", "/web/nothing.js", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /web/nothing.js: %d", resp.StatusCode)
	}
	// The API's answers carry the headers too: JSON is never run as a page.
	resp, _ = e.request("GET", "/v1/sessions", "", nil)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET /v1/sessions without sign-in: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestWebSignIn: a wrong token is refused with a clear message; the right
// one, as JSON or as a form, sets an HttpOnly, SameSite=Strict cookie,
// which then authenticates the API and /ws (no token in connect).
func TestWebSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	page := map[string]string{"Origin": e.origin(), "Content-Type": "application/json"}
	resp, body := e.request("POST", "/login", `{"token":"not-the-token-at-all"}`, page)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "wrong token") || len(resp.Cookies()) != 0 {
		t.Errorf("wrong token: %d %s %v", resp.StatusCode, body, resp.Cookies())
	}
	resp, body = e.request("POST", "/login", "token="+e.token,
		map[string]string{"Origin": e.origin(), "Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusOK || len(resp.Cookies()) != 1 {
		t.Errorf("form sign-in: %d %s", resp.StatusCode, body)
	}

	c := e.login()
	_, port, _ := strings.Cut(e.addr, ":")
	if c.Name != "agent_session_"+port || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge <= 0 {
		t.Errorf("cookie %+v: want agent_session_%s, HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP, Max-Age", c, port)
	}
	if strings.Contains(c.Value, e.token) {
		t.Error("the cookie carries the token")
	}

	// Reads need no Origin; the cookie is enough.
	if resp, body := e.request("GET", "/v1/sessions", "", withCookie(c, nil)); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/sessions with the cookie: %d %s", resp.StatusCode, body)
	}
	// A change must come from the page: with its Origin it is served
	// (a bad body here), without any Origin it is refused.
	resp, body = e.request("POST", "/v1/runs", `{`, withCookie(c, map[string]string{"Origin": e.origin()}))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /v1/runs with cookie and Origin: %d %s, want 400 (served, bad body)", resp.StatusCode, body)
	}
	resp, body = e.request("POST", "/v1/runs", `{"input":"echo hi"}`, withCookie(c, nil))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "Origin") {
		t.Errorf("POST /v1/runs with the cookie and no Origin: %d %s, want 403", resp.StatusCode, body)
	}

	// /ws: the cookie and the page's Origin are the whole handshake.
	ws := e.dial(func(o *gatewaytest.Options) {
		o.Token = ""
		o.Header = http.Header{"Cookie": {c.Name + "=" + c.Value}, "Origin": {e.origin()}}
	})
	sid := e.session(ws)
	run := e.start(ws, sid, "echo hello")
	if evs := waitTerminal(t, ws, run.RunID); finished(t, evs[len(evs)-1]).Status != event.StatusCompleted {
		t.Errorf("run over a cookie connection: %s", types(evs))
	}
	// Without an Origin the cookie does not open /ws.
	resp, body = e.request("GET", "/ws", "", withCookie(c, nil))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("/ws with the cookie and no Origin: %d %s, want 403", resp.StatusCode, body)
	}
}

// TestWebForeignOrigin: with a valid cookie, a page of another origin
// (another port of the same host, which SameSite=Strict lets send the
// cookie) is refused everywhere: sign-in, the API, /ws.
func TestWebForeignOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.login()
	evil := "http://127.0.0.1:1"
	for _, tc := range []struct {
		method, path, body string
		header             map[string]string
	}{
		{"POST", "/v1/runs", `{"input":"echo pwned"}`, withCookie(c, map[string]string{"Origin": evil, "Content-Type": "text/plain"})},
		{"GET", "/v1/sessions", "", withCookie(c, map[string]string{"Origin": evil})},
		{"GET", "/ws", "", withCookie(c, map[string]string{"Origin": evil, "Connection": "Upgrade", "Upgrade": "websocket",
			"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})},
		// A same-site page's no-cors request carries no Origin; its
		// Sec-Fetch-Site gives it away.
		{"GET", "/v1/sessions", "", withCookie(c, map[string]string{"Sec-Fetch-Site": "same-site"})},
		{"POST", "/login", `{"token":"` + e.token + `"}`, map[string]string{"Origin": evil, "Content-Type": "application/json"}},
		{"POST", "/login", `{"token":"` + e.token + `"}`, map[string]string{"Content-Type": "application/json"}}, // no Origin
		{"POST", "/logout", "", withCookie(c, map[string]string{"Origin": evil})},
	} {
		resp, body := e.request(tc.method, tc.path, tc.body, tc.header)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s %v: %d %s, want 403", tc.method, tc.path, tc.header, resp.StatusCode, body)
		}
	}
	// Nothing was started, and the cookie still works for its own page.
	if n := len(sessionsOf(t, e)); n != 0 {
		t.Errorf("%d sessions after refused requests", n)
	}
	if resp, _ := e.request("GET", "/v1/sessions", "", withCookie(c, map[string]string{"Origin": e.origin()})); resp.StatusCode != http.StatusOK {
		t.Errorf("own origin after the refusals: %d", resp.StatusCode)
	}
	// A token in a URL is refused at sign-in too.
	resp, _ := e.request("POST", "/login?token="+e.token, "", map[string]string{"Origin": e.origin()})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("token in the URL: %d", resp.StatusCode)
	}
}

func sessionsOf(t *testing.T, e *env) []api.SessionInfo {
	t.Helper()
	var list api.SessionList
	resp, body := e.request("GET", "/v1/sessions", "", e.bearer())
	if err := json.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("sessions: %d %s", resp.StatusCode, body)
	}
	return list.Sessions
}

// TestWebLogout: sign-out ends the session on the gateway, closes the
// WebSocket it opened, and clears the cookie; the old cookie is refused.
func TestWebLogout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.login()
	other := e.login() // another page stays signed in
	ws := e.dial(func(o *gatewaytest.Options) {
		o.Token = ""
		o.Header = http.Header{"Cookie": {c.Name + "=" + c.Value}, "Origin": {e.origin()}}
	})
	resp, body := e.request("POST", "/logout", "", withCookie(c, map[string]string{"Origin": e.origin()}))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d %s", resp.StatusCode, body)
	}
	cleared := false
	for _, k := range resp.Cookies() {
		cleared = cleared || (k.Name == c.Name && k.Value == "" && k.MaxAge < 0)
	}
	if !cleared {
		t.Errorf("logout did not clear the cookie: %v", resp.Header.Values("Set-Cookie"))
	}
	ctx, cancel := gatewaytest.Timeout(5 * time.Second)
	defer cancel()
	if err := ws.WaitClosed(ctx); ctx.Err() != nil {
		t.Errorf("the signed-out page's WebSocket is still open: %v", err)
	}
	resp, body = e.request("GET", "/v1/sessions", "", withCookie(c, nil))
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "sign in again") {
		t.Errorf("old cookie: %d %s, want 401 saying to sign in again", resp.StatusCode, body)
	}
	if resp, _ := e.request("GET", "/v1/sessions", "", withCookie(other, nil)); resp.StatusCode != http.StatusOK {
		t.Errorf("another page's session after this one signed out: %d", resp.StatusCode)
	}
}

// TestWebLoginRateLimit: after ten wrong tokens in a minute, sign-in is
// refused for a while, even with the right token.
func TestWebLoginRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	page := map[string]string{"Origin": e.origin(), "Content-Type": "application/json"}
	for i := range 10 {
		if resp, _ := e.request("POST", "/login", `{"token":"guess-number-`+string(rune('a'+i))+`-0000000"}`, page); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, resp.StatusCode)
		}
	}
	resp, body := e.request("POST", "/login", `{"token":"`+e.token+`"}`, page)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many wrong tokens") {
		t.Errorf("after 10 wrong tokens: %d %s", resp.StatusCode, body)
	}
	// The API's bearer token is not affected.
	if resp, _ := e.request("GET", "/v1/sessions", "", e.bearer()); resp.StatusCode != http.StatusOK {
		t.Errorf("bearer during the lockout: %d", resp.StatusCode)
	}
}

// TestPhasesEndpoint: GET /v1/runs/ID/phases shows a harness run's plan
// from the store, attempts with findings, and marks a side effect whose
// outcome was lost; a pending one of a running run is in flight.
func TestPhasesEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	run := &store.Run{ID: "harness-run-1", Kind: store.KindHarness, Prompt: "greet"}
	if err := e.db.CreateRun(ctx, run, "", 0); err != nil {
		t.Fatal(err)
	}
	mission := `{"version":1,"objective":"A greeting","phases":[
		{"id":"greet","title":"Greet","instructions":"write hello.txt","evidence":{"type":"artifact","artifacts":["hello.txt"]}},
		{"id":"send","title":"Send","depends_on":["greet"],"evidence":{"type":"receipt","receipts":["email_sent"]},"max_attempts":2}]}`
	phase := func(typ, id string, attempt int, data any) event.Event {
		ev := event.New(typ, data)
		ev.PhaseID, ev.Attempt = id, attempt
		return ev
	}
	evs := []event.Event{
		event.New(event.PlanCreated, event.PlanData{Plan: json.RawMessage(mission)}),
		phase(event.PhaseStarted, "greet", 1, event.PhaseData{Title: "Greet"}),
		phase(event.ArtifactCreated, "greet", 1, event.ArtifactData{Path: "hello.txt", SHA256: "ab", Bytes: 6}),
		phase(event.LearningRecorded, "greet", 1, event.LearningData{Text: "the workspace is empty"}),
		phase(event.VerificationCompleted, "greet", 1, event.VerificationData{TaskID: "greet", Status: "pass", Notes: []string{"hello.txt exists"}}),
		phase(event.PhaseCompleted, "greet", 1, event.PhaseData{DurationMS: 1200}),
		phase(event.PhaseStarted, "send", 1, event.PhaseData{Title: "Send"}),
		phase(event.ApproachFailed, "send", 1, event.ApproachData{Approach: "SMTP on port 25", Why: "blocked"}),
	}
	next, err := e.db.NextSeq(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		evs[i].RunID, evs[i].Seq = run.ID, next+int64(i)
	}
	if err := e.db.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"lost-email", "in-flight-email"} {
		if _, err := e.db.AddIntent(ctx, store.Receipt{Key: key, RunID: run.ID, PhaseID: "send", Attempt: 1, Tool: "send_email", Type: "email_sent"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.MarkReceiptUnknown(ctx, "lost-email"); err != nil {
		t.Fatal(err)
	}

	var b gateway.PhaseBoard
	resp, body := e.request("GET", "/v1/runs/"+run.ID+"/phases", "", e.bearer())
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &b) != nil {
		t.Fatalf("phases: %d %s", resp.StatusCode, body)
	}
	if b.Objective != "A greeting" || len(b.Phases) != 2 {
		t.Fatalf("board: %s", body)
	}
	greet, send := b.Phases[0], b.Phases[1]
	if greet.Status != event.StatusCompleted || greet.MaxAttempts != 3 || len(greet.Attempts) != 1 || greet.Attempts[0].Verification == nil ||
		greet.Attempts[0].Verification.Status != "pass" || len(greet.Artifacts) != 1 || greet.Evidence.Type != "artifact" {
		t.Errorf("greet: %+v", greet)
	}
	if send.Status != event.StatusRunning || send.MaxAttempts != 2 || len(send.Receipts) != 2 || send.Attempts[0].StartedAt.IsZero() {
		t.Fatalf("send: %+v", send)
	}
	for _, rc := range send.Receipts {
		if want := rc.Key == "lost-email"; rc.Unknown != want {
			t.Errorf("receipt %s (%s): unknown %v, want %v", rc.Key, rc.State, rc.Unknown, want)
		}
	}
	if len(b.Learnings) != 1 || len(b.Guardrails) != 1 || b.Guardrails[0].Kind != "failed_approach" {
		t.Errorf("learnings %+v guardrails %+v", b.Learnings, b.Guardrails)
	}

	// A run without a plan has an empty board; no such run is not found.
	c := e.dial()
	plain := e.start(c, e.session(c), "echo hi")
	resp, body = e.request("GET", "/v1/runs/"+plain.RunID+"/phases", "", e.bearer())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"phases":[]`) {
		t.Errorf("plain run: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.request("GET", "/v1/runs/no-such-run/phases", "", e.bearer()); resp.StatusCode != http.StatusNotFound {
		t.Errorf("no such run: %d", resp.StatusCode)
	}
}

// TestWebSessionAcrossGateways: gateways on one store are
// interchangeable for a signed-in page too: a page signed in on one is
// signed in on another (as behind one address) and after a restart, and
// signing out on one signs it out on all.
func TestWebSessionAcrossGateways(t *testing.T) {
	t.Parallel()
	a := newEnv(t, nil)
	b := newEnvOn(t, a.db, a.ws, nil)
	c := a.login()
	// The browser sends the cookie of the address it talks to.
	cookieOn := func(e *env, h map[string]string) map[string]string {
		_, port, _ := strings.Cut(e.addr, ":")
		return withCookie(&http.Cookie{Name: "agent_session_" + port, Value: c.Value}, h)
	}
	if resp, body := b.request("GET", "/v1/sessions", "", cookieOn(b, nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("the page signed in on A, on B: %d %s", resp.StatusCode, body)
	}
	restarted := newEnvOn(t, a.db, a.ws, nil)
	if resp, body := restarted.request("GET", "/v1/sessions", "", cookieOn(restarted, nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("the page after a restart: %d %s", resp.StatusCode, body)
	}
	if resp, body := b.request("POST", "/logout", "", cookieOn(b, map[string]string{"Origin": b.origin()})); resp.StatusCode != http.StatusOK {
		t.Fatalf("sign out on B: %d %s", resp.StatusCode, body)
	}
	if resp, body := a.request("GET", "/v1/sessions", "", withCookie(c, nil)); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "sign in again") {
		t.Errorf("on A after signing out on B: %d %s, want 401", resp.StatusCode, body)
	}
}
