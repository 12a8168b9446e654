package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/store"
)

// One-decision links (docs/PROTOCOL.md#one-decision-links): a run waits
// for approval, its notification carries PUBLIC_URL/w/TOKEN, and the link
// decides it from a browser that never signed in: once, by POST from its
// own page, until the wait's deadline.

// linkConfig makes every run ask before bash, within timeout, and notify
// hook with a link to the gateway at base.
func linkConfig(e *e2etest.Env, base, timeout string, hook *e2etest.Webhook) {
	e.WriteConfig(fmt.Sprintf(`public_url = %q
[approvals]
ask = ["bash"]
timeout = %q

[[notify]]
on = ["waiting"]
webhook = %q
`, base, timeout, hook.URL))
}

// startLinkedRun starts a run over HTTP and returns it with the link its
// waiting notification carried.
func startLinkedRun(t *testing.T, base, input string, hook *e2etest.Webhook) (runID, link string) {
	t.Helper()
	var res api.RunStartResult
	if code := e2etest.HTTPJSON(t, http.MethodPost, base+"/v1/runs", fmt.Sprintf(`{"input":%q}`, input), &res); code != http.StatusAccepted {
		t.Fatalf("start: %d", code)
	}
	e2etest.WaitFor(t, "its waiting notification", func() bool {
		for _, m := range hook.Messages(t) {
			if m["run_id"] == res.RunID {
				link, _ = m["link"].(string)
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(link, base+"/w/") {
		t.Fatalf("link = %q, want %s/w/TOKEN", link, base)
	}
	return res.RunID, link
}

// submit clicks the button id and waits for the page its form's POST
// answers with.
func (b *browser) submit(what, id string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, webStep)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.ID(id)))); err != nil {
		b.fail(what, err)
	}
}

func openWait(t *testing.T, db *store.DB, runID string) *store.Wait {
	t.Helper()
	ws, err := db.Waits(context.Background(), runID)
	if err != nil || len(ws) != 1 {
		t.Fatalf("waits of %s: %+v, %v", runID, ws, err)
	}
	return &ws[0]
}

