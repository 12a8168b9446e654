package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"
	"agent/supervisor"
)

func TestConnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	got := c.Connected
	if got.Server != "agent test" || got.Protocol != 1 {
		t.Errorf("connect = %+v", got)
	}
	for _, m := range []string{"session.create", "session.resume", "session.fork", "session.list", "session.get",
		"session.lock", "session.release", "run.start", "run.cancel", "run.resume", "run.get", "checkpoint.list", "checkpoint.rewind"} {
		if !slices.Contains(got.Methods, m) {
			t.Errorf("methods %v lack %s", got.Methods, m)
		}
	}
	for _, m := range got.Methods {
		if strings.HasPrefix(m, "job.") { // no scheduler here
			t.Errorf("methods advertise %s, which this gateway does not implement", m)
		}
	}
	for _, ev := range []string{"run.started", "run.completed", "run.failed", "run.cancelled", "run.interrupted",
		"message.delta", "message.completed", "tool.started", "tool.completed", "warning"} {
		if !slices.Contains(got.Events, ev) {
			t.Errorf("events %v lack %s", got.Events, ev)
		}
	}
	// The token may come in the upgrade's Authorization header instead.
	h := e.dial(func(o *gatewaytest.Options) { o.HeaderToken = true })
	call[api.SessionList](t, h, api.MethodSessionList, nil)
	// An Origin of the gateway itself is a page it served: allowed.
	e.dial(func(o *gatewaytest.Options) { o.Header = http.Header{"Origin": {"http://" + e.addr}} })
	if code := callErr(t, c, "job.list", nil); code != api.CodeUnknownMethod {
		t.Errorf("job.list: %s, want unknown_method", code)
	}
	if code := callErr(t, c, "connect", api.ConnectParams{Protocol: 1}); code != api.CodeBadRequest {
		t.Errorf("second connect: %s", code)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()

	// Refused at the upgrade, with an HTTP status.
	upgrade := []struct {
		name   string
		opts   gatewaytest.Options
		status int
	}{
		{"wrong header token", gatewaytest.Options{Token: "nope", HeaderToken: true}, 401},
		{"foreign origin", gatewaytest.Options{Token: e.token, Header: http.Header{"Origin": {"https://evil.example"}}}, 403},
	}
	for _, tt := range upgrade {
		_, err := gatewaytest.Dial(ctx, e.addr, tt.opts)
		checkDialStatus(t, tt.name, err, tt.status)
	}
	// A token in the URL is refused even when it is right.
	upgradeHeaders := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	if resp, body := e.request("GET", "/ws?token="+e.token, "", upgradeHeaders); resp.StatusCode != 401 || !strings.Contains(body, "never accepted in URLs") {
		t.Errorf("token in the query: %d %s", resp.StatusCode, body)
	}
	resp, body := e.request("GET", "/ws?access_token="+e.token, "", nil)
	if resp.StatusCode != 401 || !strings.Contains(body, "never accepted in URLs") {
		t.Errorf("access_token in the query: %d %s", resp.StatusCode, body)
	}

	// Refused in the handshake, with an error and a closed connection.
	handshake := []struct {
		name string
		opts gatewaytest.Options
		code string
	}{
		{"no token", gatewaytest.Options{}, api.CodeUnauthorized},
		{"wrong token", gatewaytest.Options{Token: "wrong"}, api.CodeUnauthorized},
		{"wrong protocol", gatewaytest.Options{Token: e.token, Protocol: 2}, api.CodeProtocol},
	}
	for _, tt := range handshake {
		_, err := gatewaytest.Dial(ctx, e.addr, tt.opts)
		if code := gatewaytest.ErrCode(err); code != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
		if tt.code == api.CodeProtocol && !strings.Contains(err.Error(), "protocol 1") {
			t.Errorf("%s: %v does not name the supported protocol", tt.name, err)
		}
	}

	// A method before connect.
	c, err := gatewaytest.Dial(ctx, e.addr, gatewaytest.Options{NoConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Call(ctx, api.MethodSessionList, nil, nil)
	if gatewaytest.ErrCode(err) != api.CodeNotConnected {
		t.Errorf("session.list before connect: %v", err)
	}
	if err := c.WaitClosed(ctx); gatewaytest.CloseStatus(err) != gateway.StatusPolicyViolation {
		t.Errorf("connection after a method before connect: %v", err)
	}
	// A first frame that is not even a request gets an error frame.
	c, err = gatewaytest.Dial(ctx, e.addr, gatewaytest.Options{NoConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, map[string]string{"hello": "there"}); err != nil {
		t.Fatal(err)
	}
	c.WaitClosed(ctx)
	if errs := c.Errors(); len(errs) != 1 || errs[0].Error.Code != api.CodeNotConnected {
		t.Errorf("error frames %+v", errs)
	}
}

func checkDialStatus(t *testing.T, name string, err error, status int) {
	t.Helper()
	var de *gatewaytest.DialError
	if !errors.As(err, &de) || de.Status != status {
		t.Errorf("%s: %v, want HTTP %d", name, err, status)
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	a := call[api.SessionInfo](t, c, api.MethodSessionCreate, api.SessionCreateParams{Title: "first"})
	b := call[api.SessionInfo](t, c, api.MethodSessionCreate, nil)
	if a.SessionID == "" || a.Title != "first" || b.SessionID == a.SessionID {
		t.Fatalf("created %+v and %+v", a, b)
	}
	list := call[api.SessionList](t, c, api.MethodSessionList, nil)
	if len(list.Sessions) != 2 {
		t.Errorf("list = %+v", list)
	}
	run := e.start(c, a.SessionID[:8], "echo hi") // a unique prefix works
	if run.SessionID != a.SessionID {
		t.Errorf("run.start resolved the prefix to %s", run.SessionID)
	}
	e.attach(c, a.SessionID, 0)
	waitTerminal(t, c, run.RunID)
	d := call[api.SessionDetail](t, c, api.MethodSessionGet, api.SessionParams{SessionID: a.SessionID})
	if d.Session.SessionID != a.SessionID || len(d.Runs) != 1 || d.Runs[0].RunID != run.RunID || d.Runs[0].Status != "completed" || d.Session.LastSeq == 0 {
		t.Errorf("session.get = %+v", d)
	}
	if code := callErr(t, c, api.MethodSessionGet, api.SessionParams{SessionID: "nonexistent"}); code != api.CodeNotFound {
		t.Errorf("unknown session: %s", code)
	}
	if code := callErr(t, c, api.MethodSessionGet, nil); code != api.CodeBadRequest {
		t.Errorf("no session id: %s", code)
	}
}

// TestRunStream checks one run's whole stream as an attached client sees
// it, against the store.
func TestRunStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	if r := e.attach(c, sid, 0); r.LastSeq != 0 {
		t.Errorf("resume of a new session = %+v", r)
	}
	run := e.start(c, sid, "echo hello")
	evs := waitTerminal(t, c, run.RunID)
	if got := types(evs); got != "run.started message.completed message.delta message.delta message.completed run.completed" {
		t.Fatalf("stream: %s", got)
	}
	checkSeqs(t, evs, 0)
	for _, ev := range evs {
		if ev.SessionID != sid || ev.RunID != run.RunID || ev.PhaseID != "" || ev.Attempt != 0 || ev.TS.IsZero() {
			t.Errorf("envelope %+v", ev)
		}
	}
	fin := finished(t, evs[len(evs)-1])
	if fin.Status != "completed" || fin.ExitCode != 0 || fin.Reason != "completed" || fin.Turns != 1 ||
		!strings.HasPrefix(fin.Result, "hello [prior 0") || fin.Usage.PromptTokens != 10 {
		t.Errorf("run.completed = %+v", fin)
	}
	var started event.RunStartedData
	if err := json.Unmarshal(evs[0].Data, &started); err != nil || started.Prompt != "echo hello" || started.Workspace != e.ws || started.Model != "fake" || len(started.Tools) == 0 {
		t.Errorf("run.started = %s", evs[0].Data)
	}
	stored, err := e.db.ListSessionEvents(context.Background(), sid, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(evs) {
		t.Fatalf("%d stored events, %d streamed", len(stored), len(evs))
	}
	for i, s := range stored {
		if s.Seq != evs[i].Seq || s.Type != evs[i].Event || string(s.Data) != string(evs[i].Data) || !s.TS.Equal(evs[i].TS) {
			t.Errorf("stored %+v, streamed %+v", s, evs[i])
		}
	}
	info := call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID})
	if info.Status != "completed" || info.ExitCode != 0 || info.SessionID != sid || info.Turns != 1 || info.FinishedAt == nil {
		t.Errorf("run.get = %+v", info)
	}
}

func TestRunEndings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	tests := []struct {
		input, typ, status string
		code               int
		reason, detail     string
	}{
		{"fail", "run.failed", "failed", 1, "max_turns", ""},
		{"provider", "run.failed", "failed", 3, "provider", "model provider unreachable"},
		{"crash", "run.failed", "failed", 1, "crashed", "fake runner: boom"},
		{"intent", "run.completed", "completed", 0, "completed", ""},
	}
	runs := map[string]string{}
	for _, tt := range tests {
		sid := e.session(c)
		e.attach(c, sid, 0)
		run := e.start(c, sid, tt.input)
		runs[tt.input] = run.RunID
		evs := ofRun(waitTerminal(t, c, run.RunID), run.RunID)
		last := evs[len(evs)-1]
		fin := finished(t, last)
		if last.Event != tt.typ || fin.Status != tt.status || fin.ExitCode != tt.code || fin.Reason != tt.reason || !strings.Contains(fin.Detail, tt.detail) {
			t.Errorf("%s: %s %+v", tt.input, last.Event, fin)
		}
	}
	// The crash left the gateway and the session usable.
	sid := e.session(c)
	e.attach(c, sid, 0)
	run := e.start(c, sid, "echo still here")
	waitTerminal(t, c, run.RunID)
	// The intent was persisted, then completed by its receipt.
	rs, err := e.db.Receipts(context.Background(), runs["intent"], "")
	if err != nil || len(rs) != 1 || rs[0].State != event.StatusDone || rs[0].Tool != "send_email" {
		t.Errorf("receipts %+v, %v", rs, err)
	}
}

func TestInvalidStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	tests := []struct {
		p    api.RunStartParams
		code string
		msg  string
	}{
		{api.RunStartParams{SessionID: sid}, api.CodeBadRequest, "input is empty"},
		{api.RunStartParams{Input: "x", Options: api.RunOptions{MaxTurns: -1}}, api.CodeInvalidOptions, "max_turns"}, // and no session made for it
		{api.RunStartParams{SessionID: "missing", Input: "x"}, api.CodeNotFound, "missing"},
		{api.RunStartParams{SessionID: sid, Input: "x", Workspace: "relative"}, api.CodeBadRequest, "absolute"},
		{api.RunStartParams{SessionID: sid, Input: "x", Workspace: "/does/not/exist"}, api.CodeBadRequest, "workspace"},
		{api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{AllowTools: []string{"rm_rf"}}}, api.CodeInvalidOptions, `unknown tool "rm_rf"`},
		{api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{MaxIterations: 3}}, api.CodeInvalidOptions, "options.until"},
		{api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{MaxTurns: -1}}, api.CodeInvalidOptions, "max_turns"},
		{api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{Timeout: -1}}, api.CodeInvalidOptions, "options.timeout must be a positive duration"},
		{api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{Replay: "nope.jsonl"}}, api.CodeInvalidOptions, "replay"},
		{api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{BaseURL: "https://api.example.com/v1"}}, api.CodeInvalidOptions, "--allow-any-base-url"},
	}
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	for _, tt := range tests {
		err := c.Call(ctx, api.MethodRunStart, tt.p, nil)
		if gatewaytest.ErrCode(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%+v: %v, want %s mentioning %q", tt.p, err, tt.code, tt.msg)
		}
	}
	if runs, _ := e.db.ListRuns(ctx, 0); len(runs) != 0 {
		t.Errorf("refused starts created %d runs", len(runs))
	}
	if ss := sessionsOf(t, e); len(ss) != 1 {
		t.Errorf("refused starts left %d sessions, want only the one made first", len(ss))
	}
}

