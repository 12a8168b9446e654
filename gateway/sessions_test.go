package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"agent/event"
	"agent/gateway/api"
	"agent/store"
)

// TestRunStartCreatesItsSession: run.start without a session_id checks
// the run first and creates a session only for a run it accepts (a
// refused one leaves nothing behind, over WebSocket and HTTP); the
// connection is attached to the new session from its first event.
func TestRunStartCreatesItsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	for _, p := range []api.RunStartParams{
		{Input: "x", Options: api.RunOptions{MaxTurns: -1}},
		{Input: "x", Options: api.RunOptions{AllowTools: []string{"raed_file"}}},
		{Input: "x", Workspace: "/does/not/exist"},
		{Input: "x", Title: strings.Repeat("t", 201)},
		{Input: " "},
	} {
		if code := callErr(t, c, api.MethodRunStart, p); code != api.CodeInvalidOptions && code != api.CodeBadRequest {
			t.Errorf("%+v: %s, want refused", p, code)
		}
	}
	resp, body := e.request("POST", "/v1/runs", `{"input":"x","options":{"max_turns":-1}}`, e.bearer())
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /v1/runs with a bad option: %d %s", resp.StatusCode, body)
	}
	if n := len(sessionsOf(t, e)); n != 0 {
		t.Fatalf("refused runs left %d sessions", n)
	}

	run := call[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{Input: "echo first words\nand more"})
	evs := waitTerminal(t, c, run.RunID)
	checkSeqs(t, evs, 0) // attached from the session's first event
	if evs[0].SessionID != run.SessionID || finished(t, evs[len(evs)-1]).Status != event.StatusCompleted {
		t.Errorf("the run in its new session: %s", types(evs))
	}
	titled := call[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{Input: "echo hi", Title: "my title"})
	waitTerminal(t, c, titled.RunID)
	titles := map[string]string{}
	for _, s := range sessionsOf(t, e) {
		titles[s.SessionID] = s.Title
	}
	if want := map[string]string{run.SessionID: "echo first words", titled.SessionID: "my title"}; len(titles) != 2 ||
		titles[run.SessionID] != want[run.SessionID] || titles[titled.SessionID] != want[titled.SessionID] {
		t.Errorf("sessions %v, want %v", titles, want)
	}
}

// TestUntitledSessionTakesItsFirstRunsTitle: a session made without a
// title (the web view's New) is titled after the first run started in it.
func TestUntitledSessionTakesItsFirstRunsTitle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := call[api.SessionInfo](t, c, api.MethodSessionCreate, api.SessionCreateParams{}).SessionID
	waitTerminal(t, c, e.start(c, sid, "echo fix the flaky test\nsecond line").RunID)
	waitTerminal(t, c, e.start(c, sid, "echo something else").RunID)
	d := call[api.SessionDetail](t, c, api.MethodSessionGet, api.SessionParams{SessionID: sid})
	if d.Session.Title != "echo fix the flaky test" {
		t.Errorf("title %q, want the first run's first line", d.Session.Title)
	}
}

// TestSessionDelete: session.delete takes a session with its runs, and
// keeps one whose run is running or waiting, saying why.
func TestSessionDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	ctx := context.Background()

	done := e.session(c)
	ended := e.start(c, done, "echo hello")
	waitTerminal(t, c, ended.RunID)
	busy := e.session(c)
	sleeping := e.start(c, busy, "sleep")

	code := callErr(t, c, api.MethodSessionDelete, api.SessionParams{SessionID: busy})
	if code != api.CodeConflict {
		t.Errorf("deleting a session with a running run: %s, want conflict", code)
	}
	err := c.Call(ctx, api.MethodSessionDelete, api.SessionParams{SessionID: busy}, nil)
	if err == nil || !strings.Contains(err.Error(), "its run "+sleeping.RunID+" is running") {
		t.Errorf("the refusal says %v, want the run and its status", err)
	}

	res := call[api.SessionDeleteResult](t, c, api.MethodSessionDelete, api.SessionParams{SessionID: done[:8]})
	if !res.Deleted || res.SessionID != done || res.Runs != 1 {
		t.Errorf("session.delete = %+v", res)
	}
	if code := callErr(t, c, api.MethodSessionGet, api.SessionParams{SessionID: done}); code != api.CodeNotFound {
		t.Errorf("session.get after delete: %s", code)
	}
	if _, err := e.db.GetRun(ctx, ended.RunID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("its run after delete: %v", err)
	}
	if code := callErr(t, c, api.MethodRunStart, api.RunStartParams{SessionID: done, Input: "echo again"}); code != api.CodeNotFound {
		t.Errorf("run.start in the deleted session: %s, want not_found", code)
	}

	call[api.RunInfo](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: sleeping.RunID})
	call[api.SessionDeleteResult](t, c, api.MethodSessionDelete, api.SessionParams{SessionID: busy})
	if n := len(sessionsOf(t, e)); n != 0 {
		t.Errorf("%d sessions left", n)
	}
}

// TestResumable: a run's view says whether run.resume can continue it.
func TestResumable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial()
	sid := e.session(c)
	for input, want := range map[string]bool{"echo hi": false, "fail": true} {
		run := e.start(c, sid, input)
		waitTerminal(t, c, run.RunID)
		if info := call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID}); info.Resumable != want {
			t.Errorf("%s ended %s: resumable %v, want %v", input, info.Status, info.Resumable, want)
		}
	}
	run := e.start(c, sid, "sleep")
	if info := call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID}); info.Resumable {
		t.Errorf("a running run says resumable")
	}
	call[api.RunInfo](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: run.RunID, Mode: api.CancelModeInterrupt})
	if info := call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID}); !info.Resumable || info.Status != event.StatusInterrupted {
		t.Errorf("an interrupted run: %s resumable %v", info.Status, info.Resumable)
	}
}
