package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

// TestChatScripted is agent chat with its messages on stdin, one a line:
// each is a run of one local session, its output agent run's --json, and
// the third message's request carries the first (the session's earlier
// runs are the model's prior conversation). --continue then goes on in the
// same session, and agent sessions list shows it without a gateway.
func TestChatScripted(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Hello Ada."},
		llmtest.Turn{Text: "Noted: blue."},
		llmtest.Turn{Text: "Your name is Ada."},
		llmtest.Turn{Text: "Blue."},
	)
	cmd := e.Command("chat", "--json")
	cmd.Stdin = strings.NewReader("my name is Ada\n\nmy colour is blue\nwhat is my name?\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent chat: %v", err)
	}
	evs := decodeSession(t, string(out))
	var runs []string
	sessions := map[string]bool{}
	for _, ev := range evs {
		sessions[ev.SessionID] = true
		if ev.Type == event.RunCompleted {
			runs = append(runs, ev.RunID)
		}
	}
	if len(runs) != 3 || len(sessions) != 1 || sessions[""] {
		t.Fatalf("%d runs completed in sessions %v; want 3 in one session:\n%s", len(runs), sessions, out)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	third := string(reqs[2].Body)
	for _, want := range []string{"my name is Ada", "Hello Ada.", "my colour is blue", "what is my name?"} {
		if !strings.Contains(third, want) {
			t.Errorf("the third request lacks %q: %s", want, third)
		}
	}

	// --continue goes on in the session last active, as people read it.
	cont := e.Command("chat", "--continue")
	cont.Stdin = strings.NewReader("and my colour?\n")
	var stderr strings.Builder
	cont.Stderr = &stderr
	text, err := cont.Output()
	if err != nil {
		t.Fatalf("agent chat --continue: %v: %s", err, stderr.String())
	}
	if !strings.Contains(string(text), "Blue.") {
		t.Errorf("chat --continue printed %q, want the answer", text)
	}
	var sessionID string
	for id := range sessions {
		sessionID = id
	}
	if last := string(e.Srv.Requests()[3].Body); !strings.Contains(last, "my name is Ada") {
		t.Errorf("--continue's request lacks the session's first message: %s", last)
	}
	if !strings.Contains(stderr.String(), "agent chat --session "+sessionID[:8]) {
		t.Errorf("chat's stderr does not say how to go on in %s: %s", sessionID, stderr.String())
	}
	db := e.OpenStore(t)
	s, err := db.GetSession(context.Background(), sessionID)
	if err != nil || !s.Local || s.Runs != 4 || s.Title != "my name is Ada" {
		t.Errorf("the session as stored: %+v, %v; want local, 4 runs, titled by its first message", s, err)
	}
	if list := e.Run("sessions", "list"); !strings.Contains(list.Stdout, sessionID[:8]) {
		t.Errorf("sessions list does not show the chat's session: %s %s", list.Stdout, list.Stderr)
	}
}

// TestChatScriptedStopsAtAFailure: a run that does not complete ends the
// script there, the chat exiting as that run did, and agent resume
// continues it here (a local session's run, unlike a gateway's); a session
// that does not exist is refused.
func TestChatScriptedStopsAtAFailure(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Status: 400, Body: `{"error":{"message":"bad request"}}`}, llmtest.Turn{Text: "Recovered."})
	cmd := e.Command("chat", "--json")
	cmd.Stdin = strings.NewReader("first\nsecond\n")
	out, _ := cmd.Output()
	if cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("exit %d, want 3 (the model failed)", cmd.ProcessState.ExitCode())
	}
	evs := decodeSession(t, string(out))
	if n := len(e2etest.OfType(evs, event.RunStarted)); n != 1 {
		t.Errorf("%d runs started, want 1: the script stops at the failure", n)
	}
	if res := e.Run("resume", evs[0].RunID, "--json"); res.Code != 0 || !strings.Contains(res.Stdout, "Recovered.") {
		t.Errorf("resume of the chat's failed run: exit %d: %s %s", res.Code, res.Stdout, res.Stderr)
	}
	if res := e.Run("chat", "--session", "nope"); res.Code != 2 {
		t.Errorf("chat --session of no session: exit %d, want 2: %s", res.Code, res.Stderr)
	}
}

