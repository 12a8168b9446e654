package harness

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// Side effects end to end: a real SMTP server (go-smtp) and a fake Slack
// API in this process, the agent binary in others, and kill -9 at the
// worst moments. The property: at most one message per intended effect,
// and exactly one where the send happened.

func emailTurn(to, subject, body string) llmtest.Turn {
	args, _ := json.Marshal(map[string]string{"to": to, "subject": subject, "body": body})
	return llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "send_email", Arguments: args}}}
}

// runnerChild waits for the `agent runner` child of a harness parent.
func runnerChild(t *testing.T, parent int) int {
	t.Helper()
	var found int
	e2etest.WaitFor(t, "the runner child", func() bool {
		found = e2etest.FindRunnerChild(parent)
		return found != 0
	})
	return found
}

const notifyPlan = `{"objective":"Tell Bob","phases":[
	{"id":"notify","instructions":"Email bob@example.com the status.","max_attempts":2,
	 "evidence":{"type":"receipt","receipts":["email_sent"]}}]}`

// A retried attempt asks for the same email again, reworded: it is not
// sent twice, the model is told the earlier one stands (not that this one
// went out), and the receipt from attempt 1 still proves the phase.
func TestEffectRetriedPhaseSendsOnce(t *testing.T) {
	t.Parallel()
	mail := e2etest.NewMailbox(t)
	e := e2etest.NewHarness(t,
		emailTurn("bob@example.com", "Status", "All green."),
		llmtest.Turn{Text: "Emailed Bob."}, // verification fails: report.md is missing
		emailTurn("Bob <BOB@example.com>", "Status", "All green, resending to be sure."),
		e2etest.WriteTurn("report.md", "# Status\n"),
		llmtest.Turn{Text: "Report written; the email had already gone out."},
	)
	planPath := e.WritePlan(t, `{"objective":"Tell Bob","phases":[
		{"id":"notify","instructions":"Email Bob and write report.md.",
		 "evidence":{"type":"hybrid","artifacts":["report.md"],"receipts":["email_sent"]}}]}`)
	cmd := e.Command("harness", "--json", "--plan-file", planPath)
	cmd.Env = e.WithMail(cmd.Env, mail)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	evs := e2etest.DecodeEvents(t, string(out))
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" {
		t.Fatalf("final = %+v", fin)
	}
	if n := mail.Count(); n != 1 {
		t.Errorf("the mailbox has %d messages, want 1", n)
	}
	var again event.ToolCompletedData
	for _, ev := range e2etest.OfType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		if d.Name == "send_email" && ev.Attempt == 2 {
			again = d
		}
	}
	if again.OK || !strings.Contains(again.Output, "already sent in this phase with different content") {
		t.Errorf("attempt 2's send_email = %+v, want a refusal: it was sent earlier with another body", again)
	}
	if n := len(e2etest.OfType(evs, event.ReceiptRecorded)); n != 1 {
		t.Errorf("%d receipt.recorded events, want 1", n)
	}
	if !strings.Contains(mail.Msgs[0], "Message-Id: <send_email-") && !strings.Contains(mail.Msgs[0], "Message-ID: <send_email-") {
		t.Errorf("Message-ID not derived from the key:\n%s", mail.Msgs[0])
	}
}

// kill -9 of the child right after the server accepted the message and
// before the child could report it: the send happened once, is never
// repeated, and the run says clearly that the outcome is unknown.
func TestEffectChildKilledAfterSend(t *testing.T) {
	t.Parallel()
	mail := e2etest.NewMailbox(t)
	e := e2etest.NewHarness(t,
		emailTurn("bob@example.com", "Status", "All green."), // attempt 1: the child dies in this send
		emailTurn("bob@example.com", "Status", "All green."), // attempt 2: asks again
		llmtest.Turn{Text: "I could not confirm the email."},
		emailTurn("bob@example.com", "Status", "All green."), // after resume: asks again
		llmtest.Turn{Text: "Still unknown."},
		llmtest.Turn{Text: "Still unknown."},
	)
	cmd := e.Command("harness", "--json", "--plan-file", e.WritePlan(t, notifyPlan))
	cmd.Env = e.WithMail(cmd.Env, mail)
	var out strings.Builder
	cmd.Stdout = &out
	// The child is found when the message arrives, while it waits for the
	// server's reply: it may live too briefly to be seen any earlier.
	var parent atomic.Int64
	mail.Mu.Lock()
	mail.AfterData = func() {
		if child := e2etest.FindRunnerChild(int(parent.Load())); child != 0 {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	}
	mail.Mu.Unlock()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	parent.Store(int64(cmd.Process.Pid))
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("harness: %v (exit %d), want exit 1", err, code)
	}
	evs := e2etest.DecodeEvents(t, out.String())
	if n := mail.Count(); n != 1 {
		t.Fatalf("the mailbox has %d messages, want exactly 1", n)
	}
	failed := e2etest.OfType(evs, event.PhaseFailed)
	if len(failed) != 2 {
		t.Fatalf("%d phase.failed, want 2", len(failed))
	}
	var first, last event.PhaseData
	_ = failed[0].Decode(&first)
	_ = failed[1].Decode(&last)
	if first.Status != "crashed" {
		t.Errorf("attempt 1 = %+v, want crashed", first)
	}
	if !strings.Contains(last.Reason, "unknown outcome") || !strings.Contains(last.Reason, "--resend-unknown") {
		t.Errorf("attempt 2's reason does not explain the unknown outcome: %s", last.Reason)
	}
	runID := evs[0].RunID
	show := e.Run("runs", "show", runID)
	if !strings.Contains(show.Stdout, "receipt email_sent unknown") || !strings.Contains(show.Stdout, "outcome unknown") {
		t.Errorf("runs show does not report the unknown outcome:\n%s", show.Stdout)
	}
	// Resuming without --resend-unknown still sends nothing.
	res := e.Run("resume", runID, "--json")
	if res.Code != 1 || mail.Count() != 1 {
		t.Errorf("resume: exit %d, %d messages; want exit 1 and still 1 message", res.Code, mail.Count())
	}
}

