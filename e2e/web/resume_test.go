package web

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
)

// TestWebResume: a run interrupted from the page says it can be resumed
// and has a Resume button, which continues it where it stopped (run.resume)
// until it completes; a run that failed at its turn limit has one too, and
// goes on with a fresh budget; a completed run has none.
func TestWebResume(t *testing.T) {
	e := e2etest.New(t,
		llmtest.Turn{When: "report", Text: "Drafting the report, slowly, until interrupted.", Hang: true},
		llmtest.Turn{When: "report", Text: "The report is done."},
		llmtest.Turn{When: "count", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo one"}`)}},
		llmtest.Turn{When: "count", Text: "Counted to one."},
	)
	srv, db := e.InProcessGateway(nil)
	b := newBrowser(t)
	b.signIn(srv.Addr())

	b.startRun("write the report", false)
	b.until("text while streaming", `document.querySelector('.run[data-status="running"] .assistant[data-streaming="true"]') !== null &&
		!document.getElementById('run-actions').hidden`)
	runID := eval[string](b, `document.querySelector('.run').dataset.run`)
	run := `.run[data-run=` + jsString(runID) + `]`
	b.do("interrupt", chromedp.Click(chromedp.ID("interrupt")))
	b.until("interrupted, with Resume", `document.querySelector(`+jsString(run+` .end[data-status="interrupted"] button.resume`)+`) !== null &&
		!document.getElementById('resume-actions').hidden && document.getElementById('run-actions').hidden`)
	if end := eval[string](b, `document.querySelector(`+jsString(run+" .end")+`).textContent`); !strings.Contains(end, "resume to continue") {
		t.Errorf("the end says %q", end)
	}
	b.screenshot("resume-offered")

	b.do("resume", chromedp.Click(chromedp.ID("resume")))
	b.until("the resumed run completed", `document.querySelector(`+jsString(run+` .end[data-status="completed"]`)+`) !== null &&
		document.getElementById('run-status').textContent === 'completed'`)
	if n := eval[int](b, `document.querySelectorAll(`+jsString(run+" button.resume")+`).length`); n != 0 {
		t.Errorf("%d Resume buttons left once the run went on", n)
	}
	if !eval[bool](b, `document.getElementById('resume-actions').hidden`) {
		t.Error("a completed run offers Resume")
	}
	if text := eval[string](b, `document.querySelector(`+jsString(run)+`).textContent`); !strings.Contains(text, "The report is done.") || !strings.Contains(text, "resumed") {
		t.Errorf("the resumed run in the page: %q", text)
	}
	if r, err := db.GetRun(context.Background(), runID); err != nil || r.Status != event.StatusCompleted {
		t.Errorf("the run in the store: %+v %v", r, err)
	}

	// A run that failed at its turn limit, started by another client in
	// the same session.
	c := e2etest.GwDial(t, srv.Addr())
	sid := eval[string](b, `sessionStorage.getItem('agent.selected')`)
	failed := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "count to one", Options: api.RunOptions{MaxTurns: 1}})
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, failed.RunID)); end.Event != event.RunFailed {
		t.Fatalf("the limited run ended %s", end.Event)
	}
	frun := `.run[data-run=` + jsString(failed.RunID) + `]`
	b.until("the failed run, with Resume", `document.querySelector(`+jsString(frun+` .end[data-status="failed"][data-reason="max_turns"] button.resume`)+`) !== null`)
	b.do("resume it from its end", chromedp.Click(chromedp.CSS(frun+" .end button.resume")))
	b.until("it completed on a fresh budget", `document.querySelector(`+jsString(frun+` .end[data-status="completed"]`)+`) !== null &&
		document.getElementById('run-id').title === `+jsString(failed.RunID))
	b.screenshot("resumed")
	b.tokenNeverInURL(e2etest.GwToken)
}
