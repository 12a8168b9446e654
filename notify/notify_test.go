package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/event"
	"agent/store"
)

// receiver is a webhook on the loopback that records what it gets and
// answers each request with the next status of its script (then 200).
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	statuses []int
	got      []received
	hold     chan struct{} // if set, a request waits on it before its answer
}

type received struct {
	key  string
	body []byte
	ok   bool
}

func newReceiver(t testing.TB, statuses ...int) *receiver {
	rc := &receiver{statuses: statuses}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		status := http.StatusOK
		if len(rc.statuses) > 0 {
			status, rc.statuses = rc.statuses[0], rc.statuses[1:]
		}
		rc.got = append(rc.got, received{key: r.Header.Get("Idempotency-Key"), body: body, ok: status == http.StatusOK})
		hold := rc.hold
		rc.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// setup is a store with one run and a Notifier whose config.toml is
// conf; warnings are the warnings it recorded.
type setup struct {
	db       *store.DB
	n        *Notifier
	run      *store.Run
	mu       sync.Mutex
	warnings []string
}

func newSetup(t testing.TB, conf string, tune func(*Config)) *setup {
	t.Helper()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(home, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := &setup{db: db, run: &store.Run{ID: "0123456789abcdef", Prompt: "deploy the site"}}
	if err := db.CreateRun(context.Background(), s.run, "", 0); err != nil {
		t.Fatal(err)
	}
	// A send's timeout is generous: a loaded machine may take seconds to
	// answer on the loopback, and only the test of a lost answer (its own
	// timeout) waits it out.
	cfg := Config{DB: db, Home: home, Getenv: func(string) string { return "" }, Timeout: time.Minute, Backoff: 10 * time.Millisecond,
		Record: func(_ context.Context, runID string, e event.Event) error {
			var d event.WarningData
			_ = e.Decode(&d)
			s.mu.Lock()
			s.warnings = append(s.warnings, d.Message)
			s.mu.Unlock()
			return nil
		},
		HowToAnswer: func(runID string, _ event.RunWaitingData) string { return "agent approve " + runID },
	}
	if tune != nil {
		tune(&cfg)
	}
	s.n = New(cfg)
	return s
}

// record stores e as the run's next event.
func (s *setup) record(t testing.TB, e event.Event) event.Event {
	t.Helper()
	next, err := s.db.NextSeq(context.Background(), s.run.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.RunID, e.Seq = s.run.ID, next
	if err := s.db.AppendEvents(context.Background(), []event.Event{e}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (s *setup) park(t *testing.T, waitID string) event.RunWaitingData {
	t.Helper()
	w := event.RunWaitingData{WaitID: waitID, Kind: event.WaitApproval, Until: time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		OnTimeout: event.OnTimeoutDeny, CallID: "c1", Tool: "bash", Args: json.RawMessage(`{"command":"git push"}`), Rule: "bash(git push*)"}
	s.record(t, event.New(event.RunWaiting, w))
	return w
}

func (s *setup) notifications(t *testing.T) []store.Notification {
	t.Helper()
	ns, err := s.db.Notifications(context.Background(), s.run.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func webhookConf(url string, on ...string) string {
	return fmt.Sprintf("[[notify]]\non = [\"%s\"]\nwebhook = %q\n", strings.Join(on, `", "`), url)
}

// A run that parks is told to the webhook once, however often its drive
// ends parked on the same wait: the message says what it waits for, how
// to answer, carries a one-decision link, and the key in its header.
func TestWaitingIsToldOnce(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := newSetup(t, "public_url = \"https://agent.example.com/\"\n"+webhookConf(rc.srv.URL, "waiting", "completed"), nil)
	ctx := context.Background()
	s.park(t, "w1")
	for range 2 { // parked, woken without an answer, parked again
		if err := s.n.Ended(ctx, s.run, event.RunWaiting); err != nil {
			t.Fatal(err)
		}
	}
	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("the webhook got %d requests, want 1", len(got))
	}
	var m Message
	if err := json.Unmarshal(got[0].body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Notification != "waiting" || m.Key != got[0].key || !strings.HasPrefix(m.Key, "notify-") ||
		!strings.Contains(m.Text, `approval of bash {"command":"git push"}`) || !strings.Contains(m.Text, "agent approve "+s.run.ID) {
		t.Fatalf("message = %+v", m)
	}
	var e event.Event
	if err := json.Unmarshal(m.Event, &e); err != nil || e.Type != event.RunWaiting || e.Seq != 1 {
		t.Fatalf("its event = %s, %v", m.Event, err)
	}
	token, ok := strings.CutPrefix(m.Link, "https://agent.example.com/w/")
	if !ok || len(token) != 43 {
		t.Fatalf("link = %q, want public_url/w/ and a 256-bit token", m.Link)
	}
	if l, _, err := s.db.LinkedWait(ctx, token); err != nil || l.WaitID != "w1" {
		t.Fatalf("the link's wait: %+v, %v", l, err)
	}
	if ns := s.notifications(t); len(ns) != 1 || ns[0].State != event.StatusDone || ns[0].Tries != 1 {
		t.Fatalf("notifications = %+v", ns)
	}
}

// A receiver that fails three times gets the notification on the fourth
// try, and once: the first failure is a warning in the run's events.
func TestFailingReceiverGetsItOnce(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 500, 502, 503)
	s := newSetup(t, webhookConf(rc.srv.URL, "completed"), nil)
	ctx := context.Background()
	s.record(t, event.New(event.RunCompleted, event.RunFinishedData{Status: event.StatusCompleted, Result: "deployed"}))
	if err := s.n.Ended(ctx, s.run, event.RunCompleted); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(s.notifications(t)) == 1 && s.notifications(t)[0].State != event.StatusDone && time.Now().Before(deadline) {
		if next := s.n.Deliver(ctx, ""); !next.IsZero() {
			time.Sleep(time.Until(next))
		}
	}
	got := rc.requests()
	oks := 0
	for _, r := range got {
		if r.ok {
			oks++
		}
		if r.key != got[0].key {
			t.Errorf("a retry has another key: %s, %s", r.key, got[0].key)
		}
	}
	if len(got) != 4 || oks != 1 {
		t.Fatalf("the receiver got %d requests, %d taken; want 4, the last taken", len(got), oks)
	}
	n := s.notifications(t)[0]
	if n.State != event.StatusDone || n.Tries != 4 || string(n.Details) != `{"status":200}` {
		t.Fatalf("notification = %+v", n)
	}
	if next := s.n.Deliver(ctx, ""); !next.IsZero() || len(rc.requests()) != 4 {
		t.Fatalf("after its delivery: next %v, %d requests", next, len(rc.requests()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.warnings) != 1 || !strings.Contains(s.warnings[0], "500 Internal Server Error") || !strings.Contains(s.warnings[0], "trying again until") {
		t.Fatalf("warnings = %q; want one, for the first failure", s.warnings)
	}
}

// A notification whose outcome is lost (the receiver took the request
// and never answered) is never sent again by itself.
func TestUnknownOutcomeIsNotSentAgain(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	rc.hold = make(chan struct{})
	defer close(rc.hold)
	s := newSetup(t, webhookConf(rc.srv.URL, "failed"), func(c *Config) { c.Timeout = 300 * time.Millisecond })
	ctx := context.Background()
	s.record(t, event.New(event.RunFailed, event.RunFinishedData{Status: event.StatusFailed, Reason: event.ReasonMaxTurns, Detail: "out of turns"}))
	if err := s.n.Ended(ctx, s.run, event.RunFailed); err != nil {
		t.Fatal(err)
	}
	n := s.notifications(t)[0]
	if n.State != event.StatusUnknown || !strings.Contains(n.LastError, "no answer from the webhook") {
		t.Fatalf("notification = %+v; want unknown", n)
	}
	if next := s.n.Deliver(ctx, ""); !next.IsZero() || len(rc.requests()) != 1 {
		t.Fatalf("after: next %v, %d requests; want it left alone", next, len(rc.requests()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.warnings) != 1 || !strings.Contains(s.warnings[0], "may or may not have arrived") {
		t.Fatalf("warnings = %q", s.warnings)
	}
}

// A command reads the notification's JSON on its stdin, the event as
// agent run --json prints it inside, and its key in AGENT_NOTIFY_KEY.
func TestCommandReadsTheEvent(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "got")
	conf := fmt.Sprintf("[[notify]]\non = [\"completed\"]\ncommand = [\"sh\", \"-c\", \"cat > %s; echo $AGENT_NOTIFY_KEY >> %s\"]\n", out, out)
	s := newSetup(t, conf, nil)
	done := s.record(t, event.New(event.RunCompleted, event.RunFinishedData{Status: event.StatusCompleted, Result: "all green"}))
	if err := s.n.Ended(context.Background(), s.run, event.RunCompleted); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	line, key, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	var m Message
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("stdin was %q: %v", line, err)
	}
	var e event.Event
	if err := json.Unmarshal(m.Event, &e); err != nil || e.Type != event.RunCompleted || e.Seq != done.Seq || e.RunID != s.run.ID {
		t.Fatalf("event = %s, %v", m.Event, err)
	}
	if m.Key != key || !strings.Contains(m.Text, "completed: all green") {
		t.Fatalf("message %+v, key %q", m, key)
	}
}

// Slack's incoming webhooks get {"text": …}; a wait answered before its
// notification went out is not told at all.
func TestSlackFormatAndAnsweredWaits(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 500)
	s := newSetup(t, webhookConf(rc.srv.URL, "waiting")+"format = \"slack\"\n", func(c *Config) { c.Backoff = time.Hour })
	ctx := context.Background()
	s.park(t, "w1")
	if err := s.n.Ended(ctx, s.run, event.RunWaiting); err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	if got := rc.requests(); len(got) != 1 || json.Unmarshal(got[0].body, &body) != nil || len(body) != 1 ||
		!strings.Contains(body["text"], "waits for your approval of bash") {
		t.Fatalf("slack got %+v", rc.requests())
	}
	if _, err := s.db.ResolveWait(ctx, s.run.ID, "w1", event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	s.db.Now = func() time.Time { return time.Now().Add(2 * time.Hour) } // the retry is due
	s.n.Deliver(ctx, "")
	if n := s.notifications(t)[0]; n.State != event.StatusSkipped || len(rc.requests()) != 1 {
		t.Fatalf("after the answer: %+v, %d requests; want skipped, not sent", n, len(rc.requests()))
	}
}

// A notification that cannot be sent within GiveUp of its planning is
// given up, and a warning of the run says so.
func TestGivesUp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 500)
	s := newSetup(t, webhookConf(rc.srv.URL, "completed"), func(c *Config) { c.GiveUp = time.Millisecond; c.Backoff = time.Second })
	s.record(t, event.New(event.RunCompleted, event.RunFinishedData{Status: event.StatusCompleted}))
	if err := s.n.Ended(context.Background(), s.run, event.RunCompleted); err != nil {
		t.Fatal(err)
	}
	if n := s.notifications(t)[0]; n.State != event.StatusFailed || len(rc.requests()) != 1 {
		t.Fatalf("notification %+v after %d requests; want failed after one", n, len(rc.requests()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.warnings) != 1 || !strings.Contains(s.warnings[0], "giving up") {
		t.Fatalf("warnings %q", s.warnings)
	}
}

// BenchmarkEndedToWebhook is what telling one channel costs a drive's
// end: planning, the claim, the POST to a webhook on the loopback, and
// the receipt.
func BenchmarkEndedToWebhook(b *testing.B) {
	rc := newReceiver(b)
	s := newSetup(b, webhookConf(rc.srv.URL, "completed"), nil)
	ctx := context.Background()
	for b.Loop() {
		s.record(b, event.New(event.RunCompleted, event.RunFinishedData{Status: event.StatusCompleted}))
		if err := s.n.Ended(ctx, s.run, event.RunCompleted); err != nil {
			b.Fatal(err)
		}
	}
	if got := len(rc.requests()); got != b.N {
		b.Fatalf("%d requests for %d ends", got, b.N)
	}
}

// A Slack channel is posted to as slack_post posts (AGENT_SLACK_TOKEN,
// chat.postMessage), the text and the link in one message.
func TestSlackChannel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var posts []map[string]string
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]string
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		posts = append(posts, map[string]string{"path": r.URL.Path, "auth": r.Header.Get("Authorization"), "channel": p["channel"], "text": p["text"]})
		mu.Unlock()
		fmt.Fprint(w, `{"ok":true,"channel":"C0OPS","ts":"1700000000.000100"}`)
	}))
	defer slack.Close()
	env := map[string]string{"AGENT_SLACK_TOKEN": "xoxb-test", "AGENT_SLACK_API_URL": slack.URL}
	s := newSetup(t, "public_url = \"https://agent.example.com\"\n[[notify]]\non = [\"waiting\"]\nslack_channel = \"#ops\"\n",
		func(c *Config) { c.Getenv = func(k string) string { return env[k] } })
	s.park(t, "w1")
	if err := s.n.Ended(context.Background(), s.run, event.RunWaiting); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 || posts[0]["path"] != "/chat.postMessage" || posts[0]["auth"] != "Bearer xoxb-test" || posts[0]["channel"] != "#ops" ||
		!strings.Contains(posts[0]["text"], "approval of bash") || !strings.Contains(posts[0]["text"], "Decide: https://agent.example.com/w/") {
		t.Fatalf("slack got %v", posts)
	}
	if n := s.notifications(t)[0]; n.State != event.StatusDone || !strings.Contains(string(n.Details), "1700000000.000100") {
		t.Fatalf("notification %+v", n)
	}
}