// TestResumeAfterSeq disconnects a client and resumes from the last seq
// it saw: the replay continues exactly there, then goes live.
func TestResumeAfterSeq(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	e.attach(c, sid, 0)
	r1 := e.start(c, sid, "echo one")
	first := waitTerminal(t, c, r1.RunID)
	cut := first[2].Seq // saw up to the first delta
	c.Close()

	w := e.dial()
	r2 := e.start(w, sid, "echo two") // runs while nobody is attached
	other := e.dial()
	e.attach(other, sid, 0)
	waitTerminal(t, other, r2.RunID)

	c2 := e.dial()
	res := e.attach(c2, sid, cut)
	if res.AfterSeq != cut || res.LastSeq < r2Last(t, other, r2.RunID) {
		t.Errorf("resume result %+v", res)
	}
	r3 := e.start(c2, sid, "echo three") // live after the replay
	evs := waitTerminal(t, c2, r3.RunID)
	checkSeqs(t, evs, cut)
	stored, _ := e.db.ListSessionEvents(context.Background(), sid, cut, 0)
	if len(stored) != len(evs) {
		t.Fatalf("replayed+live %d events, store has %d after %d", len(evs), len(stored), cut)
	}
	for i := range stored {
		if stored[i].Seq != evs[i].Seq || stored[i].Type != evs[i].Event {
			t.Errorf("event %d: stored %d %s, sent %d %s", i, stored[i].Seq, stored[i].Type, evs[i].Seq, evs[i].Event)
		}
	}
	// Resuming again on the same connection attaches it again, from the
	// seq asked for: the whole session once more, in order, nothing missing.
	last := evs[len(evs)-1].Seq
	before := len(c2.Events())
	e.attach(c2, sid, 0)
	var all []api.EventFrame
	for deadline := time.Now().Add(gatewaytest.Patience); len(all) < before+int(last); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second resume replayed %d events, want %d", len(all)-before, last)
		}
		all = c2.Events()
	}
	checkSeqs(t, all[before:], 0)
}

