package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/supervisor"
)

// People in the loop through a gateway (docs/PROTOCOL.md#waits): a run
// that waits ends its drive and frees its slot; its clients see
// run.waiting and no end; it goes on when answered, through the gateway
// or any other process on the store, or at its deadline, also after the
// gateway was killed.

// startAsking starts a run in a new session of c whose rule makes it ask
// before bash runs, and returns it with its session.
func startAsking(t *testing.T, c *gatewaytest.Client, input string, o api.RunOptions) (api.RunStartResult, string) {
	t.Helper()
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: input, Options: o})
	return run, sid
}

// TestGatewayApprovalThroughMethod: a run that asks before bash parks:
// its clients get run.waiting and no end, run.get and the inbox say it
// waits for bash with its full command, the call has not run, and its
// slot serves another session's run meanwhile. wait.answer allows it: the
// run goes on by itself where it stopped (the answer journaled before the
// call), and a second answer is refused naming the first.
func TestGatewayApprovalThroughMethod(t *testing.T) {
	t.Parallel()
	const command = "touch approved; echo 'a long command: with quotes, and more'"
	e := e2etest.New(t,
		llmtest.Turn{When: "touch", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", jsonString(map[string]string{"command": command}))}},
		llmtest.Turn{When: "touch", Text: "Touched it."},
		llmtest.Turn{When: "other", Text: "The other run is done."},
	)
	srv, _ := e.InProcessGateway(func(c *gateway.Config) { c.MaxConcurrentRuns = 1 })
	c := e2etest.GwDial(t, srv.Addr())
	run, _ := startAsking(t, c, "touch a file", api.RunOptions{Ask: []string{"bash(touch *)"}})
	waiting, w := e2etest.GwWaiting(t, c, run.RunID, 0)
	if w.Kind != event.WaitApproval || w.Tool != "bash" || w.Rule != "bash(touch *)" || !strings.Contains(string(w.Args), "with quotes, and more") {
		t.Fatalf("run.waiting = %+v", w)
	}
	for _, f := range c.Events() {
		if f.RunID == run.RunID && (gatewaytest.IsTerminal(f.Event) || f.Event == event.ToolStarted) {
			t.Fatalf("a waiting run's client got %s", f.Event)
		}
	}
	if info := e2etest.GwCall[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID}); info.Status != event.StatusWaiting {
		t.Errorf("run.get says %s, want waiting", info.Status)
	}
	var inbox api.WaitingList
	if code := e2etest.HTTPJSON(t, "GET", "http://"+srv.Addr()+"/v1/waiting", "", &inbox); code != http.StatusOK || len(inbox.Waits) != 1 {
		t.Fatalf("GET /v1/waiting: %d %+v", code, inbox)
	}
	if got := inbox.Waits[0]; got.RunID != run.RunID || got.WaitID != w.WaitID || got.Tool != "bash" || got.Prompt != "touch a file" ||
		!strings.Contains(string(got.Args), command[:20]) || got.Until == "" || got.Resolution != nil {
		t.Errorf("the inbox has %+v", got)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "approved")); err == nil {
		t.Fatal("the call ran before anyone approved it")
	}

	// The one slot is free: another session's run starts and ends.
	other, _ := startAsking(t, c, "the other run", api.RunOptions{})
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, other.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("the other run: %s", end.Event)
	}

	began := time.Now()
	info, code := e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: run.RunID, WaitID: w.WaitID, Decision: supervisor.DecideAllow, Who: "ops"})
	if code != "" || info.Resolution == nil || info.Resolution.Outcome != event.WaitAllowed || info.Resolution.Via != event.ViaGateway {
		t.Fatalf("wait.answer: %s %+v", code, info)
	}
	next := e2etest.GwFrame(t, c, run.RunID, event.RunStarted, waiting.Seq)
	t.Logf("from the answer to the run's next event (run.started, seq %d): %s", next.Seq, time.Since(began))
	evs := e2etest.GwWait(t, c, run.RunID)
	if end := e2etest.LastFrame(evs); end.Event != event.RunCompleted {
		t.Fatalf("after the answer the run ended %s", end.Event)
	}
	if got := e2etest.FrameTypes(after(evs, waiting.Seq)); !strings.HasPrefix(got, "run.started wait.resolved tool.started") {
		t.Errorf("after the answer: %s; want the answer journaled, then the call", got)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "approved")); err != nil {
		t.Error("the approved call did not run")
	}
	_, code = e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: run.RunID, WaitID: w.WaitID, Decision: supervisor.DecideDeny, Reason: "too late"})
	if code != api.CodeAnswered {
		t.Errorf("a second answer: code %q, want %s", code, api.CodeAnswered)
	}
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	err := c.Call(ctx, api.MethodWaitAnswer, api.WaitAnswerParams{RunID: run.RunID, WaitID: w.WaitID, Decision: supervisor.DecideDeny}, nil)
	if err == nil || !strings.Contains(err.Error(), "allowed") || !strings.Contains(err.Error(), "via gateway") {
		t.Errorf("a second answer: %v; want it to name the first (allowed via gateway)", err)
	}
	if code := e2etest.HTTPJSON(t, "GET", "http://"+srv.Addr()+"/v1/waiting", "", &inbox); code != http.StatusOK || len(inbox.Waits) != 0 {
		t.Errorf("the inbox after the answer: %+v", inbox)
	}
}

