package tools

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"agent/event"
)

// fakeOutbox records every intent and answers with BeginFunc (nil means
// "go ahead").
type fakeOutbox struct {
	BeginFunc func(ctx context.Context, in Intent) (*event.ReceiptData, error)

	mu      sync.Mutex
	intents []Intent
}

func (f *fakeOutbox) Begin(ctx context.Context, in Intent) (*event.ReceiptData, error) {
	f.mu.Lock()
	f.intents = append(f.intents, in)
	f.mu.Unlock()
	if f.BeginFunc == nil {
		return nil, nil
	}
	return f.BeginFunc(ctx, in)
}

func (f *fakeOutbox) Intents() []Intent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Intent(nil), f.intents...)
}

var testScope = EffectScope{RunID: "run-1", PhaseID: "notify"}

// envMap is a getenv over a map.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// effectToolNamed returns the named tool of EffectTools.
func effectToolNamed(t *testing.T, name string, outbox Outbox, env map[string]string, opts ...EffectOptions) Tool {
	t.Helper()
	for _, tool := range EffectTools(testScope, outbox, envMap(env), opts...) {
		if tool.Definition().Name == name {
			return tool
		}
	}
	t.Fatalf("no effect tool %q", name)
	return nil
}

// runEffect calls tool directly with args (a JSON string or a value to marshal).
func runEffect(t *testing.T, ctx context.Context, tool Tool, args any) Result {
	t.Helper()
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return tool.Run(ctx, nil, json.RawMessage(raw))
}

// outcome classifies a result the way the parent sees it: "sent" (a
// receipt), "not_sent" (effect.failed: may be retried), "unknown"
// (effect.unknown: never retried) or "refused" (an error with no event).
func outcome(t *testing.T, res Result) string {
	t.Helper()
	switch {
	case !res.IsError && len(res.Events) == 1 && res.Events[0].Type == event.ReceiptRecorded:
		return "sent"
	case !res.IsError && len(res.Events) == 0:
		return "ok, no event"
	case res.IsError && len(res.Events) == 1 && res.Events[0].Type == event.EffectFailed:
		return "not_sent"
	case res.IsError && len(res.Events) == 1 && res.Events[0].Type == event.EffectUnknown:
		return "unknown"
	case res.IsError && len(res.Events) == 0:
		return "refused"
	}
	t.Fatalf("unexpected result %+v", res)
	return ""
}