// kill -9 of the parent right after it recorded the receipt: resume
// restarts the phase, the model asks again, and nothing is sent again.
func TestEffectParentKilledAfterReceipt(t *testing.T) {
	t.Parallel()
	mail := e2etest.NewMailbox(t)
	slow := llmtest.Turn{Text: "Emailed Bob.", Gate: make(chan struct{})} // held: the parent dies while this is pending
	e := e2etest.NewHarness(t,
		emailTurn("bob@example.com", "Status", "All green."),
		slow,
		emailTurn("bob@example.com", "Status", "All green."),
		llmtest.Turn{Text: "It had already been sent."},
	)
	planPath := e.WritePlan(t, notifyPlan)
	b := e.StartWith(func(env []string) []string { return e.WithMail(env, mail) }, "harness", "--json", "--plan-file", planPath)
	runID := b.WaitEvent(t, event.RunStarted).RunID
	b.WaitEvent(t, event.ReceiptRecorded)
	b.Kill9(t)

	cmd := e.Command("resume", runID, "--json")
	cmd.Env = e.WithMail(cmd.Env, mail)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	evs := e2etest.DecodeEvents(t, string(out))
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" {
		t.Errorf("final = %+v", fin)
	}
	if n := mail.Count(); n != 1 {
		t.Errorf("the mailbox has %d messages, want exactly 1", n)
	}
}

