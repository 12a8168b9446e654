package cli

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

// The approval of a side effect across kill -9 of the CLI at every step:
// before the wait is stored, while it waits at a terminal, after the
// answer before the call, and after the call before its receipt. The
// email goes out at most once, never without an allow, and the run
// completes after resume.

func emailCall() llmtest.Turn {
	args, _ := json.Marshal(map[string]string{"to": "bob@example.com", "subject": "Release", "body": "v2 is out."})
	return llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "send_email", Arguments: args}}}
}

// mailEnv is e's environment with the mailbox and its rule.
func mailRun(e *e2etest.Env, m *e2etest.Mailbox, args ...string) e2etest.Result {
	e.T.Helper()
	r, _ := e.RunWith(e.WithMail(nil, m), args...)
	return r
}

func TestApprovalCrashMatrix(t *testing.T) {
	t.Parallel()

	t.Run("before the wait is stored", func(t *testing.T) {
		t.Parallel()
		mail := e2etest.NewMailbox(t)
		slow := emailCall()
		slow.DelayMS = 60_000 // killed while the model answers
		e := e2etest.New(t, slow, emailCall(), llmtest.Turn{Text: "sent"})
		b := e.StartWith(func(env []string) []string { return e.WithMail(env, mail) }, "run", "--json", "--ask", "effects", "email bob")
		b.WaitEvent(t, event.RunStarted)
		e2etest.WaitFor(t, "the model request", func() bool { return e.Srv.RequestCount() == 1 })
		b.Kill9(t)
		runID := b.Events[0].RunID

		if res := mailRun(e, mail, "resume", runID, "--json"); res.Code != 6 || mail.Count() != 0 {
			t.Fatalf("resume: exit %d, %d mails; want 6 (waiting) and none; stderr %s", res.Code, mail.Count(), res.Stderr)
		}
		if res := mailRun(e, mail, "approve", runID, "--resume", "--json"); res.Code != 0 {
			t.Fatalf("approve --resume: exit %d %s", res.Code, res.Stderr)
		}
		if n := mail.Count(); n != 1 {
			t.Errorf("%d mails, want 1", n)
		}
	})

	t.Run("while it waits at a terminal", func(t *testing.T) {
		t.Parallel()
		mail := e2etest.NewMailbox(t)
		e := e2etest.New(t, emailCall(), llmtest.Turn{Text: "sent"})
		line := shellCommand(e, "run", "--ask", "effects", "email bob about the release")
		line = "export AGENT_SMTP_ADDR=" + mail.Addr() + " AGENT_SMTP_FROM=agent@example.com; " + line
		capture, _ := tmuxSession(t, line)
		waitScreen(t, "the approval prompt", capture, func(s string) bool { return strings.Contains(s, "Allow send_email") })
		db := e.OpenStore(t)
		defer db.Close()
		runs, err := db.ListRuns(t.Context(), 1)
		if err != nil || len(runs) != 1 {
			t.Fatal(runs, err)
		}
		// The process that holds the run's lease is the one asking.
		_, pid, ok := store.OwnerProcess(runs[0].LeaseOwner)
		if !ok {
			t.Fatalf("run lease owner %q names no process", runs[0].LeaseOwner)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitScreen(t, "the killed run's exit", capture, func(s string) bool { return strings.Contains(s, "EXIT=137") })
		// Nobody answered: a resume asks again (the same wait), and sends
		// nothing.
		if res := mailRun(e, mail, "resume", runs[0].ID, "--json"); res.Code != 6 || mail.Count() != 0 {
			t.Fatalf("resume: exit %d, %d mails; want 6 and none; stderr %s", res.Code, mail.Count(), res.Stderr)
		}
		ws, err := db.Waits(t.Context(), runs[0].ID)
		if err != nil || len(ws) != 1 {
			t.Fatalf("waits = %+v, %v; want the one wait, asked again", ws, err)
		}
		if res := mailRun(e, mail, "approve", runs[0].ID, "--resume", "--json"); res.Code != 0 || mail.Count() != 1 {
			t.Fatalf("approve --resume: exit %d, %d mails; want 0 and one; stderr %s", res.Code, mail.Count(), res.Stderr)
		}
	})

	t.Run("after the answer, before the call", func(t *testing.T) {
		t.Parallel()
		// The answer is stored; no process drives the run: the call runs
		// on the next drive, once.
		mail := e2etest.NewMailbox(t)
		e := e2etest.New(t, emailCall(), llmtest.Turn{Text: "sent"})
		res := mailRun(e, mail, "run", "--json", "--ask", "effects", "email bob")
		if res.Code != 6 {
			t.Fatalf("exit %d, want 6", res.Code)
		}
		runID := e2etest.DecodeRunID(t, res.Stdout)
		if res := mailRun(e, mail, "approve", runID); res.Code != 0 || mail.Count() != 0 {
			t.Fatalf("approve: exit %d, %d mails", res.Code, mail.Count())
		}
		for range 2 { // the second resume finds the run completed
			mailRun(e, mail, "resume", runID, "--json")
		}
		if n := mail.Count(); n != 1 {
			t.Errorf("%d mails, want 1", n)
		}
	})

	t.Run("after the call, before the receipt", func(t *testing.T) {
		t.Parallel()
		mail := e2etest.NewMailbox(t)
		e := e2etest.New(t, emailCall(), llmtest.Turn{Text: "it may have been sent"})
		res := mailRun(e, mail, "run", "--json", "--ask", "effects", "email bob")
		runID := e2etest.DecodeRunID(t, res.Stdout)
		if res := mailRun(e, mail, "approve", runID); res.Code != 0 {
			t.Fatalf("approve: exit %d %s", res.Code, res.Stderr)
		}
		received := make(chan struct{})
		block := make(chan struct{})
		// Under its lock: the server's goroutine that reads the hook is
		// started by another process's connection, which the race
		// detector does not see as ordered after this.
		mail.Mu.Lock()
		mail.AfterData = func() { close(received); <-block }
		mail.Mu.Unlock()
		t.Cleanup(func() { close(block) })
		b := e.StartWith(func(env []string) []string { return e.WithMail(env, mail) }, "resume", runID, "--json")
		<-received // the message is out; the agent waits for the server's 250
		b.Kill9(t)
		mail.Mu.Lock()
		mail.AfterData = nil
		mail.Mu.Unlock()
		res = mailRun(e, mail, "resume", runID, "--json")
		if res.Code != 0 {
			t.Fatalf("resume after the kill: exit %d %s", res.Code, res.Stderr)
		}
		if n := mail.Count(); n != 1 {
			t.Errorf("%d mails, want 1 (an unknown outcome is never sent again by itself)", n)
		}
	})
}