// after is the frames of evs with a seq after seq.
func after(evs []api.EventFrame, seq int64) []api.EventFrame {
	var out []api.EventFrame
	for _, f := range evs {
		if f.Seq > seq {
			out = append(out, f)
		}
	}
	return out
}

func jsonString(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// TestGatewayAnswersOverHTTP: the HTTP routes answer each kind of wait, and
// the model is told: a denial with its reason, a question's answer, a
// signal's data.
func TestGatewayAnswersOverHTTP(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: "deny", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"touch denied"}`)}},
		llmtest.Turn{When: "deny", Text: "Not touched."},
		llmtest.Turn{When: "colour", ToolCalls: []llmtest.Call{e2etest.ToolCall("ask_human", `{"question":"Which colour?","options":["blue","red"]}`)}},
		llmtest.Turn{When: "colour", Text: "Blue it is."},
		llmtest.Turn{When: "deploy", ToolCalls: []llmtest.Call{e2etest.ToolCall("wait_for_signal", `{"name":"deploy-done","timeout_s":600}`)}},
		llmtest.Turn{When: "deploy", Text: "Deployed."},
	)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	base := "http://" + srv.Addr() + "/v1/runs/"

	deny, _ := startAsking(t, c, "deny this", api.RunOptions{Ask: []string{"bash"}})
	_, w := e2etest.GwWaiting(t, c, deny.RunID, 0)
	// The gateway's auth holds: no token, or another site's page, answers nothing.
	for _, h := range []map[string]string{{}, {"Authorization": "Bearer " + e2etest.GwToken, "Origin": "http://evil.example"}} {
		req, _ := http.NewRequest("POST", base+deny.RunID+"/waits/"+w.WaitID, strings.NewReader(`{"decision":"allow"}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Errorf("an answer with headers %v: %d, want 401 or 403", h, resp.StatusCode)
		}
	}
	var info api.WaitInfo
	if code := e2etest.HTTPJSON(t, "POST", base+deny.RunID+"/waits/"+w.WaitID, `{"decision":"deny","reason":"not on Fridays"}`, &info); code != http.StatusOK ||
		info.Resolution == nil || info.Resolution.Outcome != event.WaitDenied || info.Resolution.Reason != "not on Fridays" {
		t.Fatalf("POST deny: %d %+v", code, info)
	}
	colour, _ := startAsking(t, c, "pick a colour", api.RunOptions{})
	_, q := e2etest.GwWaiting(t, c, colour.RunID, 0)
	if q.Kind != event.WaitQuestion || q.Question != "Which colour?" || strings.Join(q.Options, ",") != "blue,red" {
		t.Fatalf("the question: %+v", q)
	}
	var bad api.HTTPError
	if code := e2etest.HTTPJSON(t, "POST", base+colour.RunID+"/waits/"+q.WaitID, `{"decision":"allow"}`, &bad); code != http.StatusConflict {
		t.Errorf("allow on a question: %d %+v, want 409", code, bad)
	}
	if code := e2etest.HTTPJSON(t, "POST", base+colour.RunID+"/waits/"+q.WaitID, `{"decision":"answer","text":"blue, please"}`, &info); code != http.StatusOK {
		t.Fatalf("POST answer: %d %+v", code, info)
	}
	deploy, _ := startAsking(t, c, "deploy and wait", api.RunOptions{WaitTools: true})
	_, s := e2etest.GwWaiting(t, c, deploy.RunID, 0)
	if s.Kind != event.WaitSignal || s.Name != "deploy-done" {
		t.Fatalf("the signal wait: %+v", s)
	}
	if code := e2etest.HTTPJSON(t, "POST", base+deploy.RunID+"/signals/other", `{}`, &bad); code != http.StatusConflict {
		t.Errorf("a signal the run does not wait for: %d %+v, want 409", code, bad)
	}
	if code := e2etest.HTTPJSON(t, "POST", base+deploy.RunID+"/signals/deploy-done", `{"build":42}`, &info); code != http.StatusOK ||
		info.Resolution == nil || info.Resolution.Outcome != event.WaitSignalled {
		t.Fatalf("POST signal: %d %+v", code, info)
	}

	for _, r := range []api.RunStartResult{deny, colour, deploy} {
		if end := e2etest.LastFrame(e2etest.GwWait(t, c, r.RunID)); end.Event != event.RunCompleted {
			t.Errorf("run %s ended %s", r.RunID, end.Event)
		}
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "denied")); err == nil {
		t.Error("the denied call ran")
	}
	for _, told := range []string{"denied (gateway): not on Fridays", "Answer (gateway): blue, please", `Signal deploy-done arrived. Data: {\"build\":42}`} {
		if !e2etest.ModelWasTold(e.Srv, told) {
			t.Errorf("the model was not told %q", told)
		}
	}
}

