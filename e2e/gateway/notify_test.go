package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/scheduler"
	"agent/store"
)

// Notifications (docs/PROTOCOL.md#notifications) from a real gateway
// process to a real HTTP receiver, a real SMTP server and a command.

// startRunHTTP starts a run in a new session with POST /v1/runs.
func startRunHTTP(t *testing.T, addr, input string) string {
	t.Helper()
	var res api.RunStartResult
	body, _ := json.Marshal(api.RunStartParams{Input: input})
	if code := e2etest.HTTPJSON(t, http.MethodPost, "http://"+addr+"/v1/runs", string(body), &res); code != http.StatusAccepted || res.RunID == "" {
		t.Fatalf("POST /v1/runs: %d %+v", code, res)
	}
	return res.RunID
}

// warnings are the messages of a run's warning events.
func warnings(t *testing.T, db *store.DB, runID string) []string {
	t.Helper()
	evs, err := db.ListEvents(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range e2etest.OfType(evs, event.Warning) {
		var d event.WarningData
		_ = e.Decode(&d)
		out = append(out, d.Message)
	}
	return out
}

// TestNotificationsOnceAcrossGatewayKill: the gateway tells a webhook and
// an email address that a run completed; both receivers have it when the
// gateway is killed (-9) before it heard back. The gateway started again
// does not send either again: their outcome is unknown, said so in a
// warning of the run, and each receiver got it exactly once.
func TestNotificationsOnceAcrossGatewayKill(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Deployed."})
	hook := e2etest.NewWebhook(t)
	mail := e2etest.NewMailbox(t)
	answer := make(chan struct{})
	hook.Hold = func() { <-answer }
	mail.AfterData = func() { <-answer }
	e.WriteConfig(fmt.Sprintf(`
[[notify]]
on = ["completed"]
webhook = %q

[[notify]]
on = ["completed", "failed"]
email = "ops@example.com"
`, hook.URL))
	env := func(cmd *exec.Cmd) { cmd.Env = append(e.WithMail(cmd.Env, mail), "AGENT_NOTIFY_TIMEOUT=2s") }
	g := e.StartGatewayWith(env)
	runID := startRunHTTP(t, g.Addr, "deploy the site")

	e2etest.WaitFor(t, "both receivers to have the notification", func() bool {
		return len(hook.Requests()) == 1 && mail.Count() == 1
	})
	g.Signal(t, syscall.SIGKILL)
	g.Wait(t)
	close(answer) // the answers go nowhere

	e.StartGatewayWith(env)
	db := e.OpenStore(t)
	defer db.Close()
	// The dead gateway's claim on each runs out (2×2s+5s), and the
	// live one settles them.
	e2etest.WaitLong(t, "both notifications to be unknown", time.Minute, func() bool {
		return e2etest.NotificationStates(t, db, runID) == "unknown unknown"
	})
	if n, m := len(hook.Requests()), mail.Count(); n != 1 || m != 1 {
		t.Fatalf("the webhook got %d, the mailbox %d; want exactly one each", n, m)
	}
	ns := e2etest.Notifications(t, db, runID)
	if got := hook.Requests()[0].Key; got != ns[0].Key && got != ns[1].Key {
		t.Errorf("the webhook's Idempotency-Key %q is no notification's key", got)
	}
	mail.Mu.Lock()
	msg := mail.Msgs[0]
	mail.Mu.Unlock()
	if !strings.Contains(msg, "Message-ID: <notify-") || !strings.Contains(msg, "completed: Deployed.") {
		t.Errorf("the email:\n%s", msg)
	}
	e2etest.WaitFor(t, "a warning for each", func() bool {
		ws := warnings(t, db, runID)
		return len(ws) == 2 && strings.Contains(ws[0], "may or may not have arrived") && strings.Contains(ws[1], "may or may not have arrived")
	})
}

// TestNotificationRetriedUntilTaken: a webhook that fails three times
// gets the notification on the fourth try, once; the first failure is a
// warning of the run. A command gets the notification's JSON, the run's
// terminal event inside, on its stdin.
func TestNotificationRetriedUntilTaken(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "All green."})
	hook := e2etest.NewWebhook(t, 500, 503, 500)
	got := filepath.Join(t.TempDir(), "notifications.jsonl")
	e.WriteConfig(fmt.Sprintf(`
[[notify]]
on = ["completed"]
webhook = %q

[[notify]]
on = ["completed"]
command = ["sh", "-c", "cat >> %s"]
`, hook.URL, got))
	g := e.StartGatewayWith(func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, "AGENT_NOTIFY_BACKOFF=200ms") })
	runID := startRunHTTP(t, g.Addr, "run the tests")
	db := e.OpenStore(t)
	defer db.Close()
	e2etest.WaitLong(t, "both notifications to be done", time.Minute, func() bool {
		return e2etest.NotificationStates(t, db, runID) == "done done"
	})
	reqs := hook.Requests()
	if len(reqs) != 4 || reqs[3].Status != http.StatusOK || reqs[0].Key != reqs[3].Key {
		t.Fatalf("the webhook got %+v; want three refused, then the same notification taken", reqs)
	}
	msgs := hook.Messages(t)
	if len(msgs) != 1 || msgs[0]["notification"] != "completed" || msgs[0]["run_id"] != runID {
		t.Fatalf("taken: %v", msgs)
	}
	for _, n := range e2etest.Notifications(t, db, runID) {
		if want := map[bool]int{true: 4, false: 1}[strings.Contains(string(n.Channel), "webhook")]; n.Tries != want {
			t.Errorf("notification to %s tried %d times, want %d", n.Channel, n.Tries, want)
		}
	}

	data, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var m struct {
		Notification string      `json:"notification"`
		Event        event.Event `json:"event"`
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &m) != nil || m.Notification != "completed" ||
		m.Event.Type != event.RunCompleted || m.Event.RunID != runID {
		t.Fatalf("the command read %q", data)
	}
	var fin event.RunFinishedData
	if err := m.Event.Decode(&fin); err != nil || fin.Result != "All green." {
		t.Errorf("its event's data: %+v, %v", fin, err)
	}
	ws := warnings(t, db, runID)
	if len(ws) != 1 || !strings.Contains(ws[0], "500 Internal Server Error") {
		t.Errorf("warnings %q; want the first failure", ws)
	}
}