func receiptOf(t *testing.T, res Result) event.ReceiptData {
	t.Helper()
	var r event.ReceiptData
	if err := res.Events[0].Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("bad JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

func TestEffectKey(t *testing.T) {
	t.Parallel()
	email := Effects[0]
	slack := Effects[1]
	base := EffectKey(testScope, email, map[string]any{"to": "bob@example.com", "subject": "Weekly report"})
	if !regexp.MustCompile(`^send_email-[0-9a-f]{24}$`).MatchString(base) {
		t.Fatalf("key %q: want send_email- and 24 hex digits", base)
	}
	same := []map[string]any{
		{"to": "bob@example.com", "subject": "Weekly report"},
		{"to": "  Bob@Example.COM ", "subject": "  Weekly   report\n"},
		{"to": "Bob <BOB@example.com>", "subject": "Weekly\treport", "body": "bodies do not count"},
	}
	for _, args := range same {
		if got := EffectKey(testScope, email, args); got != base {
			t.Errorf("EffectKey(%v) = %s, want %s", args, got, base)
		}
	}
	differ := []struct {
		scope EffectScope
		args  map[string]any
	}{
		{EffectScope{RunID: "run-2", PhaseID: "notify"}, map[string]any{"to": "bob@example.com", "subject": "Weekly report"}},
		{EffectScope{RunID: "run-1", PhaseID: "other"}, map[string]any{"to": "bob@example.com", "subject": "Weekly report"}},
		{testScope, map[string]any{"to": "alice@example.com", "subject": "Weekly report"}},
		{testScope, map[string]any{"to": "bob@example.com", "subject": "Weekly report 2"}},
		{testScope, map[string]any{"to": "bob@example.com", "subject": "weekly report"}}, // subject case counts
	}
	for _, d := range differ {
		if got := EffectKey(d.scope, email, d.args); got == base {
			t.Errorf("EffectKey(%v, %v) = base key, want a different one", d.scope, d.args)
		}
	}

	s1 := EffectKey(testScope, slack, map[string]any{"channel": "C123", "text": "deploy  done"})
	if s2 := EffectKey(testScope, slack, map[string]any{"channel": " C123", "text": "deploy done "}); s1 != s2 {
		t.Errorf("slack keys differ for whitespace only: %s vs %s", s1, s2)
	}
	if s3 := EffectKey(testScope, slack, map[string]any{"channel": "C123", "text": "deploy failed"}); s1 == s3 {
		t.Error("slack key ignores the text")
	}
	if s4 := EffectKey(testScope, slack, map[string]any{"channel": "C999", "text": "deploy done"}); s1 == s4 {
		t.Error("slack key ignores the channel")
	}
	if !strings.HasPrefix(s1, "slack_post-") {
		t.Errorf("slack key %q", s1)
	}
}

// stubEffect is send_email's row with a scripted performer, to drive the
// shared flow without a server.
func stubEffect(outbox Outbox, prepErr error, perform Perform, performed *int) *effectTool {
	return newEffectTool("send_email", sendEmailDef, testScope, outbox, func(json.RawMessage) (Perform, error) {
		if prepErr != nil {
			return nil, prepErr
		}
		return func(ctx context.Context, key string) (Sent, error) {
			*performed++
			return perform(ctx, key)
		}, nil
	})
}

func TestEffectToolFlow(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, string) (Sent, error) {
		return Sent{Summary: "email sent to bob@example.com", Details: emailReceipt{MessageID: "<m>", To: "bob@example.com"}}, nil
	}
	earlier := &event.ReceiptData{Type: "email_sent", Key: "k", Details: json.RawMessage(`{"message_id":"<old@x>"}`)}
	tests := []struct {
		name      string
		prepErr   error
		begin     func(context.Context, Intent) (*event.ReceiptData, error)
		perform   Perform
		want      string // outcome
		performed int
		intents   int
		output    []string
	}{
		{name: "proceed", perform: ok, want: "sent", performed: 1, intents: 1, output: []string{"email sent to bob@example.com"}},
		{
			name:  "existing receipt",
			begin: func(context.Context, Intent) (*event.ReceiptData, error) { return earlier, nil },
			want:  "ok, no event", intents: 1,
			output: []string{"already sent earlier", `email_sent {"message_id":"<old@x>"}`, "not sent again"},
		},
		{
			// Same recipient and subject, another body: the key is the
			// same, so nothing is sent, and the model is told, never "ok".
			name: "sent earlier with other content",
			begin: func(context.Context, Intent) (*event.ReceiptData, error) {
				return nil, &DifferentError{Receipt: *earlier, Args: json.RawMessage(`{"to":"bob@example.com","subject":"Hi","body":"Deploy started"}`)}
			},
			want: "refused", intents: 1,
			output: []string{"not sent: a send_email with the same to and subject was already sent in this phase with different content",
				"nothing was sent now", "give it a different subject"},
		},
		{
			name:  "unknown earlier outcome",
			begin: func(context.Context, Intent) (*event.ReceiptData, error) { return nil, ErrUnknownOutcome },
			want:  "refused", intents: 1,
			output: []string{"not sent", "may or may not", "Do not try to send it another way", "agent resume run-1 --resend-unknown", "same to and subject"},
		},
		{
			name:  "outbox error",
			begin: func(context.Context, Intent) (*event.ReceiptData, error) { return nil, errors.New("parent is gone") },
			want:  "refused", intents: 1,
			output: []string{"not sent: parent is gone"},
		},
		{
			name: "certainly not sent",
			perform: func(context.Context, string) (Sent, error) {
				return Sent{}, NotSent(errors.New("connection refused"))
			},
			want: "not_sent", performed: 1, intents: 1,
			output: []string{"not sent: connection refused", "call send_email again"},
		},
		{
			name: "unknown outcome",
			perform: func(context.Context, string) (Sent, error) {
				return Sent{}, errors.New("connection lost after the message")
			},
			want: "unknown", performed: 1, intents: 1,
			output: []string{"outcome unknown: connection lost", "will not be retried", "--resend-unknown"},
		},
		{name: "bad arguments or configuration", prepErr: errors.New("send_email is not configured"), want: "refused", output: []string{"not configured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ob := &fakeOutbox{BeginFunc: tt.begin}
			performed := 0
			tool := stubEffect(ob, tt.prepErr, tt.perform, &performed)
			res := runEffect(t, t.Context(), tool, map[string]string{"to": "Bob@Example.com", "subject": "Hi", "body": "x"})
			if got := outcome(t, res); got != tt.want {
				t.Fatalf("outcome %q, want %q; output: %s", got, tt.want, res.Output)
			}
			for _, s := range tt.output {
				if !strings.Contains(res.Output, s) {
					t.Errorf("output %q does not contain %q", res.Output, s)
				}
			}
			if performed != tt.performed {
				t.Errorf("performed %d times, want %d", performed, tt.performed)
			}
			intents := ob.Intents()
			if len(intents) != tt.intents {
				t.Fatalf("%d intents, want %d", len(intents), tt.intents)
			}
			wantKey := EffectKey(testScope, Effects[0], map[string]any{"to": "bob@example.com", "subject": "Hi"})
			if len(intents) == 1 {
				in := intents[0]
				if in.Tool != "send_email" || in.Key != wantKey || in.ReceiptType != "email_sent" ||
					string(in.Args) != `{"body":"x","subject":"Hi","to":"Bob@Example.com"}` {
					t.Errorf("intent %+v", in)
				}
			}
			switch tt.want {
			case "sent":
				r := receiptOf(t, res)
				if r.Type != "email_sent" || r.Key != wantKey || !sameJSON(t, r.Details, `{"message_id":"<m>","to":"bob@example.com","subject":""}`) {
					t.Errorf("receipt %+v details %s", r, r.Details)
				}
			case "not_sent":
				var f event.EffectFailedData
				if err := res.Events[0].Decode(&f); err != nil {
					t.Fatal(err)
				}
				if f.Key != wantKey || f.Error != "connection refused" {
					t.Errorf("effect.failed %+v", f)
				}
			case "unknown":
				var u event.EffectUnknownData
				if err := res.Events[0].Decode(&u); err != nil {
					t.Fatal(err)
				}
				if u.Key != wantKey || u.Error != "connection lost after the message" {
					t.Errorf("effect.unknown %+v", u)
				}
			}
		})
	}
}

// reportingOutbox is an outbox that takes outcomes itself, as a child's
// does.
type reportingOutbox struct {
	fakeOutbox
	reported []event.Event
}

func (r *reportingOutbox) Report(_ context.Context, e event.Event) error {
	r.reported = append(r.reported, e)
	return nil
}

// An outbox that is a Reporter gets the outcome while the call is open,
// and the result carries no event to report after its tool.completed.
func TestEffectToolReportsOutcomeWhileOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"sent", nil, event.ReceiptRecorded},
		{"not sent", NotSent(errors.New("refused")), event.EffectFailed},
		{"unknown", errors.New("connection lost"), event.EffectUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ob := &reportingOutbox{}
			performed := 0
			tool := stubEffect(ob, nil, func(context.Context, string) (Sent, error) { return Sent{Summary: "sent"}, tt.err }, &performed)
			res := runEffect(t, t.Context(), tool, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"})
			if len(res.Events) != 0 {
				t.Errorf("the result still carries %d events: they would come after tool.completed", len(res.Events))
			}
			if len(ob.reported) != 1 || ob.reported[0].Type != tt.want {
				t.Fatalf("reported %v, want one %s before the tool returned", ob.reported, tt.want)
			}
		})
	}
}