// status is the HTTP status a request gets, without a browser (a link
// preview, a script).
func status(t *testing.T, method, target string, header map[string]string, form url.Values) int {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestOneDecisionLink: the link's page shows the run, the tool and its
// arguments without a sign-in; opening it (or a preview's GET) decides
// nothing; a forged token, the token on any other route, and a POST from
// another site's page are refused; Allow decides once, the run goes on
// and does the call; the same link is then refused.
func TestOneDecisionLink(t *testing.T) {
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"touch pushed"}`)}},
		llmtest.Turn{Text: "Pushed."},
	)
	hook := e2etest.NewWebhook(t)
	srv, db := e.InProcessGateway(nil)
	base := "http://" + srv.Addr()
	linkConfig(e, base, "1h", hook)
	runID, link := startLinkedRun(t, base, "push the branch", hook)
	token := strings.TrimPrefix(link, base+"/w/")
	b := newBrowser(t)

	b.do("open a forged link", chromedp.Navigate(base+"/w/"+strings.Repeat("A", len(token))), chromedp.WaitVisible(chromedp.ID("title")))
	if got := eval[string](b, `document.getElementById('title').textContent`); got != "Unknown link" {
		t.Errorf("a forged link shows %q", got)
	}

	b.do("open the link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("allow")))
	b.screenshot("link-approval")
	if tool, args := eval[string](b, `document.getElementById('tool').textContent`), eval[string](b, `document.getElementById('args').textContent`); tool != "bash" || !strings.Contains(args, `"command": "touch pushed"`) {
		t.Errorf("the page shows tool %q, arguments %q", tool, args)
	}
	if got := eval[string](b, `document.getElementById('run').textContent`); got != runID {
		t.Errorf("the page shows run %q, want %s", got, runID)
	}
	if code := status(t, http.MethodGet, link, nil, nil); code != http.StatusOK {
		t.Errorf("a preview's GET: %d", code)
	}
	if w := openWait(t, db, runID); w.Resolution != nil {
		t.Fatalf("opening the link decided: %+v", w.Resolution)
	}
	for _, probe := range []struct{ method, path string }{{"GET", "/v1/waiting"}, {"GET", "/v1/runs/" + runID}, {"POST", "/v1/runs/" + runID + "/waits/" + openWait(t, db, runID).Waiting.WaitID}} {
		if code := status(t, probe.method, base+probe.path, map[string]string{"Authorization": "Bearer " + token}, nil); code != http.StatusUnauthorized {
			t.Errorf("%s %s with the link's token: %d, want 401", probe.method, probe.path, code)
		}
	}

	// Another site's page posts the decision to the link.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>evil</title>
<form method="post" action=%q><input type="hidden" name="decision" value="allow"><button id="go">Win a prize</button></form>`, link)
	}))
	defer evil.Close()
	b.do("visit another site", chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.ID("go")))
	b.submit("post from it", "go")
	if got := eval[string](b, `document.getElementById('title').textContent`); got != "Refused" {
		t.Errorf("another site's post shows %q, want Refused", got)
	}
	if w := openWait(t, db, runID); w.Resolution != nil {
		t.Fatalf("another site's post decided: %+v", w.Resolution)
	}

	b.do("open the link again", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("allow")))
	b.submit("allow", "allow")
	if got := eval[string](b, `document.getElementById('title').textContent`); got != "Allowed" {
		t.Errorf("after Allow the page shows %q", got)
	}
	b.screenshot("link-allowed")
	w := openWait(t, db, runID)
	if w.Resolution == nil || w.Resolution.Outcome != event.WaitAllowed || w.Resolution.Via != event.ViaLink {
		t.Fatalf("resolution = %+v, want allowed via link", w.Resolution)
	}
	e2etest.WaitLong(t, "the run to go on and complete", time.Minute, func() bool {
		r, err := db.GetRun(context.Background(), runID)
		return err == nil && r.Status == event.StatusCompleted
	})
	if _, err := os.Stat(filepath.Join(e.Workspace, "pushed")); err != nil {
		t.Errorf("the allowed call did not run: %v", err)
	}

	b.do("use the link again", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("title")))
	if got := eval[string](b, `document.getElementById('note').textContent`); !strings.Contains(got, "used already") {
		t.Errorf("a used link says %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll('button').length`); n != 0 {
		t.Errorf("a used link shows %d buttons", n)
	}
	if code := status(t, http.MethodPost, link, map[string]string{"Origin": base}, url.Values{"decision": {"deny"}}); code != http.StatusGone {
		t.Errorf("a second POST: %d, want 410", code)
	}
	if w := openWait(t, db, runID); w.Resolution.Outcome != event.WaitAllowed {
		t.Errorf("the second use changed the answer: %+v", w.Resolution)
	}
}

// TestExpiredLink: once the wait's deadline has passed (and the deadline
// denied the call), its link shows so and decides nothing.
func TestExpiredLink(t *testing.T) {
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"touch late"}`)}},
		llmtest.Turn{Text: "It was not allowed."},
	)
	hook := e2etest.NewWebhook(t)
	srv, db := e.InProcessGateway(nil)
	base := "http://" + srv.Addr()
	linkConfig(e, base, "2s", hook)
	runID, link := startLinkedRun(t, base, "push late", hook)
	e2etest.WaitLong(t, "the deadline to pass", time.Minute, func() bool {
		return openWait(t, db, runID).Resolution != nil
	})
	if w := openWait(t, db, runID); w.Resolution.Outcome != event.WaitTimedOut {
		t.Fatalf("resolution %+v, want timed_out", w.Resolution)
	}
	b := newBrowser(t)
	b.do("open the expired link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("title")))
	b.screenshot("link-expired")
	if got := eval[string](b, `document.getElementById('note').textContent`); !strings.Contains(got, "expired") {
		t.Errorf("an expired link says %q", got)
	}
	if code := status(t, http.MethodPost, link, map[string]string{"Origin": base}, url.Values{"decision": {"allow"}}); code != http.StatusGone {
		t.Errorf("a POST after the deadline: %d, want 410", code)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "late")); err == nil {
		t.Error("the call ran although nobody allowed it in time")
	}
}