func r2Last(t *testing.T, c *gatewaytest.Client, runID string) int64 {
	evs := ofRun(c.Events(), runID)
	return evs[len(evs)-1].Seq
}

// TestResumeMidReply attaches while a reply is streaming: the deltas the
// store does not have yet still arrive, once each.
func TestResumeMidReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	run := e.start(c, sid, "burst 1000 0 100")
	// Attach at different points of the burst.
	var clients []*gatewaytest.Client
	for range 5 {
		a := e.dial()
		e.attach(a, sid, 0)
		clients = append(clients, a)
		time.Sleep(5 * time.Millisecond)
	}
	for _, a := range clients {
		evs := waitTerminal(t, a, run.RunID)
		checkSeqs(t, evs, 0)
	}
}

func TestTwoClientsSameStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a, b := e.dial(), e.dial()
	sid := e.session(a)
	e.attach(a, sid, 0)
	e.attach(b, sid, 0)
	var last string
	for _, in := range []string{"echo a", "burst 200 0 0", "echo c"} {
		last = e.start(a, sid, in).RunID
	}
	ea, eb := waitTerminal(t, a, last), waitTerminal(t, b, last)
	if !reflect.DeepEqual(ea, eb) {
		t.Fatalf("streams differ:\n%s\n%s", types(ea), types(eb))
	}
	checkSeqs(t, ea, 0)
	// Runs of one session ran one after the other, in order.
	var order []string
	for _, ev := range ea {
		if ev.Event == event.RunStarted || gatewaytest.IsTerminal(ev.Event) {
			order = append(order, ev.Event)
		}
	}
	if got := strings.Join(order, " "); got != "run.started run.completed run.started run.completed run.started run.completed" {
		t.Errorf("run order: %s", got)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	p := api.RunStartParams{SessionID: sid, Input: "echo once", IdempotencyKey: "k1"}
	var wg sync.WaitGroup
	ids := make([]string, 5)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = call[api.RunStartResult](t, e.dial(), api.MethodRunStart, p).RunID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("idempotency key gave runs %v", ids)
		}
	}
	e.attach(c, sid, 0)
	waitTerminal(t, c, ids[0])
	again := call[api.RunStartResult](t, c, api.MethodRunStart, p)
	if again.RunID != ids[0] || again.Status != "completed" {
		t.Errorf("after the run: %+v", again)
	}
	other := e.session(c)
	p.SessionID = other
	if r := call[api.RunStartResult](t, c, api.MethodRunStart, p); r.RunID == ids[0] {
		t.Error("the key is per session, but another session got the same run")
	}
}

func TestSessionLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a, b := e.dial(), e.dial()
	sid := e.session(a)
	if r := call[api.SessionLockResult](t, a, api.MethodSessionLock, api.SessionParams{SessionID: sid}); !r.Locked {
		t.Fatalf("lock = %+v", r)
	}
	if code := callErr(t, b, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo x"}); code != api.CodeSessionLocked {
		t.Errorf("run.start in a session locked by another client: %s", code)
	}
	if code := callErr(t, b, api.MethodSessionLock, api.SessionParams{SessionID: sid}); code != api.CodeSessionLocked {
		t.Errorf("lock taken twice: %s", code)
	}
	if resp, _ := e.request("POST", "/v1/runs", `{"session_id":"`+sid+`","input":"echo x"}`, e.bearer()); resp.StatusCode != http.StatusConflict {
		t.Errorf("HTTP run in a locked session: %d", resp.StatusCode)
	}
	e.start(a, sid, "echo mine") // the holder may
	d := call[api.SessionDetail](t, b, api.MethodSessionGet, api.SessionParams{SessionID: sid})
	if d.Session.LockedBy != "another client" {
		t.Errorf("locked_by = %q", d.Session.LockedBy)
	}
	if code := callErr(t, b, api.MethodSessionRelease, api.SessionParams{SessionID: sid}); code != api.CodeConflict {
		t.Errorf("release by a non-holder: %s", code)
	}
	// Closing the holder's connection releases the lock.
	a.Close()
	ctx, cancel := gatewaytest.Timeout(5 * time.Second)
	defer cancel()
	for {
		err := b.Call(ctx, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo yours"}, nil)
		if err == nil {
			break
		}
		if gatewaytest.ErrCode(err) != api.CodeSessionLocked || ctx.Err() != nil {
			t.Fatalf("after the holder left: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	call[api.SessionLockResult](t, b, api.MethodSessionLock, api.SessionParams{SessionID: sid})
	if r := call[api.SessionLockResult](t, b, api.MethodSessionRelease, api.SessionParams{SessionID: sid}); r.Locked {
		t.Errorf("release = %+v", r)
	}
}

// TestSessionContext: a run sees the earlier runs' conversation; a fork
// starts with the source's history.
func TestSessionContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	e.attach(c, sid, 0)
	r1 := e.start(c, sid, "echo first")
	r2 := e.start(c, sid, "echo second") // queued behind the first
	waitTerminal(t, c, r2.RunID)
	fin1 := finished(t, ofRun(c.Events(), r1.RunID)[len(ofRun(c.Events(), r1.RunID))-1])
	fin2 := finished(t, ofRun(c.Events(), r2.RunID)[len(ofRun(c.Events(), r2.RunID))-1])
	if !strings.Contains(fin1.Result, "[prior 0,") || !strings.Contains(fin2.Result, "[prior 2,") {
		t.Errorf("prior conversation: first %q, second %q", fin1.Result, fin2.Result)
	}

	fork := call[api.SessionInfo](t, c, api.MethodSessionFork, api.SessionForkParams{SessionID: sid, Title: "fork"})
	if fork.ParentID != sid || fork.SessionID == sid || fork.Title != "fork" {
		t.Errorf("fork = %+v", fork)
	}
	f := e.dial()
	e.attach(f, fork.SessionID, 0)
	r3 := e.start(f, fork.SessionID, "echo third")
	evs := waitTerminal(t, f, r3.RunID)
	checkSeqs(t, evs, 0)
	if fin := finished(t, evs[len(evs)-1]); !strings.Contains(fin.Result, "[prior 4,") {
		t.Errorf("run in the fork: %q", fin.Result)
	}
	// Forked at the end of the first run: only its two messages.
	cut := ofRun(c.Events(), r1.RunID)[len(ofRun(c.Events(), r1.RunID))-1].Seq
	early := call[api.SessionInfo](t, c, api.MethodSessionFork, api.SessionForkParams{SessionID: sid, Seq: cut})
	g := e.dial()
	e.attach(g, early.SessionID, 0)
	r4 := e.start(g, early.SessionID, "echo fourth")
	evs = waitTerminal(t, g, r4.RunID)
	if fin := finished(t, evs[len(evs)-1]); !strings.Contains(fin.Result, "[prior 2,") {
		t.Errorf("run in the early fork: %q", fin.Result)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.MaxConcurrentRuns = 1 })
	c := e.dial()
	sid, other := e.session(c), e.session(c)
	e.attach(c, sid, 0)
	e.attach(c, other, 0)
	long := e.start(c, sid, "sleep")
	if long.Status != event.StatusRunning {
		t.Errorf("first run: %+v", long)
	}
	queued := e.start(c, other, "echo later") // waits for the only slot
	if queued.Status != event.StatusQueued {
		t.Errorf("second run: %+v", queued)
	}
	if info := call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: queued.RunID}); info.Status != event.StatusQueued {
		t.Errorf("run.get of a queued run: %+v", info)
	}
	info := call[api.RunInfo](t, c, api.MethodRunCancel, api.RunParams{RunID: queued.RunID})
	if info.Status != "cancelled" {
		t.Errorf("cancel queued: %+v", info)
	}
	if evs := ofRun(waitTerminal(t, c, queued.RunID), queued.RunID); types(evs) != "run.cancelled" || finished(t, evs[0]).ExitCode != 130 {
		t.Errorf("queued run's events: %s", types(evs))
	}
	c.WaitEvent(context.Background(), func(ev api.EventFrame) bool { return ev.RunID == long.RunID && ev.Event == "message.completed" })
	info = call[api.RunInfo](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: long.RunID[:8]})
	if info.Status != "cancelled" || info.ExitCode != 130 {
		t.Errorf("cancel running: %+v", info)
	}
	evs := ofRun(waitTerminal(t, c, long.RunID), long.RunID)
	if fin := finished(t, evs[len(evs)-1]); evs[len(evs)-1].Event != "run.cancelled" || fin.Reason != "cancelled" || fin.Detail != "cancelled by a client" {
		t.Errorf("cancelled run ended %s %+v", evs[len(evs)-1].Event, fin)
	}
	if code := callErr(t, c, api.MethodRunCancel, api.RunCancelParams{RunID: long.RunID}); code != api.CodeConflict {
		t.Errorf("cancel of an ended run: %s", code)
	}
	// The slot is free again.
	r := e.start(c, other, "echo after")
	waitTerminal(t, c, r.RunID)
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	e.attach(c, sid, 0)
	run := call[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{
		SessionID: sid, Input: "sleep", Options: api.RunOptions{Timeout: supervisor.Duration(300 * time.Millisecond)}})
	evs := ofRun(waitTerminal(t, c, run.RunID), run.RunID)
	last := evs[len(evs)-1]
	if fin := finished(t, last); last.Event != "run.failed" || fin.Reason != "timeout" || fin.Detail != "timed out after 300ms" || fin.ExitCode != 1 {
		t.Errorf("timed out run ended %s %+v", last.Event, fin)
	}
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	resp, body := e.request("GET", "/healthz", "", e.bearer())
	if resp.StatusCode != 200 || !strings.Contains(body, `"ok":true`) || !strings.Contains(body, `"version":"test"`) {
		t.Errorf("healthz: %d %s", resp.StatusCode, body)
	}
	for _, tt := range []struct {
		path   string
		header map[string]string
		status int
		msg    string
	}{
		{"/v1/sessions", nil, 401, "token is required"},
		{"/v1/sessions", map[string]string{"Authorization": "Bearer wrong"}, 401, "wrong token"},
		{"/v1/sessions?token=" + e.token, e.bearer(), 401, "never accepted in URLs"},
		{"/v1/sessions", map[string]string{"Authorization": "Bearer " + e.token, "Origin": "http://evil.example"}, 403, "Origin"},
		{"/v1/runs/nope", e.bearer(), 404, "not found"},
		{"/v1/sessions?include_jobs=yes", e.bearer(), 400, "include_jobs \"yes\" must be true or false"},
		{"/v1/nothing", e.bearer(), 404, "no such endpoint"},
	} {
		resp, body := e.request("GET", tt.path, "", tt.header)
		var he api.HTTPError
		if resp.StatusCode != tt.status || json.Unmarshal([]byte(body), &he) != nil || !strings.Contains(he.Error.Message, tt.msg) {
			t.Errorf("GET %s: %d %s", tt.path, resp.StatusCode, body)
		}
	}

	resp, body = e.request("POST", "/v1/runs", `{"input":"echo over http"}`, e.bearer())
	var started api.RunStartResult
	if resp.StatusCode != 202 || json.Unmarshal([]byte(body), &started) != nil || started.RunID == "" || started.SessionID == "" {
		t.Fatalf("POST /v1/runs: %d %s", resp.StatusCode, body)
	}
	// The SSE stream follows the run live to its end.
	resp, body = e.request("GET", "/v1/runs/"+started.RunID+"/events", "", e.bearer())
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
	all := parseSSE(t, body)
	if len(all) != 6 || all[0].Type != "run.started" || all[5].Type != "run.completed" {
		t.Fatalf("SSE: %s", body)
	}
	// Replay after a seq.
	_, body = e.request("GET", fmt.Sprintf("/v1/runs/%s/events?after_seq=%d", started.RunID[:8], all[2].Seq), "", e.bearer())
	if got := parseSSE(t, body); len(got) != 3 || got[0].Seq != all[3].Seq {
		t.Errorf("SSE after_seq: %s", body)
	}
	_, body = e.request("GET", "/v1/runs/"+started.RunID+"/events", "", map[string]string{"Authorization": "Bearer " + e.token, "Last-Event-ID": fmt.Sprint(all[4].Seq)})
	if got := parseSSE(t, body); len(got) != 1 || got[0].Type != "run.completed" {
		t.Errorf("SSE Last-Event-ID: %s", body)
	}

	resp, body = e.request("GET", "/v1/runs/"+started.RunID, "", e.bearer())
	var d api.RunDetail
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &d) != nil || d.Events != 6 || d.Run.Status != "completed" {
		t.Errorf("GET run: %d %s", resp.StatusCode, body)
	}
	resp, body = e.request("GET", "/v1/sessions", "", e.bearer())
	var list api.SessionList
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Sessions) != 1 || list.Sessions[0].Title != "echo over http" {
		t.Errorf("GET sessions: %d %s", resp.StatusCode, body)
	}
	resp, body = e.request("POST", "/v1/runs", `{"input":"x","options":{"allow_tools":["nope"]}}`, e.bearer())
	if resp.StatusCode != 400 || !strings.Contains(body, "invalid_options") {
		t.Errorf("POST invalid: %d %s", resp.StatusCode, body)
	}
}

