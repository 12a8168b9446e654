package gateway_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/store"
)

// linkedWait records a run that waits and a link to its wait.
func (e *env) linkedWait(runID string, w event.RunWaitingData, token string) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.db.CreateRun(ctx, &store.Run{ID: runID, Prompt: "release it", Workspace: e.ws}, "", 0); err != nil {
		e.t.Fatal(err)
	}
	w.Until = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	w.OnTimeout = event.OnTimeoutDeny
	ev := event.New(event.RunWaiting, w)
	ev.RunID, ev.Seq = runID, 1
	if err := e.db.AppendEvents(ctx, []event.Event{ev}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.db.CreateWaitLink(ctx, token, runID, w.WaitID, time.Now().Add(time.Hour)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) decideByLink(token string, form url.Values, origin bool) (int, string) {
	e.t.Helper()
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if origin {
		h["Origin"] = e.origin()
	}
	resp, body := e.request(http.MethodPost, "/w/"+token, form.Encode(), h)
	return resp.StatusCode, body
}

func (e *env) resolution(runID string) *event.WaitResolvedData {
	e.t.Helper()
	ws, err := e.db.Waits(context.Background(), runID)
	if err != nil || len(ws) != 1 {
		e.t.Fatalf("waits: %+v, %v", ws, err)
	}
	return ws[0].Resolution
}

// A question's link shows it with its options and takes an answer; a
// decision that does not fit the wait, an empty answer or a POST without
// the page's Origin decides nothing and leaves the link as it was; an
// approval's link takes a denial with its reason. The page is never
// cached and runs no script.
func TestLinkDecidesQuestionsAndDenials(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.linkedWait("run-q", event.RunWaitingData{WaitID: "w-q", Kind: event.WaitQuestion, Question: "Which branch?", Options: []string{"main", "dev"}}, "token-q")

	resp, body := e.request(http.MethodGet, "/w/token-q", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Which branch?") || !strings.Contains(body, `value="dev"`) || !strings.Contains(body, "release it") {
		t.Fatalf("GET: %d\n%s", resp.StatusCode, body)
	}
	for h, want := range map[string]string{"Cache-Control": "no-store", "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "form-action 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(body, "<script") {
		t.Error("the page has a script")
	}

	for _, bad := range []struct {
		form   url.Values
		origin bool
		status int
	}{
		{url.Values{"decision": {"answer"}, "answer": {"dev"}}, false, http.StatusForbidden},
		{url.Values{"decision": {"allow"}}, true, http.StatusBadRequest},
		{url.Values{"decision": {"answer"}, "answer": {"  "}}, true, http.StatusBadRequest},
	} {
		if code, body := e.decideByLink("token-q", bad.form, bad.origin); code != bad.status {
			t.Errorf("POST %v (origin %v): %d, want %d\n%s", bad.form, bad.origin, code, bad.status, body)
		}
	}
	if res := e.resolution("run-q"); res != nil {
		t.Fatalf("a refused POST decided: %+v", res)
	}
	if code, body := e.decideByLink("token-q", url.Values{"decision": {"answer"}, "answer": {"dev"}}, true); code != http.StatusOK || !strings.Contains(body, "Answer sent") {
		t.Fatalf("answer: %d\n%s", code, body)
	}
	if res := e.resolution("run-q"); res == nil || res.Outcome != event.WaitAnswered || res.Answer != "dev" || res.Via != event.ViaLink {
		t.Fatalf("resolution %+v, want answered dev via link", res)
	}

	e.linkedWait("run-a", event.RunWaitingData{WaitID: "w-a", Kind: event.WaitApproval, Tool: "bash", Args: []byte(`{"command":"make release"}`)}, "token-a")
	if code, body := e.decideByLink("token-a", url.Values{"decision": {"deny"}, "reason": {"not before Monday"}}, true); code != http.StatusOK || !strings.Contains(body, "Denied") {
		t.Fatalf("deny: %d\n%s", code, body)
	}
	if res := e.resolution("run-a"); res == nil || res.Outcome != event.WaitDenied || res.Reason != "not before Monday" {
		t.Fatalf("resolution %+v, want denied with the reason", res)
	}
	if code, _ := e.decideByLink("token-a", url.Values{"decision": {"allow"}}, true); code != http.StatusGone {
		t.Errorf("a second use: %d, want 410", code)
	}
}