// TestGatewayDeadlineDenies: nobody answers an approval; at its deadline
// the gateway wakes the run by itself, the call is denied by the timeout
// (on_timeout deny), the model is told so, and the run completes.
func TestGatewayDeadlineDenies(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("touch late"), llmtest.Turn{Text: "Nobody approved."})
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	run, _ := startAsking(t, c, "touch late", api.RunOptions{Ask: []string{"bash"}, AskTimeout: supervisor.Duration(2 * time.Second),
		AskOnTimeout: event.OnTimeoutDeny})
	waiting, w := e2etest.GwWaiting(t, c, run.RunID, 0)
	until, err := time.Parse(time.RFC3339, w.Until)
	if err != nil || w.OnTimeout != event.OnTimeoutDeny {
		t.Fatalf("run.waiting until %q on_timeout %q", w.Until, w.OnTimeout)
	}
	resolved := e2etest.GwFrame(t, c, run.RunID, event.WaitResolved, waiting.Seq)
	var res event.WaitResolvedData
	if err := json.Unmarshal(resolved.Data, &res); err != nil || res.Outcome != event.WaitTimedOut || res.Via != event.ViaTimeout {
		t.Fatalf("wait.resolved = %+v (%v), want timed_out via timeout", res, err)
	}
	if resolved.TS.Before(until) {
		t.Errorf("resolved at %s, before the deadline %s", resolved.TS, w.Until)
	}
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, run.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("the run ended %s", end.Event)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "late")); err == nil {
		t.Error("the call ran though nobody approved it")
	}
	if !e2etest.ModelWasTold(e.Srv, "denied (timeout): nobody approved this bash call") {
		t.Error("the model was not told the call was denied by the timeout")
	}
}