type sseEvent struct {
	ID   string
	Type string
	Seq  int64
	Data event.Event
}

func parseSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	for _, block := range strings.Split(strings.TrimSpace(body), "\n\n") {
		if block == "" || strings.HasPrefix(block, ":") {
			continue
		}
		var ev sseEvent
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "id":
				ev.ID = v
			case "event":
				ev.Type = v
			case "data":
				if err := json.Unmarshal([]byte(v), &ev.Data); err != nil {
					t.Fatalf("SSE data %q: %v", v, err)
				}
			}
		}
		ev.Seq = ev.Data.Seq
		if ev.ID != fmt.Sprint(ev.Seq) || ev.Type != ev.Data.Type {
			t.Fatalf("SSE block %q", block)
		}
		out = append(out, ev)
	}
	return out
}

// TestConcurrentRuns runs 50 runs across 10 sessions at once, with a
// client attached to each session: no event is lost or repeated, and each
// session's seqs increase by one, as clients saw them and in the store.
func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.MaxConcurrentRuns = 8 })
	const sessions, perSession = 10, 5
	type sess struct {
		id   string
		c    *gatewaytest.Client
		runs []string
	}
	all := make([]*sess, sessions)
	for i := range all {
		c := e.dial()
		s := &sess{id: e.session(c), c: c}
		e.attach(c, s.id, 0)
		all[i] = s
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, s := range all {
		for j := range perSession {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := call[api.RunStartResult](t, e.dial(), api.MethodRunStart,
					api.RunStartParams{SessionID: s.id, Input: fmt.Sprintf("echo s%d", j)})
				mu.Lock()
				s.runs = append(s.runs, r.RunID)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for _, s := range all {
		for _, id := range s.runs {
			waitTerminal(t, s.c, id)
		}
		evs := s.c.Events()
		checkSeqs(t, evs, 0)
		if len(evs) != perSession*6 {
			t.Errorf("session %s: %d events, want %d", s.id, len(evs), perSession*6)
		}
		stored, err := e.db.ListSessionEvents(context.Background(), s.id, 0, 0)
		if err != nil || len(stored) != len(evs) {
			t.Fatalf("session %s: %d stored, %d streamed (%v)", s.id, len(stored), len(evs), err)
		}
		for i := range stored {
			if stored[i].Seq != evs[i].Seq || stored[i].RunID != evs[i].RunID || stored[i].Type != evs[i].Event {
				t.Fatalf("session %s event %d differs", s.id, i)
			}
		}
	}
}

// TestDrainAndReclaim stops a gateway with a run still going: it is
// recorded interrupted and resumable, and the next gateway on the same
// store resumes it.
func TestDrainAndReclaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.DrainGrace = 200 * time.Millisecond; c.MaxConcurrentRuns = 1 })
	c := e.dial()
	sid, other := e.session(c), e.session(c)
	e.attach(c, sid, 0)
	long := e.start(c, sid, "sleep")
	queued := e.start(c, other, "echo queued")
	c.WaitEvent(context.Background(), func(ev api.EventFrame) bool { return ev.RunID == long.RunID && ev.Event == "message.completed" })

	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.Stop(ctx) }()
	evs := ofRun(waitTerminal(t, c, long.RunID), long.RunID)
	last := evs[len(evs)-1]
	if fin := finished(t, last); last.Event != "run.interrupted" || fin.Reason != "interrupted" || fin.Detail != "gateway stopped; resumable" || fin.ExitCode != 130 {
		t.Errorf("drained run ended %s %+v", last.Event, fin)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := c.WaitClosed(ctx); gatewaytest.CloseStatus(err) != gateway.StatusGoingAway {
		t.Errorf("client after stop: %v", err)
	}
	for _, id := range []string{long.RunID, queued.RunID} {
		r, _ := e.db.GetRun(ctx, id)
		if r.Status != "interrupted" || r.LeaseOwner != "" {
			t.Errorf("run %s after the drain: %s, lease %q", id, r.Status, r.LeaseOwner)
		}
	}

	// The next gateway resumes both.
	e2 := restart(t, e, nil)
	c2 := e2.dial()
	e2.attach(c2, sid, last.Seq)
	evs = waitTerminal(t, c2, long.RunID)
	if types(evs) != "warning run.started message.completed run.completed" {
		t.Errorf("reclaimed run: %s", types(evs))
	}
	checkSeqs(t, evs, last.Seq)
	if fin := finished(t, evs[len(evs)-1]); !strings.Contains(fin.Result, "resumed") {
		t.Errorf("reclaimed run result %q", fin.Result)
	}
	var started event.RunStartedData
	json.Unmarshal(evs[1].Data, &started)
	if !started.Resumed {
		t.Errorf("run.started of a reclaimed run: %s", evs[1].Data)
	}
	e2.attach(c2, other, 0)
	waitTerminal(t, c2, queued.RunID)
	// A clean stop does not count against the one reclaim after a crash.
	if r, _ := e.db.GetRun(ctx, long.RunID); r.Reclaims != 0 || r.Status != "completed" {
		t.Errorf("reclaimed run row: %+v", r)
	}
}