// decodeSession parses a chat's --json stdout: only JSON lines, one
// session's events whichever run wrote them, their seqs the session's
// one gapless sequence.
func decodeSession(t *testing.T, stdout string) []event.Event {
	t.Helper()
	var evs []event.Event
	dec := event.NewDecoder(strings.NewReader(stdout))
	for {
		ev, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatalf("stdout is not a pure event stream: %v", err)
		}
		if ev.V != 1 || ev.RunID == "" || ev.SessionID == "" {
			t.Fatalf("bad envelope: %+v", ev)
		}
		if n := len(evs); n > 0 && (ev.Seq != evs[n-1].Seq+1 || ev.SessionID != evs[n-1].SessionID) {
			t.Fatalf("seq %d of session %s after %d of %s", ev.Seq, ev.SessionID, evs[n-1].Seq, evs[n-1].SessionID)
		}
		evs = append(evs, ev)
	}
}

// TestChatGatewayKilledMidTurn: a chat whose session lives in a gateway is
// killed while the model thinks about its second message; the turn
// completes in the gateway all the same, and agent chat --gateway
// --continue shows it, then goes on in the same session.
func TestChatGatewayKilledMidTurn(t *testing.T) {
	t.Parallel()
	thinking := make(chan struct{})
	e := e2etest.New(t,
		llmtest.Turn{Text: "Hello Ada."},
		llmtest.Turn{Text: "Your name is Ada.", Gate: thinking},
		llmtest.Turn{Text: "You asked my name."},
	)
	g := e.StartGateway()
	chat := e.Command("chat", "--gateway", "--json")
	chat.Env = append(chat.Env, e.GatewayEnv(g.Addr)...)
	chat.Stdin = strings.NewReader("my name is Ada\nwhat is my name?\n")
	if err := chat.Start(); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, "the second message's model request", func() bool { return e.Srv.RequestCount() == 2 })
	if err := chat.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = chat.Wait()
	close(thinking)

	db := e.OpenStore(t)
	ctx := context.Background()
	var runs []store.Run
	e2etest.WaitFor(t, "the turn to complete in the gateway", func() bool {
		ss, err := db.ListSessions(ctx, 0, false)
		if err != nil || len(ss) != 1 {
			return false
		}
		runs, err = db.ListSessionRuns(ctx, ss[0].ID)
		return err == nil && len(runs) == 2 && runs[1].Status == event.StatusCompleted
	})

	cont := e.Command("chat", "--gateway", "--continue", "--json")
	cont.Env = append(cont.Env, e.GatewayEnv(g.Addr)...)
	cont.Stdin = strings.NewReader("what did I ask?\n")
	out, err := cont.Output()
	if err != nil {
		t.Fatalf("chat --gateway --continue: %v", err)
	}
	evs := decodeSession(t, string(out))
	if evs[0].RunID != runs[1].ID || !strings.Contains(string(out), "Your name is Ada.") {
		t.Errorf("--continue does not show the turn the gateway completed first:\n%s", out)
	}
	if n := len(e2etest.OfType(evs, event.RunCompleted)); n != 2 {
		t.Errorf("%d runs completed in the output, want the one shown and the new one:\n%s", n, out)
	}
	if third := string(e.Srv.Requests()[2].Body); !strings.Contains(third, "Your name is Ada.") {
		t.Errorf("the next message's request lacks the turn completed in the gateway: %s", third)
	}
}

// TestChatSessionBusy: while one chat's run of a local session goes on, a
// second chat on the session is refused (exit 4), saying why, rather than
// both writing the session's one sequence.
func TestChatSessionBusy(t *testing.T) {
	t.Parallel()
	thinking := make(chan struct{})
	e := e2etest.New(t, llmtest.Turn{Text: "Hello.", Gate: thinking}, llmtest.Turn{Text: "Later."})
	first := e.Command("chat", "--json")
	first.Stdin = strings.NewReader("hello\n")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, "the first chat's model request", func() bool { return e.Srv.RequestCount() == 1 })
	second := e.Command("chat", "--continue")
	second.Stdin = strings.NewReader("me too\n")
	out, _ := second.CombinedOutput()
	if code := second.ProcessState.ExitCode(); code != 4 || !strings.Contains(string(out), "is busy: its run") {
		t.Errorf("a second chat on the busy session: exit %d: %s", code, out)
	}
	close(thinking)
	if err := first.Wait(); err != nil {
		t.Errorf("the first chat: %v", err)
	}
	if n := e.Srv.RequestCount(); n != 1 {
		t.Errorf("%d model requests, want the first chat's only", n)
	}
}