// kill -9 of the parent between the intent and the send: the child is
// connecting to a server that has not greeted yet when its parent dies. It
// stops without sending; resume reports the unknown outcome and sends
// nothing; --resend-unknown, the user's choice, sends exactly one from the
// recorded arguments, though the model does not ask again.
func TestEffectParentKilledBetweenIntentAndSend(t *testing.T) {
	t.Parallel()
	mail := e2etest.NewMailbox(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	connected := make(chan net.Conn, 1)
	go func() {
		if c, err := silent.Accept(); err == nil {
			connected <- c
		}
	}()
	e := e2etest.NewHarness(t,
		emailTurn("bob@example.com", "Status", "All green."), // attempt 1: parent dies mid-send
		emailTurn("bob@example.com", "Status", "All green."), // resume: refused, unknown
		llmtest.Turn{Text: "The earlier send has an unknown outcome."},
		llmtest.Turn{Text: "The status email went out."}, // resume --resend-unknown: sent before this
	)
	planPath := e.WritePlan(t, `{"objective":"Tell Bob","phases":[
		{"id":"notify","instructions":"Email bob@example.com the status.","max_attempts":1,
		 "evidence":{"type":"receipt","receipts":["email_sent"]}}]}`)
	b := e.StartWith(func(env []string) []string {
		return append(env, "AGENT_SMTP_ADDR="+silent.Addr().String(), "AGENT_SMTP_FROM=agent@example.com")
	}, "harness", "--json", "--plan-file", planPath)
	runID := b.WaitEvent(t, event.RunStarted).RunID
	select {
	case c := <-connected:
		defer c.Close()
	case <-time.After(e2etest.Patience):
		t.Fatal("the child never connected to the SMTP server")
	}
	child := runnerChild(t, b.Cmd.Process.Pid)
	b.Kill9(t)
	e2etest.WaitFor(t, "the orphaned child to stop", func() bool { return !e2etest.Alive(child) })

	resume := func(extra ...string) (int, []event.Event) {
		cmd := e.Command(append([]string{"resume", runID, "--json"}, extra...)...)
		cmd.Env = e.WithMail(cmd.Env, mail)
		out, _ := cmd.Output()
		return cmd.ProcessState.ExitCode(), e2etest.DecodeEvents(t, string(out))
	}
	code, evs := resume()
	if code != 1 || mail.Count() != 0 {
		t.Fatalf("resume: exit %d with %d messages; want 1 and none sent", code, mail.Count())
	}
	if fin := e2etest.LastFinished(t, evs); fin.Reason != "verification" || !strings.Contains(fin.Detail, "unknown outcome") {
		t.Errorf("final reason = %s: %s", fin.Reason, fin.Detail)
	}
	code, _ = resume("--resend-unknown")
	if code != 0 || mail.Count() != 1 {
		t.Errorf("resume --resend-unknown: exit %d with %d messages; want 0 and exactly 1", code, mail.Count())
	}
}

// The fast path uses the same outbox in-process: a repeated identical
// Slack post is not posted twice; a crash after the post is not repeated
// on resume.
func TestEffectFastPathSlackOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	posts := 0
	var kill func()
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer xoxb-test" {
			http.Error(w, `{"ok":false,"error":"not_authed"}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		posts++
		k := kill
		mu.Unlock()
		if k != nil {
			k() // the agent dies after the post, before it hears back
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true,"channel":"C42","ts":"1700000000.000100"}`)
	}))
	t.Cleanup(slack.Close)
	post := func(text string) llmtest.Turn {
		args, _ := json.Marshal(map[string]string{"channel": "#ops", "text": text})
		return llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "slack_post", Arguments: args}}}
	}
	e := e2etest.New(t,
		post("deploy done"),
		post("deploy  done "), // the same message, differently spaced
		llmtest.Turn{Text: "Posted once."},
		post("second run"), // the run that gets killed
		post("second run"), // after resume
		llmtest.Turn{Text: "Not reposted."},
	)
	env := func(cmdEnv []string) []string {
		return append(cmdEnv, "AGENT_SLACK_TOKEN=xoxb-test", "AGENT_SLACK_API_URL="+slack.URL)
	}
	cmd := e.Command("run", "--json", "post it")
	cmd.Env = env(cmd.Env)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if posts != 1 || !strings.Contains(string(out), "already sent earlier") {
		t.Errorf("%d posts; the repeat was not recognised:\n%s", posts, out)
	}

	// The kill hook is armed before the run starts, and waits for the
	// process handle, however late StartWith hands it over.
	var victim *e2etest.Background
	known := make(chan struct{})
	mu.Lock()
	kill = func() {
		<-known
		_ = victim.Cmd.Process.Signal(syscall.SIGKILL)
	}
	mu.Unlock()
	b := e.StartWith(env, "run", "--json", "post again")
	victim = b
	close(known)
	runID := b.WaitEvent(t, event.RunStarted).RunID
	<-b.Done
	_ = b.Cmd.Wait()
	mu.Lock()
	kill = nil
	mu.Unlock()

	res := e.StartWith(env, "resume", runID, "--json")
	<-res.Done
	if err := res.Cmd.Wait(); err != nil {
		t.Fatalf("resume: %v: %s", err, res.Stderr.String())
	}
	if posts != 2 {
		t.Errorf("%d posts in all, want 2 (one per run)", posts)
	}
	res.Mu.Lock()
	defer res.Mu.Unlock()
	var refused bool
	for _, ev := range res.Events {
		var d event.ToolCompletedData
		if ev.Type == event.ToolCompleted && ev.Decode(&d) == nil && strings.Contains(d.Output, "unknown") {
			refused = true
		}
	}
	if !refused {
		t.Error("the resumed run's repeat was not refused as an unknown outcome")
	}
}

// Same recipient and subject, another body: the second email is not sent,
// and the model is told so instead of "already sent" (it would believe the
// failure report went out).
func TestEffectDifferentBodyIsNotDroppedSilently(t *testing.T) {
	t.Parallel()
	mail := e2etest.NewMailbox(t)
	e := e2etest.New(t,
		emailTurn("ops@example.com", "Deploy", "Deploy started."),
		emailTurn("ops@example.com", "Deploy", "Deploy FAILED: rolled back."),
		llmtest.Turn{Text: "Reported."},
	)
	cmd := e.Command("run", "--json", "report the deploy")
	cmd.Env = e.WithMail(cmd.Env, mail)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := mail.Count(); n != 1 {
		t.Errorf("the mailbox has %d messages, want 1", n)
	}
	results := e2etest.OfType(e2etest.DecodeEvents(t, string(out)), event.ToolCompleted)
	if len(results) != 2 {
		t.Fatalf("%d tool results, want 2", len(results))
	}
	var second event.ToolCompletedData
	_ = results[1].Decode(&second)
	if second.OK || !strings.Contains(second.Output, "different content") || !strings.Contains(second.Output, "different subject") {
		t.Errorf("the second send reported %+v, want a refusal that says why and how to send a new message", second)
	}
}
