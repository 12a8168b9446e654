package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"agent/event"
	"agent/store"
	"agent/tools"
)

func newTest(t *testing.T, env ...string) (*Supervisor, *store.DB) {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := New(Config{DB: db, Home: t.TempDir(), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

// recSink persists through the run's journal, as a front-end's sink
// does, and keeps what it was given.
type recSink struct {
	mu     sync.Mutex
	j      *store.Journal
	events []event.Event
}

func (k *recSink) Emit(ctx context.Context, e event.Event) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, err := k.j.Append(ctx, e)
	if err != nil {
		return err
	}
	k.events = append(k.events, e)
	return nil
}

func (k *recSink) types() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ts []string
	for _, e := range k.events {
		ts = append(ts, e.Type)
	}
	return strings.Join(ts, " ")
}

func newSink(t *testing.T, db *store.DB, runID string) *recSink {
	t.Helper()
	j, err := db.Journal(context.Background(), runID, "")
	if err != nil {
		t.Fatal(err)
	}
	return &recSink{j: j}
}

// Options are checked once, and each problem names the option, so each
// front-end can say it its own way.
func TestPrepareNamesTheOption(t *testing.T) {
	t.Parallel()
	s, _ := newTest(t, "OPENAI_API_KEY=")
	ws := t.TempDir()
	local := Options{BaseURL: "http://127.0.0.1:9/v1"}
	with := func(f func(*Options)) Options {
		o := local
		f(&o)
		return o
	}
	tests := []struct {
		name  string
		o     Options
		dir   string
		field string
		cli   string
		gw    string
	}{
		{"negative turns", with(func(o *Options) { o.MaxTurns = -1 }), ws, "max_turns", "--max-turns must be positive", "options.max_turns must be positive"},
		{"a repeat limit of one call", with(func(o *Options) { o.MaxRepeats = 1 }), ws, "max_repeats", "--max-repeats must be at least 2", "options.max_repeats must be at least 2"},
		{"iterations without a promise", with(func(o *Options) { o.MaxIterations = 3 }), ws, "max_iterations",
			"--max-iterations needs --until, the line", "options.max_iterations needs options.until, the line"},
		{"promise of two lines", with(func(o *Options) { o.Until = "A\nB" }), ws, "until", "--until must be a single line", "options.until must be a single line"},
		{"bad duration", with(func(o *Options) { _ = o.Timeout.UnmarshalText([]byte("soon")) }), ws, "timeout",
			"--timeout must be a positive duration", "options.timeout must be a positive duration"},
		{"parallel without harness", with(func(o *Options) { o.Parallel = 2 }), ws, "parallel",
			"--parallel applies to harness runs only", "options.parallel applies to harness runs only (options.harness)"},
		{"promise in a harness", with(func(o *Options) { o.Harness, o.Until = true, "DONE" }), ws, "until", "--until applies to single runs", "options.until applies"},
		{"unknown tool", with(func(o *Options) { o.DenyTools = []string{"rm_rf"} }), ws, "deny_tools", `--deny-tools: unknown tool "rm_rf"`, `options.deny_tools: unknown tool "rm_rf"`},
		{"no tool left", with(func(o *Options) { o.AllowTools, o.DenyTools = []string{"bash"}, []string{"bash"} }), ws, "allow_tools",
			"--allow-tools and --deny-tools leave no tool", "options.allow_tools and options.deny_tools leave no tool"},
		{"no workspace", local, filepath.Join(ws, "missing"), "workspace", "--workspace " + filepath.Join(ws, "missing") + ": no such directory", "workspace " + filepath.Join(ws, "missing") + ": no such directory"},
		{"record and replay", with(func(o *Options) { o.Record, o.Replay = "/r.jsonl", "/p.jsonl" }), ws, "record", "--record and --replay together make no sense", "options.record and options.replay together"},
		{"bad base URL", Options{BaseURL: "ftp://example.com"}, ws, "base_url", `invalid base URL "ftp://example.com"`, "in options.base_url"},
		{"no key for a remote model", Options{BaseURL: "https://api.openai.com/v1"}, ws, "base_url",
			"OPENAI_API_KEY is not set; export it, point --base-url at a local server, or use --replay FILE",
			"point options.base_url at a local server, or use options.replay FILE"},
		{"missing cassette", with(func(o *Options) { o.Replay = filepath.Join(ws, "none.jsonl") }), ws, "replay", "--replay:", "options.replay:"},
	}
	cli := func(f string) string { return "--" + strings.ReplaceAll(f, "_", "-") }
	gw := func(f string) string {
		if f == "workspace" {
			return f
		}
		return "options." + f
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := s.Prepare(tt.o, tt.dir)
			var bad *OptionError
			if !errors.As(err, &bad) {
				t.Fatalf("Prepare: %v, want an *OptionError", err)
			}
			if bad.Field != tt.field || !strings.Contains(bad.Message(cli), tt.cli) || !strings.Contains(bad.Message(gw), tt.gw) {
				t.Errorf("field %s: %q / %q, want %s: %q / %q", bad.Field, bad.Message(cli), bad.Message(gw), tt.field, tt.cli, tt.gw)
			}
		})
	}
	o, got, err := s.Prepare(with(func(o *Options) { o.DenyTools = []string{"bash"} }), ws)
	if err != nil || got == nil {
		t.Fatalf("good options: %v", err)
	}
	if strings.Contains(strings.Join(o.Tools, ","), "bash") || !strings.Contains(strings.Join(o.Tools, ","), "read_file") ||
		strings.Contains(strings.Join(o.Tools, ","), "send_email") {
		t.Errorf("offered tools %v: want the builtins but bash, and no unconfigured effect", o.Tools)
	}
}