// restart starts another gateway on e's store, as after a restart.
func restart(t *testing.T, e *env, change func(*gateway.Config)) *env {
	t.Helper()
	e2 := newEnvOn(t, e.db, e.ws, change)
	return e2
}

// TestReclaimDeadGateway fakes what kill -9 leaves: runs with a lease held
// by a process that is gone. Resume continues one (once); fail records it.
func TestReclaimDeadGateway(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		policy   string
		reclaims int
		want     string
	}{
		{gateway.ReclaimResume, 0, "warning run.started message.completed message.delta message.delta message.completed run.completed"},
		{gateway.ReclaimResume, 1, "run.failed"},
		{gateway.ReclaimFail, 0, "run.failed"},
	} {
		t.Run(fmt.Sprintf("%s-%d", tt.policy, tt.reclaims), func(t *testing.T) {
			t.Parallel()
			db, ws := openStore(t)
			ctx := context.Background()
			s := &store.Session{ID: "dead-session"}
			if err := db.CreateSession(ctx, s); err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(map[string]any{"model": "fake", "base_url": "http://127.0.0.1:9/v1", "max_turns": 0, "timeout": "1m"})
			r := &store.Run{ID: "dead-run-0001", SessionID: s.ID, Prompt: "echo again", Workspace: ws, Config: raw}
			if err := db.CreateRun(ctx, r, "elsewhere/1/dead", -time.Minute); err != nil { // already expired
				t.Fatal(err)
			}
			for range tt.reclaims {
				if _, err := db.NoteReclaim(ctx, r.ID); err != nil {
					t.Fatal(err)
				}
			}
			j, _ := db.SessionJournal(ctx, s.ID)
			for _, ev := range []event.Event{
				event.New(event.RunStarted, event.RunStartedData{Prompt: r.Prompt}),
				event.New(event.MessageCompleted, event.MessageData{Role: "user", Text: r.Prompt}),
			} {
				ev.RunID = r.ID
				if _, err := j.Append(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}

			e := newEnvOn(t, db, ws, func(c *gateway.Config) { c.ReclaimPolicy = tt.policy })
			c := e.dial()
			e.attach(c, s.ID, 2)
			evs := waitTerminal(t, c, r.ID)
			if types(evs) != tt.want {
				t.Errorf("stream: %s", types(evs))
			}
			// The dead gateway's journal never gave back the seqs it had
			// reserved: the new one continues above them, never reusing one.
			if evs[0].Seq <= 2 {
				t.Errorf("the reclaiming gateway reused seq %d", evs[0].Seq)
			}
			checkSeqs(t, evs, evs[0].Seq-1)
			fin := finished(t, evs[len(evs)-1])
			switch {
			case tt.want == "run.failed" && (fin.Reason != "crashed" || !strings.Contains(fin.Detail, "not resumed (reclaim policy "+tt.policy)):
				t.Errorf("reason %q: %q", fin.Reason, fin.Detail)
			case tt.want != "run.failed" && !strings.Contains(fin.Result, "history 1"):
				t.Errorf("resumed without its history: %q", fin.Result)
			}
		})
	}
}

