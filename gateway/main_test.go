package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"agent/adapter"
	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"

	"github.com/coder/websocket"
)

// The test binary is its own fake `agent runner`: the gateway re-executes
// it with argv[0] "agent", and the run's input picks the behaviour:
//
//	echo TEXT    a user message, two deltas, an assistant message TEXT; completed.
//	             The output says how much prior conversation the spec had.
//	sleep        a user message, then waits to be cancelled.
//	crash        a user message, then exits 2 without a result.
//	fail         completed loop but a failed result (max turns), exit 0.
//	provider     a failed result for a model provider failure.
//	burst N S P  N deltas (of S more bytes, P µs apart), then an assistant message; completed.
//	intent       asks to send an email (effect.intent), then records the receipt.
//
// With gateway.FanoutClientsEnv set it is BenchmarkFanout's client process.
func TestMain(m *testing.M) {
	if os.Getenv(gateway.FanoutClientsEnv) != "" {
		os.Exit(gateway.FanoutClients())
	}
	if filepath.Base(os.Args[0]) == "agent" && len(os.Args) > 1 && os.Args[1] == "runner" {
		os.Exit(fakeRunner())
	}
	os.Exit(m.Run())
}

func fakeRunner() int {
	in := bufio.NewReader(os.Stdin)
	spec, err := adapter.ReadSpec(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	enc := event.NewEncoder(os.Stdout)
	emit := func(typ string, data any) { _ = enc.Encode(event.New(typ, data)) }
	ctx, cancel := context.WithCancelCause(context.Background())
	intents := &adapter.Intents{}
	go adapter.WatchControls(in, intents.Ack, func(err error) { //nolint:errcheck
		intents.Stop(err)
		cancel(err)
	})
	result := func(status, output, reason string, turns int) {
		emit(event.RunnerResult, event.RunnerResultData{Status: status, Output: output, Reason: reason, Turns: turns,
			Usage: event.Usage{PromptTokens: 10 * turns, CompletionTokens: turns}})
	}
	failure := func(reason, detail string) {
		emit(event.RunnerResult, event.RunnerResultData{Status: "failed", Reason: reason, Detail: detail})
	}
	verb, arg, _ := strings.Cut(spec.Prompt, " ")
	emit(event.MessageCompleted, event.MessageData{Role: "user", Text: spec.Prompt})
	switch verb {
	case "echo":
		emit(event.MessageDelta, event.MessageDeltaData{Text: arg[:len(arg)/2]})
		emit(event.MessageDelta, event.MessageDeltaData{Text: arg[len(arg)/2:]})
		emit(event.MessageCompleted, event.MessageData{Role: "assistant", Text: arg, Usage: &event.Usage{PromptTokens: 10, CompletionTokens: 1}})
		result("completed", fmt.Sprintf("%s [prior %d, history %d, resumed turns %d]", arg, len(spec.Prior), len(spec.History), spec.Turns), "", spec.Turns+1)
	case "sleep":
		if len(spec.History) > 0 {
			result("completed", "resumed", "", 1) // a reclaimed run wakes up
			break
		}
		<-ctx.Done()
		result("cancelled", "", context.Cause(ctx).Error(), 0)
		return 130
	case "crash":
		fmt.Fprintln(os.Stderr, "fake runner: boom")
		return 2
	case "fail":
		result("failed", "gave up", "max_turns", 50)
	case "provider":
		// A provider failure is a field of runner.result, whatever the exit code.
		failure("provider", "model provider unreachable")
	case "burst":
		var n, pad, pause int
		fmt.Sscan(arg, &n, &pad, &pause)
		for i := range n {
			emit(event.MessageDelta, event.MessageDeltaData{Text: strconv.Itoa(i) + strings.Repeat(".", pad)})
			time.Sleep(time.Duration(pause) * time.Microsecond)
		}
		emit(event.MessageCompleted, event.MessageData{Role: "assistant", Text: "burst done"})
		result("completed", "burst done", "", 1)
	case "intent":
		// As the real child does: the intent and the receipt within the
		// tool call that makes them, with the token the parent gave it for
		// the call (the parent takes them only so).
		emit(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "send_email"})
		emit(event.Sync, event.SyncData{ID: "s1"})
		synced, _ := intents.Wait(ctx, "s1")
		inCall := func(typ string, data any) {
			e := event.New(typ, data)
			e.Token = synced.Token
			_ = enc.Encode(e)
		}
		inCall(event.EffectIntent, event.EffectIntentData{ID: "i1", CallID: "c1", Tool: "send_email", Key: "send_email-" + spec.RunID[:8], ReceiptType: "email_sent"})
		ack, err := intents.Wait(ctx, "i1")
		if err != nil || !ack.Proceed {
			result("failed", "", fmt.Sprintf("not acked: %v %+v", err, ack), 1)
			return 0
		}
		inCall(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: "send_email-" + spec.RunID[:8]})
		inCall(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", Name: "send_email", OK: true})
		result("completed", "sent", "", 1)
	default:
		result("failed", "", "fake runner: unknown input "+spec.Prompt, 0)
	}
	return 0
}

