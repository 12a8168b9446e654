package web

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"agent/e2e/internal/e2etest"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/store"
)

// TestWebSessions: a run started with no session selected gets a session
// titled after it; New makes a session that says so and takes its first
// run's title; a fork says what it was forked from; Delete session asks,
// then deletes the session with its runs, and a session whose run is
// running is kept, the page saying why.
func TestWebSessions(t *testing.T) {
	e := e2etest.New(t,
		llmtest.Turn{When: "notes", Text: "Notes written."},
		llmtest.Turn{When: "second", Text: "Second thoughts had."},
		llmtest.Turn{When: "forever", Text: "Working, one piece at a time, until stopped.", Hang: true},
	)
	srv, db := e.InProcessGateway(nil)
	b := newBrowser(t)
	b.signIn(srv.Addr())

	b.startRun("write the notes\nin notes.txt", false)
	b.until("the run in a session of its own", `document.querySelector('.end[data-status="completed"]') !== null &&
		document.getElementById('session-title').textContent === 'write the notes' &&
		document.querySelector('#sessions .item.selected .title')?.textContent === 'write the notes'`)
	first := eval[string](b, `sessionStorage.getItem('agent.selected')`)

	b.do("a new session", chromedp.Click(chromedp.ID("new-session")))
	b.until("it says it is new", `document.getElementById('session-title').textContent === 'New session' &&
		document.querySelector('#sessions .item.selected .title')?.textContent === 'New session'`)
	b.startRun("second thoughts", false)
	b.until("titled by its first run", `document.querySelector('.end[data-status="completed"]') !== null &&
		document.getElementById('session-title').textContent === 'second thoughts' &&
		document.querySelector('#sessions .item.selected .title')?.textContent === 'second thoughts'`)
	second := eval[string](b, `sessionStorage.getItem('agent.selected')`)

	c := e2etest.GwDial(t, srv.Addr())
	fork := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionFork, api.SessionForkParams{SessionID: first})
	b.do("refresh the list", chromedp.Click(chromedp.ID("refresh")))
	item := func(id string) string { return `#sessions .item[data-session=` + jsString(id) + `]` }
	b.until("the fork, told apart", `(document.querySelector(`+jsString(item(fork.SessionID)+" .fork")+`)?.textContent || '') === 'fork of write the notes' &&
		document.querySelector(`+jsString(item(fork.SessionID))+`).dataset.fork === `+jsString(first)+` &&
		document.querySelector(`+jsString(item(first)+" .fork")+`) === null`)
	b.screenshot("sessions-fork")

	// Delete: asked first; kept when declined.
	b.do("select the first session", chromedp.Click(chromedp.CSS(item(first))))
	b.until("selected", `document.getElementById('session-title').textContent === 'write the notes'`)
	b.do("ask to delete", chromedp.Click(chromedp.ID("delete-session")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if text := eval[string](b, `document.getElementById('confirm-text').textContent`); !strings.Contains(text, "1 run") {
		t.Errorf("the confirmation says %q", text)
	}
	b.do("keep it", chromedp.Click(chromedp.ID("confirm-no")), chromedp.WaitNotVisible(chromedp.ID("confirm")))
	if _, err := db.GetSession(context.Background(), first); err != nil {
		t.Fatalf("declining deleted the session: %v", err)
	}
	b.do("delete", chromedp.Click(chromedp.ID("delete-session")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("gone from the page", `document.querySelector(`+jsString(item(first))+`) === null &&
		document.getElementById('session-title').textContent === 'No session selected' &&
		document.querySelectorAll('.run').length === 0 && document.getElementById('delete-session').hidden`)
	if _, err := db.GetSession(context.Background(), first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the session in the store after delete: %v", err)
	}
	b.until("the fork stays, now on its own", `document.querySelector(`+jsString(item(fork.SessionID))+`) !== null &&
		document.querySelector(`+jsString(item(fork.SessionID)+" .fork")+`) === null`)

	// A session whose run runs is kept, saying why.
	b.do("select the second session", chromedp.Click(chromedp.CSS(item(second))))
	b.until("selected", `document.getElementById('session-title').textContent === 'second thoughts'`)
	b.startRun("work forever", false)
	b.until("running", `document.querySelector('.run[data-status="running"]') !== null`)
	b.do("delete", chromedp.Click(chromedp.ID("delete-session")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("refused", `!document.getElementById('session-error').hidden`)
	if msg := eval[string](b, `document.getElementById('session-error').textContent`); !strings.Contains(msg, "is running") {
		t.Errorf("the refusal says %q, want why", msg)
	}
	if _, err := db.GetSession(context.Background(), second); err != nil {
		t.Errorf("a session with a running run was deleted: %v", err)
	}
	b.screenshot("sessions-delete-refused")
	b.do("cancel the run", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("cancelled", `document.querySelector('.end[data-status="cancelled"]') !== null`)
	b.tokenNeverInURL(e2etest.GwToken)
}