func TestEffectToolNilOutbox(t *testing.T) {
	t.Parallel()
	performed := 0
	tool := stubEffect(nil, nil, nil, &performed)
	res := runEffect(t, t.Context(), tool, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"})
	if outcome(t, res) != "refused" || performed != 0 || !strings.Contains(res.Output, "outbox") {
		t.Errorf("result %+v, performed %d", res, performed)
	}
}

func TestEffectToolsInSet(t *testing.T) {
	t.Parallel()
	s, _ := newTestSet(t, Options{}, nil, EffectTools(testScope, &fakeOutbox{}, envMap(nil))...)
	for _, name := range []string{"send_email", "slack_post"} {
		if !contains(s.Names(), name) {
			t.Errorf("%s not offered; names %v", name, s.Names())
		}
		if s.ReadOnly(name) {
			t.Errorf("%s is read-only", name)
		}
	}
	for _, d := range s.Definitions() {
		if contains([]string{"send_email", "slack_post"}, d.Name) && !strings.Contains(d.Description, "at most once") {
			t.Errorf("%s description does not teach at-most-once: %s", d.Name, d.Description)
		}
	}
	res := call(t, s, "send_email", map[string]string{"to": "bob@example.com", "subject": "Hi"})
	if !res.IsError || !strings.Contains(res.Output, `missing required argument "body"`) {
		t.Errorf("missing body: %+v", res)
	}
}

func TestEffectToolsMissingConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool string
		env  map[string]string
		args map[string]string
		want string
	}{
		{"send_email", nil, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"},
			"send_email is not configured: set AGENT_SMTP_ADDR and AGENT_SMTP_FROM"},
		{"send_email", map[string]string{"AGENT_SMTP_ADDR": "smtp.example.com:587"}, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"},
			"send_email is not configured: set AGENT_SMTP_FROM"},
		{"send_email", map[string]string{"AGENT_SMTP_ADDR": "smtp.example.com", "AGENT_SMTP_FROM": "a@example.com"}, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"},
			"AGENT_SMTP_ADDR=\"smtp.example.com\" must be host:port"},
		{"send_email", map[string]string{"AGENT_SMTP_ADDR": "smtp.example.com:25", "AGENT_SMTP_FROM": "nobody"}, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"},
			"AGENT_SMTP_FROM=\"nobody\" is not an email address"},
		{"send_email", map[string]string{"AGENT_SMTP_ADDR": "smtp.example.com:25", "AGENT_SMTP_FROM": "a@example.com", "AGENT_SMTP_USER": "a"}, map[string]string{"to": "bob@example.com", "subject": "Hi", "body": "x"},
			"set both AGENT_SMTP_USER and AGENT_SMTP_PASS"},
		{"send_email", map[string]string{"AGENT_SMTP_ADDR": "smtp.example.com:25", "AGENT_SMTP_FROM": "a@example.com"}, map[string]string{"to": "bob, alice", "subject": "Hi", "body": "x"},
			`invalid to "bob, alice"`},
		{"slack_post", nil, map[string]string{"channel": "C123", "text": "hi"},
			"slack_post is not configured: set AGENT_SLACK_TOKEN"},
		{"slack_post", map[string]string{"AGENT_SLACK_TOKEN": "x"}, map[string]string{"channel": " ", "text": "hi"},
			"channel is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			ob := &fakeOutbox{}
			res := runEffect(t, t.Context(), effectToolNamed(t, tt.tool, ob, tt.env), tt.args)
			if !res.IsError || !strings.Contains(res.Output, tt.want) {
				t.Errorf("result %+v, want an error containing %q", res, tt.want)
			}
			if n := len(ob.Intents()); n != 0 {
				t.Errorf("Begin called %d times", n)
			}
		})
	}
}