// env is a gateway on 127.0.0.1:0 with a store in a temp dir.
type env struct {
	t     *testing.T
	srv   *gateway.Server
	db    *store.DB
	addr  string
	token string
	ws    string // a workspace
}

const testToken = "test-token-0123456789abcdef"

func newEnv(t *testing.T, change func(*gateway.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, db, ws, change)
}

// newEnvOn starts a gateway on an existing store, as a restart does.
func newEnvOn(t *testing.T, db *store.DB, ws string, change func(*gateway.Config)) *env {
	t.Helper()
	cfg := gateway.Config{
		Listen: "127.0.0.1:0", Token: testToken, DB: db, Version: "test", DefaultWorkspace: ws,
		Model:     gateway.ModelDefaults{Name: "fake", BaseURL: "http://127.0.0.1:9/v1"},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		KillGrace: 2 * time.Second, DrainGrace: time.Second,
	}
	if change != nil {
		change(&cfg)
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, db: db, addr: srv.Addr(), token: testToken, ws: ws}
	t.Cleanup(func() {
		ctx, cancel := gatewaytest.Timeout(20 * time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

func (e *env) dial(opts ...func(*gatewaytest.Options)) *gatewaytest.Client {
	e.t.Helper()
	o := gatewaytest.Options{Token: e.token}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := gatewaytest.Timeout(5 * time.Second)
	defer cancel()
	c, err := gatewaytest.Dial(ctx, e.addr, o)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// call makes a request that must succeed.
func call[T any](t *testing.T, c *gatewaytest.Client, method string, params any) T {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(15 * time.Second)
	defer cancel()
	var out T
	if err := c.Call(ctx, method, params, &out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return out
}

// callErr makes a request that must fail, and returns the error code.
func callErr(t *testing.T, c *gatewaytest.Client, method string, params any) string {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(15 * time.Second)
	defer cancel()
	err := c.Call(ctx, method, params, nil)
	if err == nil {
		t.Fatalf("%s succeeded, want an error", method)
	}
	code := gatewaytest.ErrCode(err)
	if code == "" {
		t.Fatalf("%s: %v, want a protocol error", method, err)
	}
	return code
}

func (e *env) session(c *gatewaytest.Client) string {
	e.t.Helper()
	return call[api.SessionInfo](e.t, c, api.MethodSessionCreate, api.SessionCreateParams{Title: "t"}).SessionID
}

func (e *env) start(c *gatewaytest.Client, sessionID, input string) api.RunStartResult {
	e.t.Helper()
	return call[api.RunStartResult](e.t, c, api.MethodRunStart, api.RunStartParams{SessionID: sessionID, Input: input})
}

func (e *env) attach(c *gatewaytest.Client, sessionID string, after int64) api.SessionResumeResult {
	e.t.Helper()
	return call[api.SessionResumeResult](e.t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sessionID, AfterSeq: after})
}

// stuck attaches a client to the session that reads nothing after the
// answers to its requests.
func (e *env) stuck(ctx context.Context, sessionID string) *websocket.Conn {
	e.t.Helper()
	ws, _, err := websocket.Dial(ctx, "ws://"+e.addr+"/ws", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ws.CloseNow() })
	for _, req := range []string{
		`{"type":"req","id":"1","method":"connect","params":{"protocol":1,"token":"` + e.token + `"}}`,
		`{"type":"req","id":"2","method":"session.resume","params":{"session_id":"` + sessionID + `"}}`,
	} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
			e.t.Fatal(err)
		}
		if _, _, err := ws.Read(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
	return ws
}

func waitTerminal(t *testing.T, c *gatewaytest.Client, runID string) []api.EventFrame {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	evs, err := c.WaitTerminal(ctx, runID)
	if err != nil {
		t.Fatalf("waiting for the end of run %s: %v; got %s", runID, err, types(evs))
	}
	return evs
}

// ofRun keeps the frames of one run.
func ofRun(evs []api.EventFrame, runID string) []api.EventFrame {
	var out []api.EventFrame
	for _, ev := range evs {
		if ev.RunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

func types(evs []api.EventFrame) string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, ev.Event)
	}
	return strings.Join(ts, " ")
}

func finished(t *testing.T, ev api.EventFrame) event.RunFinishedData {
	t.Helper()
	var d event.RunFinishedData
	if err := (event.Event{Type: ev.Event, Data: ev.Data}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// checkSeqs asserts strictly increasing seqs with no gap from after.
func checkSeqs(t *testing.T, evs []api.EventFrame, after int64) {
	t.Helper()
	want := after + 1
	for _, ev := range evs {
		if ev.Seq != want {
			t.Fatalf("seq %d (%s), want %d: %s", ev.Seq, ev.Event, want, types(evs))
		}
		want++
	}
}

func (e *env) request(method, path, body string, header map[string]string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, "http://"+e.addr+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

func (e *env) bearer() map[string]string {
	return map[string]string{"Authorization": "Bearer " + e.token}
}