// TestJobFailureIsNotified: a scheduled job whose every attempt fails is
// told once to the channel on job_failed, after its last attempt, naming
// the job; its runs' own failures go to no channel not on failed.
func TestJobFailureIsNotified(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{Status: http.StatusBadRequest, Body: `{"error":{"message":"the model is gone","type":"invalid_request_error"}}`},
	}})
	hook := e2etest.NewWebhook(t)
	e.WriteConfig(fmt.Sprintf("[[notify]]\non = [\"job_failed\"]\nwebhook = %q\n", hook.URL))
	srv, db := e.JobsGateway(true)
	c := e2etest.GwDial(t, srv.Addr())
	job := e2etest.GwCall[scheduler.Job](t, c, api.MethodJobCreate, api.JobCreateParams{
		Name: "nightly", CronExpr: "@every 24h", Prompt: "build it",
		Policy: json.RawMessage(`{"retry":{"max_attempts":2,"base":"100ms","cap":"100ms"}}`),
	})
	e2etest.GwCall[json.RawMessage](t, c, api.MethodJobRunNow, api.JobParams{JobID: job.ID})
	e2etest.WaitLong(t, "the job's failure to be told", time.Minute, func() bool { return len(hook.Messages(t)) == 1 })
	m := hook.Messages(t)[0]
	text, _ := m["text"].(string)
	runID, _ := m["run_id"].(string)
	if m["notification"] != "job_failed" || !strings.Contains(text, `"nightly" failed its last attempt (2 of 2)`) || !strings.Contains(text, "the model is gone") {
		t.Fatalf("notification %v", m)
	}
	attempts := map[int]string{}
	for _, r := range e2etest.JobRuns(t, db, job.ID) {
		attempts[r.Attempt] = r.RunID
	}
	if len(attempts) != 2 || attempts[2] != runID {
		t.Errorf("job runs by attempt %v; the notification names run %s, want the last attempt's", attempts, runID)
	}
	if ns := e2etest.Notifications(t, db, attempts[1]); len(ns) != 0 {
		t.Errorf("the first attempt's run has %d notifications", len(ns))
	}
}