// TestGatewayWaitSurvivesKill9: a gateway process is killed (kill -9)
// while its run waits, and started again; agent approve, another process
// on the same store, answers the wait; the gateway continues the run by
// itself. Then a second wait of the run is answered from another process
// (this test, through supervisor.Answer), which wakes it on its own too.
func TestGatewayWaitSurvivesKill9(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		e2etest.BashTurn("echo one >> log"), e2etest.BashTurn("echo two >> log"), llmtest.Turn{Text: "Both done."})
	gw := e.StartGateway()
	c := e2etest.GwDial(t, gw.Addr)
	run, sid := startAsking(t, c, "append twice", api.RunOptions{Ask: []string{"bash"}})
	_, first := e2etest.GwWaiting(t, c, run.RunID, 0)
	gw.Signal(t, syscall.SIGKILL)
	gw.Wait(t)
	gw = e.StartGateway()
	c = e2etest.GwDial(t, gw.Addr)
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	if info := e2etest.GwCall[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID}); info.Status != event.StatusWaiting {
		t.Fatalf("after the restart the run is %s, want waiting", info.Status)
	}
	if res := e.Run("approve", run.RunID[:8]); res.Code != 0 || !strings.Contains(res.Stderr, "continues run") {
		t.Fatalf("agent approve: exit %d: %s%s", res.Code, res.Stdout, res.Stderr)
	}
	db := e.OpenStore(t)
	defer db.Close()
	ctx := context.Background()
	waiting, second := e2etest.GwWaiting(t, c, run.RunID, 0)
	for waiting.Seq > 0 && second.WaitID == first.WaitID { // the replay has the first wait
		waiting, second = e2etest.GwWaiting(t, c, run.RunID, waiting.Seq)
	}
	if got := logFile(t, e); got != "one\n" {
		t.Fatalf("after the restart the log has %q, want the first call once", got)
	}

	began := time.Now()
	if _, err := supervisor.Answer(ctx, db, run.RunID, supervisor.Decision{WaitID: second.WaitID, Decide: supervisor.DecideAllow, Via: event.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	next := e2etest.GwFrame(t, c, run.RunID, event.RunStarted, waiting.Seq)
	t.Logf("from another process's answer to the run's next event (run.started, seq %d): %s", next.Seq, time.Since(began))
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, run.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("the run ended %s", end.Event)
	}
	if got := logFile(t, e); got != "one\ntwo\n" {
		t.Errorf("the log has %q, want each approved call once", got)
	}
}

func logFile(t *testing.T, e *e2etest.Env) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.Workspace, "log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}

// TestGatewaySessionsOfferAskHuman: a gateway session's run may ask the
// person (its clients and the web view's inbox can answer) unless
// run.start says ask_human: false; agent run --json through the gateway
// says so, as the same run here would not offer it either.
func TestGatewaySessionsOfferAskHuman(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{When: "first", Text: "one"}, llmtest.Turn{When: "second", Text: "two"}, llmtest.Turn{When: "third", Text: "three"})
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	for _, input := range []string{"first", "second"} {
		o := api.RunOptions{}
		if input == "second" {
			o.AskHuman = new(false)
		}
		run, _ := startAsking(t, c, input, o)
		e2etest.GwWait(t, c, run.RunID)
	}
	cmd := e.Command("run", "--json", "third")
	cmd.Env = append(cmd.Env, e.GatewayEnv(srv.Addr())...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agent run --json through the gateway: %v\n%s", err, out)
	}
	offered := map[string]bool{}
	for _, r := range e.Srv.Requests() {
		offered[r.LastMessage().Content] = slices.Contains(r.ToolNames(), "ask_human")
	}
	if want := map[string]bool{"first": true, "second": false, "third": false}; !maps.Equal(offered, want) {
		t.Errorf("ask_human offered by prompt: %v, want %v", offered, want)
	}
}