func openStore(t *testing.T) (*store.DB, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir + "/agent.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dir
}

// TestStopRefusesRuns: once draining, run.start is unavailable and
// retryable.
func TestStopRefusesRuns(t *testing.T) {
	t.Parallel()
	// The drain lasts until the test cancels its run: the connection
	// stays open however long the first run.start takes to come.
	e := newEnv(t, func(c *gateway.Config) { c.DrainGrace = gatewaytest.Patience })
	c := e.dial()
	sid := e.session(c)
	e.attach(c, sid, 0)
	long := e.start(c, sid, "sleep")
	c.WaitEvent(context.Background(), func(ev api.EventFrame) bool { return ev.RunID == long.RunID && ev.Event == "message.completed" })
	go e.srv.Stop(context.Background())
	ctx, cancel := gatewaytest.Timeout(5 * time.Second)
	defer cancel()
	for {
		err := c.Call(ctx, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "echo x"}, nil)
		var ge *api.Error
		if errors.As(err, &ge) && ge.Code == api.CodeUnavailable {
			if !ge.Retryable {
				t.Errorf("unavailable but not retryable: %+v", ge)
			}
			break
		}
		if err != nil && !errors.As(err, &ge) || ctx.Err() != nil {
			t.Fatalf("run.start while stopping: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The drain ends, and the gateway may close before it answers.
	_ = c.Call(ctx, api.MethodRunCancel, api.RunCancelParams{RunID: long.RunID}, nil)
}

// TestSlowConsumer attaches a client that stops reading while a run
// streams megabytes: the gateway does not wait for it, closes it with an
// error frame naming the seq to resume after, and a resume from there
// loses and repeats nothing.
func TestSlowConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gateway.Config) { c.SubscriberBuffer = 16 })
	c := e.dial()
	sid := e.session(c)
	ctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+e.addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	for i, req := range []api.Request{
		{Type: "req", ID: "1", Method: "connect", Params: json.RawMessage(`{"protocol":1,"token":"` + e.token + `"}`)},
		{Type: "req", ID: "2", Method: "session.resume", Params: json.RawMessage(`{"session_id":"` + sid + `"}`)},
	} {
		data, _ := json.Marshal(req)
		if err := ws.Write(ctx, websocket.MessageText, data); err != nil {
			t.Fatal(err)
		}
		if i == 0 { // the connect answer, then stop reading
			if _, _, err := ws.Read(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := e.start(c, sid, "burst 4000 4096 0") // ~16 MB, more than the socket buffers hold
	for {
		if r, err := e.db.GetRun(ctx, run.RunID); err == nil && r.Status == "completed" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the run did not finish while a client was not reading: the publisher was blocked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Now read what the slow client was sent.
	var seqs []int64
	var ef api.ErrorFrame
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Errorf("closed with %v", err)
			}
			break
		}
		var head struct {
			Type string `json:"type"`
			Seq  int64  `json:"seq"`
		}
		json.Unmarshal(data, &head)
		switch head.Type {
		case "event":
			seqs = append(seqs, head.Seq)
		case "error":
			json.Unmarshal(data, &ef)
		}
	}
	if ef.Error == nil || ef.Error.Code != api.CodeSlowConsumer || ef.SessionID != sid || len(seqs) == 0 || ef.AfterSeq != seqs[len(seqs)-1] {
		t.Fatalf("error frame %+v after %d events", ef, len(seqs))
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, s)
		}
	}
	r := e.dial()
	e.attach(r, sid, ef.AfterSeq)
	evs := waitTerminal(t, r, run.RunID)
	checkSeqs(t, evs, ef.AfterSeq)
	if total := len(seqs) + len(evs); total != 4004 {
		t.Errorf("%d events in all, want 4004", total)
	}
}