// A bad base URL that came from the environment or config.toml is blamed
// on where it came from, not on --base-url, which the user did not give.
func TestPrepareSaysWhereTheBaseURLCameFrom(t *testing.T) {
	t.Parallel()
	db, err := store.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := New(Config{DB: db, Home: t.TempDir(), BaseURL: "localhost:8080/v1", BaseURLFrom: "OPENAI_BASE_URL"})
	if err != nil {
		t.Fatal(err)
	}
	cli := func(f string) string { return "--" + strings.ReplaceAll(f, "_", "-") }
	for _, tt := range []struct{ url, want string }{
		{"localhost:8080/v1", `invalid base URL "localhost:8080/v1" in OPENAI_BASE_URL: want http(s)://host[:port]/v1; fix it there, or override it with --base-url`},
		{"ftp://example.com", `invalid base URL "ftp://example.com": want http(s)://host[:port]/v1 in --base-url`},
	} {
		_, _, err := s.Prepare(Options{BaseURL: tt.url}, t.TempDir())
		var bad *OptionError
		if !errors.As(err, &bad) || bad.Message(cli) != tt.want {
			t.Errorf("Prepare with base URL %q: %v, want %q", tt.url, err, tt.want)
		}
	}
}

// A run's options survive the store, including runs stored before there
// was one options type.
func TestDecodeOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		kind   string
		config string
		want   Options
	}{
		{"today's", store.KindRun, `{"model":"m","base_url":"http://x/v1","max_turns":7,"until":"DONE","max_iterations":2,"timeout":"1m30s","tools":["bash"]}`,
			Options{Model: "m", BaseURL: "http://x/v1", MaxTurns: 7, Until: "DONE", MaxIterations: 2, Timeout: Duration(90e9), Tools: []string{"bash"}}},
		{"an older gateway run", store.KindRun, `{"model":"m","base_url":"http://x/v1","max_turns":0,"offered":["bash"],"timeout":"30m0s","replay":"/c.jsonl"}`,
			Options{Model: "m", BaseURL: "http://x/v1", Timeout: Duration(30 * 60e9), Replay: "/c.jsonl"}},
		{"an older harness run", store.KindHarness, `{"model":{"name":"m","base_url":"http://x/v1","max_attempts":3,"replay":"/c.jsonl"},"max_turns":5,"tools":["read_file"],"parallel":2,"phase_timeout":"30m0s","context_budget":9}`,
			Options{Model: "m", BaseURL: "http://x/v1", ModelAttempts: 3, Replay: "/c.jsonl", MaxTurns: 5, Tools: []string{"read_file"},
				Harness: true, Parallel: 2, PhaseTimeout: Duration(30 * 60e9), ContextBudget: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeOptions(&store.Run{ID: "r", Kind: tt.kind, Config: json.RawMessage(tt.config)})
			if err != nil {
				t.Fatal(err)
			}
			if string(got.encode()) != string(tt.want.encode()) {
				t.Errorf("decoded %s, want %s", got.encode(), tt.want.encode())
			}
		})
	}
	o := Options{Model: "m", Timeout: Duration(5e9), Harness: true, Parallel: 3}
	back, err := DecodeOptions(&store.Run{ID: "r", Kind: store.KindHarness, Config: o.encode()})
	if err != nil || string(back.encode()) != string(o.encode()) {
		t.Errorf("round trip: %s, %v; want %s", back.encode(), err, o.encode())
	}
}