func TestUnconfiguredEffectsAreNotOffered(t *testing.T) {
	t.Parallel()
	env := map[string]string{"AGENT_SMTP_ADDR": "127.0.0.1:25", "AGENT_SMTP_FROM": "a@example.com"}
	getenv := func(k string) string { return env[k] }
	if got := Unconfigured(getenv); len(got) != 1 || got[0] != "slack_post" {
		t.Fatalf("Unconfigured = %v, want [slack_post]", got)
	}
	if deny := WithoutUnconfigured(nil, []string{"bash"}, getenv); len(deny) != 2 || deny[1] != "slack_post" {
		t.Errorf("deny = %v, want bash and slack_post", deny)
	}
	// Named in --allow-tools: offered, and a call says what to configure.
	if deny := WithoutUnconfigured([]string{"slack_post"}, nil, getenv); len(deny) != 0 {
		t.Errorf("deny = %v, want slack_post offered when allowed", deny)
	}
}

func TestSameEffect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool, recorded, args string
		same                 bool
	}{
		{"send_email", `{"to":"a@x","subject":"Deploy","body":"Deploy started"}`, `{"to":"A@X","subject":"Deploy","body":"Deploy started"}`, true},
		{"send_email", `{"to":"a@x","subject":"Deploy","body":"Deploy started"}`, `{"to":"a@x","subject":"Deploy","body":"Deploy\n  started "}`, true},
		{"send_email", `{"to":"a@x","subject":"Deploy","body":"Deploy started"}`, `{"to":"a@x","subject":"Deploy","body":"Deploy FAILED"}`, false},
		{"slack_post", `{"channel":"#ops","text":"deploy done"}`, `{"channel":"#ops","text":"deploy  done "}`, true},
		{"send_email", ``, `{"to":"a@x","subject":"Deploy","body":"anything"}`, true},
	}
	for _, tt := range tests {
		if got := SameEffect(tt.tool, json.RawMessage(tt.recorded), json.RawMessage(tt.args)); got != tt.same {
			t.Errorf("SameEffect(%s, %s, %s) = %v, want %v", tt.tool, tt.recorded, tt.args, got, tt.same)
		}
	}
}