// A client that stops reading holds no other client up: while a run
// streams megabytes more than its socket takes, another client of the
// same session gets every event, in order, and the stuck one is not
// dropped while its queue has room.
func TestStuckClientHoldsNoOneUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	ctx, cancel := gatewaytest.Timeout(time.Minute)
	defer cancel()
	stuck := e.stuck(ctx, sid)
	run := e.start(c, sid, "burst 2000 4096 0") // ~8 MB, more than the socket buffers hold
	evs := waitTerminal(t, c, run.RunID)
	checkSeqs(t, evs, 0)
	if len(evs) != 2004 {
		t.Fatalf("the reading client got %d events, want 2004", len(evs))
	}
	// The stuck client reads at last: it was sent everything, in order,
	// frames whole across what its socket took only in part.
	stuck.SetReadLimit(1 << 20)
	for want := int64(1); want <= 2004; want++ {
		_, data, err := stuck.Read(ctx)
		if err != nil {
			t.Fatalf("the stuck client, reading at last, after seq %d: %v", want-1, err)
		}
		var head struct {
			Type string `json:"type"`
			Seq  int64  `json:"seq"`
		}
		if json.Unmarshal(data, &head) != nil || head.Type != "event" || head.Seq != want {
			t.Fatalf("the stuck client got %.80s, want the event of seq %d", data, want)
		}
	}
}

// Clients that drop their connection mid-stream and come back with
// session.resume from the last seq they had, again and again, while two
// others read nothing, each end up with the whole stream: every event
// once, in order.
func TestStreamsWholeThroughReconnects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	ctx, cancel := gatewaytest.Timeout(time.Minute)
	defer cancel()
	for range 2 {
		e.stuck(ctx, sid)
	}
	type follower struct {
		c   *gatewaytest.Client
		got []api.EventFrame
	}
	followers := make([]*follower, 6)
	for i := range followers {
		followers[i] = &follower{c: e.dial()}
		e.attach(followers[i].c, sid, 0)
	}
	run := e.start(c, sid, "burst 3000 2000 300") // ~6 MB over a second or more
	ended := func(evs []api.EventFrame) bool {
		return len(evs) > 0 && evs[len(evs)-1].RunID == run.RunID && gatewaytest.IsTerminal(evs[len(evs)-1].Event)
	}
	reconnects := 0
	for range 5 {
		for _, f := range followers {
			// Once it has had a few events more on this connection,
			// drop it and come back from the last one it has, until it
			// has them all.
			after := int64(0)
			if len(f.got) > 0 {
				after = f.got[len(f.got)-1].Seq
			}
			wait, cancel := gatewaytest.Timeout(gatewaytest.Patience)
			evs, err := f.c.WaitEvent(wait, func(ev api.EventFrame) bool {
				return ev.Seq >= after+20 || ev.RunID == run.RunID && gatewaytest.IsTerminal(ev.Event)
			})
			cancel()
			if err != nil {
				t.Fatalf("a follower resumed after seq %d got %d events: %v", after, len(evs), err)
			}
			if ended(evs) {
				continue
			}
			reconnects++
			f.got = append(f.got, evs...)
			f.c.Close()
			f.c = e.dial()
			e.attach(f.c, sid, f.got[len(f.got)-1].Seq)
		}
	}
	t.Logf("%d reconnects while the run streamed", reconnects)
	for i, f := range followers {
		f.got = append(f.got, waitTerminal(t, f.c, run.RunID)...)
		checkSeqs(t, f.got, 0)
		if len(f.got) != 3004 {
			t.Errorf("follower %d got %d events, want 3004", i, len(f.got))
		}
	}
	stored, err := e.db.ListSessionEvents(ctx, sid, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 3004 {
		t.Errorf("the store has %d events, want 3004", len(stored))
	}
}

// docs/PROTOCOL.md#replay-and-attachment "Attachment": a connection that creates a session, or
// starts a run in a session it is not attached to, receives the run's
// events with no session.resume, in the same order and with the same
// seqs as every other client.
func TestAttachedByCreateAndStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	first := e.start(c, sid, "echo hello")
	evs := waitTerminal(t, c, first.RunID)
	if types(evs) != "run.started message.completed message.delta message.delta message.completed run.completed" {
		t.Fatalf("the creator got %s", types(evs))
	}
	checkSeqs(t, evs, 0)

	other := e.dial() // never created the session, never resumed it
	second := e.start(other, sid, "echo again")
	got := waitTerminal(t, other, second.RunID)
	want := ofRun(waitTerminal(t, c, second.RunID), second.RunID)
	if len(got) == 0 || got[0].Seq != evs[len(evs)-1].Seq+1 {
		t.Fatalf("the starter's stream begins at %v, want right after seq %d", got, evs[len(evs)-1].Seq)
	}
	checkSeqs(t, got, evs[len(evs)-1].Seq)
	if len(got) != len(want) {
		t.Fatalf("starter saw %s, creator saw %s", types(got), types(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || got[i].Event != want[i].Event {
			t.Errorf("frame %d: starter %d %s, creator %d %s", i, got[i].Seq, got[i].Event, want[i].Seq, want[i].Event)
		}
	}
}