func createRun(t *testing.T, s *Supervisor, prompt string) *store.Run {
	t.Helper()
	r, err := s.Create(context.Background(), NewRun{Prompt: prompt, Workspace: t.TempDir(), Options: Options{Model: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A child's intent is acked only after it is recorded: one recorded but
// never acked (the parent died in between) cannot have happened, so
// recovery forgets it and the effect may be made; one acked may have
// happened, so it becomes unknown and is not repeated.
func TestIntentAckedAfterItIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newTest(t)
	r := createRun(t, s, "notify")
	intent := func(key string) store.Receipt {
		return store.Receipt{Key: key, RunID: r.ID, PhaseID: "notify", Attempt: 1, Tool: "send_email", Type: "email_sent",
			Args: json.RawMessage(`{"to":"bob@example.com"}`)}
	}
	// "lost": the parent recorded the intent and died before acking it.
	if _, err := db.BeginEffect(ctx, intent("lost"), false); err != nil {
		t.Fatal(err)
	}
	// "acked": the go-ahead went out, then the parent died.
	if c := s.intent(ctx, intent("acked")); !c.Proceed {
		t.Fatalf("a new intent: %+v, want proceed", c)
	}
	if rc, _ := db.ReceiptByKey(ctx, "acked"); !rc.Acked || rc.State != event.StatusPending {
		t.Fatalf("after the go-ahead: %+v", rc)
	}

	sink := newSink(t, db, r.ID)
	if err := s.settle(ctx, r, sink, false); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ReceiptByKey(ctx, "lost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the never-acked intent: %v, want it forgotten", err)
	}
	if c := s.intent(ctx, intent("lost")); !c.Proceed {
		t.Errorf("the never-acked effect asked again: %+v, want proceed", c)
	}
	if c := s.intent(ctx, intent("acked")); !c.Unknown || c.Proceed {
		t.Errorf("the acked effect asked again: %+v, want unknown", c)
	}
}

// resume --resend-unknown sends each effect whose outcome was lost from
// its recorded arguments, under its own key, and records the receipt: the
// model need not ask again. Done effects are never sent again.
func TestResendUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var posts []string
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_ = req.ParseForm()
		body := req.Form.Get("text")
		if body == "" {
			var m map[string]any
			_ = json.NewDecoder(req.Body).Decode(&m)
			body, _ = m["text"].(string)
		}
		mu.Lock()
		posts = append(posts, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"channel":"C1","ts":"1700000000.0001"}`))
	}))
	defer slack.Close()
	s, db := newTest(t, "AGENT_SLACK_TOKEN=xoxb-test", "AGENT_SLACK_API_URL="+slack.URL)
	r := createRun(t, s, "post it")
	args := json.RawMessage(`{"channel":"#ops","text":"deploy done"}`)
	var argMap map[string]any
	_ = json.Unmarshal(args, &argMap)
	key := tools.EffectKey(tools.EffectScope{RunID: r.ID}, tools.Effects[1], argMap)
	if _, err := db.BeginEffect(ctx, store.Receipt{Key: key, RunID: r.ID, Tool: "slack_post", Type: "slack_message_sent", Args: args, Acked: true}, false); err != nil {
		t.Fatal(err)
	}
	sink := newSink(t, db, r.ID)
	if err := s.settle(ctx, r, sink, false); err != nil {
		t.Fatal(err)
	}
	if rc, _ := db.ReceiptByKey(ctx, key); rc.State != event.StatusUnknown || len(posts) != 0 {
		t.Fatalf("without --resend-unknown: %s, %d posts; want unknown and none", rc.State, len(posts))
	}
	for range 2 {
		if err := s.settle(ctx, r, sink, true); err != nil {
			t.Fatal(err)
		}
	}
	if len(posts) != 1 || posts[0] != "deploy done" {
		t.Errorf("posts %q, want exactly the recorded one", posts)
	}
	if rc, _ := db.ReceiptByKey(ctx, key); rc.State != event.StatusDone || !strings.Contains(string(rc.Details), "1700000000.0001") {
		t.Errorf("receipt after the resend: %+v", rc)
	}
	if got := sink.types(); got != "warning receipt.recorded warning" {
		t.Errorf("events %s", got)
	}
}

// A resumed single run is given where it stood, as the store has it: in
// this process, in a child, or after a gateway reclaim alike.
func TestLoopSpecOnResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newTest(t)
	r := createRun(t, s, "edit it")
	sink := newSink(t, db, r.ID)
	for _, e := range []event.Event{
		event.New(event.MessageCompleted, event.MessageData{Role: "user", Text: "edit it"}),
		event.New(event.MessageCompleted, event.MessageData{Role: "assistant", ToolCalls: []event.ToolCall{
			{ID: "c1", Name: "write_file", Arguments: `{"path":"a.txt","content":"x"}`}}}),
		event.New(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "write_file", Args: json.RawMessage(`{}`)}),
		event.New(event.CheckpointCreated, event.CheckpointData{Path: "a.txt", CallID: "c1", Tool: "write_file"}),
	} {
		if err := sink.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	r, _ = db.GetRun(ctx, r.ID)
	spec, err := s.loopSpec(ctx, r, Drive{Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.History) != 2 || len(spec.Started) != 1 || spec.Started[0] != "c1" ||
		len(spec.Checkpointed) != 1 || spec.Checkpointed[0] != "a.txt" || spec.Turns != 1 || spec.Continue {
		t.Errorf("spec = history %d, started %v, checkpointed %v, turns %d, continue %v",
			len(spec.History), spec.Started, spec.Checkpointed, spec.Turns, spec.Continue)
	}
	// A run that ended at its turn limit continues with a fresh budget.
	if err := sink.Emit(ctx, event.New(event.RunFailed, event.RunFinishedData{Status: "failed", Reason: event.ReasonMaxTurns})); err != nil {
		t.Fatal(err)
	}
	r, _ = db.GetRun(ctx, r.ID)
	if spec, _ = s.loopSpec(ctx, r, Drive{Resume: true}); !spec.Continue {
		t.Errorf("a run that hit max_turns resumes without a fresh budget")
	}
}

// A run that completed or was cancelled is not resumable; one that
// failed, was interrupted or was left running is.
func TestLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newTest(t)
	for _, tt := range []struct {
		end       string
		resumable bool
	}{{event.RunCompleted, false}, {event.RunCancelled, false}, {event.RunFailed, true}, {event.RunInterrupted, true}, {"", true}} {
		r := createRun(t, s, "x")
		if tt.end != "" {
			if err := newSink(t, db, r.ID).Emit(ctx, event.New(tt.end, event.RunFinishedData{})); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := s.Load(ctx, r.ID[:8])
		var gone *NotResumableError
		if errors.As(err, &gone) == tt.resumable || (tt.resumable && err != nil) {
			t.Errorf("ended %q: Load = %v, want resumable %v", tt.end, err, tt.resumable)
		}
	}
}

// An effect already made under a key is not made again; made with other
// arguments under the same key, the answer says so, in this process and
// to a child alike.
func TestOutboxDifferentArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newTest(t)
	r := createRun(t, s, "notify")
	started := json.RawMessage(`{"to":"ops@example.com","subject":"Deploy","body":"Deploy started"}`)
	failed := json.RawMessage(`{"to":"ops@example.com","subject":"Deploy","body":"Deploy FAILED"}`)
	ob := &storeOutbox{db: db, runID: r.ID}
	in := tools.Intent{Tool: "send_email", Key: "send_email-k", ReceiptType: "email_sent", Args: started}
	if got, err := ob.Begin(ctx, in); got != nil || err != nil {
		t.Fatalf("first: %v %v, want go ahead", got, err)
	}
	if err := newSink(t, db, r.ID).Emit(ctx, event.New(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: in.Key})); err != nil {
		t.Fatal(err)
	}
	// The same again (whitespace aside): already done.
	in.Args = json.RawMessage(`{ "body": "Deploy started", "subject": "Deploy", "to": "ops@example.com" }`)
	if got, err := ob.Begin(ctx, in); err != nil || got == nil || got.Key != in.Key {
		t.Errorf("the same effect again: %v %v, want its receipt", got, err)
	}
	in.Args = failed
	var different *tools.DifferentError
	if _, err := ob.Begin(ctx, in); !errors.As(err, &different) || string(different.Args) != string(started) {
		t.Errorf("other content: %v, want a *tools.DifferentError with the recorded arguments", err)
	}
	c := s.intent(ctx, store.Receipt{Key: in.Key, RunID: r.ID, Tool: "send_email", Type: "email_sent", Args: failed})
	if !c.Different || c.Proceed || c.Receipt == nil || string(c.Args) != string(started) {
		t.Errorf("a child's intent with other content: %+v", c)
	}
}

// MCP entries in the tool lists (what jobs' allowlists and run.start's
// options check too): a configured server's, resolved when it starts.
func TestOfferedToolsWithMCPServers(t *testing.T) {
	s, _ := newTest(t)
	cfg := "[mcp_servers.tracker]\ncommand = \"tracker-mcp\"\n[mcp_servers.docs]\nurl = \"http://127.0.0.1:1/mcp\"\n"
	if err := os.WriteFile(filepath.Join(s.cfg.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		allow, deny []string
		want, err   string
	}{
		{nil, nil, "read_file write_file edit_file list_files grep bash task mcp__docs mcp__tracker", ""},
		{nil, []string{"mcp__docs", "bash", "task"}, "read_file write_file edit_file list_files grep mcp__tracker", ""},
		{[]string{"mcp__tracker"}, nil, "mcp__tracker", ""},
		{[]string{"grep", "mcp__tracker__create_issue"}, nil, "grep mcp__tracker__create_issue", ""},
		{[]string{"mcp__github"}, nil, "", `{allow_tools}: "mcp__github" names MCP server "github", which is not configured`},
		{nil, []string{"mcp__github__x"}, "", `{deny_tools}: "mcp__github__x" names MCP server "github"`},
	} {
		got, err := s.OfferedTools(ws, Options{AllowTools: c.allow, DenyTools: c.deny})
		var oe *OptionError
		switch {
		case c.err != "" && (!errors.As(err, &oe) || !strings.Contains(oe.Msg, c.err)):
			t.Errorf("allow %v deny %v: err %v, want %q", c.allow, c.deny, err, c.err)
		case c.err == "" && (err != nil || strings.Join(got, " ") != c.want):
			t.Errorf("allow %v deny %v = %v %v, want %s", c.allow, c.deny, got, err, c.want)
		}
	}
}
