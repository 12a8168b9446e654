package web

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/supervisor"
)

// TestWebInbox: the page's inbox lists, live, every run that waits for a
// person, in sessions it does not follow too: the tool with its full
// arguments, the question with its options, the run's prompt and what it
// did before it asked. Allow always lets the rule's next call run without
// asking; an option answers a question; Deny sends its reason to the
// model; a wait answered elsewhere leaves the inbox by itself, and one
// answered elsewhere just before a click is refused naming the first
// answer.
func TestWebInbox(t *testing.T) {
	touch := func(when, file string) llmtest.Turn {
		return llmtest.Turn{When: when, ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"touch `+file+`"}`)}}
	}
	e := e2etest.New(t,
		touch("push", "pushed"), touch("push", "tagged"), llmtest.Turn{When: "push", Text: "Pushed and tagged."},
		llmtest.Turn{When: "colour", ToolCalls: []llmtest.Call{e2etest.ToolCall("ask_human", `{"question":"Which colour for the logo?","options":["blue","red"]}`)}},
		llmtest.Turn{When: "colour", Text: "Blue it is."},
		touch("wipe", "wiped"), llmtest.Turn{When: "wipe", Text: "Not wiped."},
		touch("elsewhere", "elsewhere"), llmtest.Turn{When: "elsewhere", Text: "Done elsewhere."},
		touch("raced", "raced"), llmtest.Turn{When: "raced", Text: "Raced."},
		touch("phone", "phone"),
	)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	b := newBrowser(t)
	b.signIn(srv.Addr())
	if !eval[bool](b, `document.getElementById('inbox-panel').hidden`) {
		t.Error("the inbox shows with nothing waiting")
	}
	ask := api.RunOptions{Ask: []string{"bash(touch *)"}}
	start := func(input string, o api.RunOptions) (string, event.RunWaitingData) {
		t.Helper()
		sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
		run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: input, Options: o})
		_, w := e2etest.GwWaiting(t, c, run.RunID, 0)
		return run.RunID, w
	}
	card := func(runID string) string { return `#inbox .wait[data-run=` + jsString(runID) + `]` }
	completed := func(runID string) []api.EventFrame {
		t.Helper()
		evs := e2etest.GwWait(t, c, runID)
		if end := e2etest.LastFrame(evs); end.Event != event.RunCompleted {
			t.Fatalf("run %s ended %s", runID, end.Event)
		}
		return evs
	}

	// An approval, shown in full with the run's context; allowed always.
	push, _ := start("push the release", ask)
	b.until("the approval in the inbox", `(document.querySelector(`+jsString(card(push)+` pre.args`)+`)?.textContent || '').includes('touch pushed') &&
		document.getElementById('inbox-count').textContent === '1' && document.title.startsWith('(1)')`)
	got := eval[map[string]string](b, `(() => { const c = document.querySelector(`+jsString(card(push))+`); return {
		tool: c.querySelector('.tool-name').textContent, prompt: c.querySelector('.prompt-line').textContent,
		rule: c.querySelector('.ask code').textContent, kind: c.dataset.kind }; })()`)
	if got["tool"] != "bash" || got["prompt"] != "push the release" || got["rule"] != "bash(touch *)" || got["kind"] != "approval" {
		t.Errorf("the approval's card shows %v", got)
	}
	b.until("the run's context", `(document.querySelector(`+jsString(card(push)+` .ctx .user`)+`)?.textContent || '') === 'push the release'`)
	if unnamed := eval[int](b, `[...document.querySelectorAll('#inbox input, #inbox textarea, #inbox button')].filter(e =>
		!(e.getAttribute('aria-label') || e.labels?.length || e.textContent.trim())).length`); unnamed != 0 {
		t.Errorf("%d controls of the inbox have no accessible name", unnamed)
	}
	b.screenshot("inbox-approval")
	b.do("allow always", chromedp.Click(chromedp.CSS(card(push)+` button.allow-always`)))
	evs := completed(push)
	if n := len(e2etest.OfFrames(evs, event.RunWaiting)); n != 1 {
		t.Errorf("the run waited %d times; allowed always, its second touch should not ask", n)
	}
	for _, f := range e2etest.OfFrames(evs, event.WaitResolved) {
		var res event.WaitResolvedData
		if json.Unmarshal(f.Data, &res) != nil || res.Via != event.ViaWeb || !res.Always {
			t.Errorf("wait.resolved = %s, want allowed always via web", f.Data)
		}
	}
	for _, f := range []string{"pushed", "tagged"} {
		if _, err := os.Stat(filepath.Join(e.Workspace, f)); err != nil {
			t.Errorf("%s was not touched", f)
		}
	}
	b.until("the answered approval gone", `document.querySelector(`+jsString(card(push))+`) === null && document.getElementById('inbox-panel').hidden`)

	// A question with options: one click answers it.
	colour, _ := start("pick a colour", api.RunOptions{})
	b.until("the question", `(document.querySelector(`+jsString(card(colour)+` .question`)+`)?.textContent || '') === 'Which colour for the logo?' &&
		document.querySelectorAll(`+jsString(card(colour)+` button.option`)+`).length === 2`)
	b.screenshot("inbox-question")
	b.do("answer blue", chromedp.Click(chromedp.CSS(card(colour)+` button.option`)))
	completed(colour)

	// A denial, with its reason for the model.
	wipe, _ := start("wipe the disk", ask)
	b.do("deny with a reason",
		chromedp.WaitVisible(chromedp.CSS(card(wipe)+` input.reason`)),
		chromedp.SendKeys(chromedp.CSS(card(wipe)+` input.reason`), "not today"),
		chromedp.Click(chromedp.CSS(card(wipe)+` button.deny`)))
	b.until("the denial said", `(document.querySelector(`+jsString(card(wipe)+` .outcome`)+`)?.textContent || '').startsWith('Denied')`)
	completed(wipe)
	if _, err := os.Stat(filepath.Join(e.Workspace, "wiped")); err == nil {
		t.Error("the denied call ran")
	}
	for _, told := range []string{"Answer (web): blue", "denied (web): not today"} {
		if !e2etest.ModelWasTold(e.Srv, told) {
			t.Errorf("the model was not told %q", told)
		}
	}

	// Answered through the API: the card goes by itself.
	elsewhere, w := start("answer it elsewhere", ask)
	b.until("the card", `document.querySelector(`+jsString(card(elsewhere))+`) !== null`)
	if _, code := e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: elsewhere, WaitID: w.WaitID, Decision: supervisor.DecideAllow}); code != "" {
		t.Fatalf("wait.answer: %s", code)
	}
	b.until("the card gone without a reload", `document.querySelector(`+jsString(card(elsewhere))+`) === null`)
	completed(elsewhere)

	// Answered elsewhere while the page still shows it: the click is
	// refused, naming the first answer.
	raced, w := start("raced answers", ask)
	b.until("the card", `document.querySelector(`+jsString(card(raced))+`) !== null`)
	eval[bool](b, `(() => { inbox.active = false; clearTimeout(inbox.timer); return true; })()`) // hold the page's view still
	if _, code := e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: raced, WaitID: w.WaitID, Decision: supervisor.DecideDeny, Reason: "first"}); code != "" {
		t.Fatalf("wait.answer: %s", code)
	}
	b.do("allow too late", chromedp.Click(chromedp.CSS(card(raced)+` button.allow`)))
	b.until("the refusal", `(document.querySelector(`+jsString(card(raced)+` .error`)+`)?.textContent || '').includes('already answered (denied')`)
	b.screenshot("inbox-already-answered")
	completed(raced)
	if _, err := os.Stat(filepath.Join(e.Workspace, "raced")); err == nil {
		t.Error("the call denied first ran")
	}
	eval[bool](b, `(() => { startInbox(); return true; })()`)
	b.until("the inbox empty", `document.getElementById('inbox-panel').hidden`)

	// On a phone the inbox fits the screen.
	phone, _ := start("check the phone", ask)
	b.do("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.until("the card", `document.querySelector(`+jsString(card(phone))+`) !== null`)
	if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("on a phone the page with the inbox is %d px wider than the screen", w)
	}
	b.pageScreenshot("inbox-phone")
	b.tokenNeverInURL(e2etest.GwToken)
}
