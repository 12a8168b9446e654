package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"agent/adapter"
	"agent/checkpoint"
	"agent/config"
	"agent/console"
	"agent/event"
	"agent/llm"
	"agent/runner"
	"agent/store"
	"agent/tools"
)

// runConfig is the stored run configuration, with the CLI's checks.
type runConfig struct{ store.RunConfig }

// Flags shared by run and resume.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print events as JSON lines on stdout and nothing else there"},
		&cli.StringFlag{Name: "model", Usage: "model name (env AGENT_MODEL, default " + config.DefaultModel + ")"},
		&cli.StringFlag{Name: "base-url", Usage: "OpenAI-compatible endpoint (env OPENAI_BASE_URL, default " + config.DefaultBaseURL + ")"},
		&cli.IntFlag{Name: "max-turns", Usage: "model calls allowed per iteration (default 50)"},
		&cli.IntFlag{Name: "model-attempts", Usage: "attempts per model call before giving up on 429/5xx/connection errors (default 5)"},
		&cli.DurationFlag{Name: "timeout", Usage: "stop the run after this long, e.g. 10m (default: no limit)"},
		&cli.StringFlag{Name: "record", Usage: "append every model exchange to this cassette `FILE`"},
		&cli.StringFlag{Name: "replay", Usage: "answer model calls from this cassette `FILE`, offline"},
	}
}

func runCommand() *cli.Command {
	flags := append(modelFlags(),
		&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "directory the tools work in (default: the current directory)"},
		&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer only these tools, comma separated"},
		&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer these tools, comma separated"},
		&cli.StringFlag{Name: "until", Usage: "Ralph loop: repeat with fresh context until the final message has this `PROMISE` line"},
		&cli.IntFlag{Name: "max-iterations", Usage: "Ralph loop: give up after N iterations (default 10)"},
		&cli.StringFlag{Name: "gateway", Usage: "send the run to a gateway: `URL`, or bare for $AGENT_GATEWAY or " + defaultGateway},
		&cli.StringFlag{Name: "session", Usage: "with --gateway: run in this gateway session, seeing its earlier messages (default: a new session)"},
	)
	return &cli.Command{
		Name:      "run",
		Usage:     "run one agent loop in this process",
		ArgsUsage: "PROMPT (or - to read it from stdin)",
		Description: "The model works in the workspace with read_file, write_file, edit_file, list_files, grep and bash.\n" +
			"Paths are confined to the workspace. The run is persisted as it goes; after a crash or Ctrl-C,\n" +
			"'agent resume RUN_ID' continues it without repeating finished tool calls.\n\n" +
			"Exit codes: 0 done, 1 not accomplished (max turns/iterations), 2 bad input, 3 model provider failure,\n" +
			"4 run busy, 130 interrupted (resumable).\n\n" +
			"Examples:\n" +
			"  agent run \"write a haiku to poem.txt\"\n" +
			"  agent run --json --deny-tools bash \"summarise README.md\"\n" +
			"  agent run --until DONE --max-iterations 5 \"make go test ./... pass\"\n" +
			"  agent run --replay examples/hello.cassette.jsonl \"write hello.txt\"",
		Flags:  flags,
		Action: runAction,
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "continue a run after a crash, Ctrl-C or failure",
		ArgsUsage: "RUN_ID",
		Description: "Rebuilds the conversation from the store and continues with no new prompt.\n" +
			"Tool calls that finished are never run again. A call that started but has no result is re-run\n" +
			"only if it is read-only; otherwise the model is told it was interrupted and decides.\n" +
			"Side effects (send_email, slack_post) never repeat: one whose outcome was lost in a crash is not\n" +
			"sent again unless you pass --resend-unknown after checking it did not arrive.\n" +
			"RUN_ID may be a unique prefix. A run held by a live process exits 4.",
		Flags: append(modelFlags(), &cli.BoolFlag{Name: "resend-unknown",
			Usage: "allow side effects whose outcome is unknown (lost in a crash) to be sent again"}),
		Action: resumeAction,
	}
}

func runAction(c *cli.Context) error {
	prompt, err := readPrompt(c)
	if err != nil {
		return err
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	cfg := runConfig{store.RunConfig{
		Model:         config.Pick(c.String("model"), settings.Model),
		BaseURL:       config.Pick(c.String("base-url"), settings.BaseURL),
		MaxTurns:      config.PickInt(c.Int("max-turns"), settings.MaxTurns),
		ModelAttempts: config.PickInt(c.Int("model-attempts"), settings.ModelAttempts),
		AllowTools:    splitList(c.StringSlice("allow-tools")),
		DenyTools:     splitList(c.StringSlice("deny-tools")),
		Until:         strings.TrimSpace(c.String("until")),
		MaxIterations: c.Int("max-iterations"),
	}}
	if err := cfg.validate(); err != nil {
		return err
	}
	if addr, ok := gatewayAddress(c); ok {
		return runViaGateway(c, addr, prompt, cfg)
	}
	if c.String("session") != "" {
		return usageErrorf("--session needs --gateway: sessions live in the gateway")
	}
	dir := c.String("workspace")
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("find the current directory: %w", err)
		}
	}
	ws, err := tools.NewWorkspace(dir)
	if err != nil {
		return usageErrorf("workspace: %v", err)
	}
	runID := newRunID()
	outbox := &storeOutbox{runID: runID}
	set, err := fastPathTools(ws, cfg, runID, outbox)
	if err != nil {
		return err
	}
	model, err := modelSettings(c, cfg.Model, cfg.BaseURL, cfg.ModelAttempts)
	if err != nil {
		return err
	}
	if err := checkModelAccess(model, settings.APIKey); err != nil {
		return err
	}

	db, err := store.Open(config.DBPath(settings.Home))
	if err != nil {
		return err
	}
	defer db.Close()
	raw, _ := json.Marshal(cfg)
	r := &store.Run{
		ID: runID, Kind: "run", Prompt: prompt, Workspace: ws.Root(), Model: cfg.Model,
		Config: raw, MaxIterations: cfg.MaxIterations, CompletionPromise: cfg.Until,
	}
	owner := store.NewLeaseOwner()
	if err := db.CreateRun(c.Context, r, owner, leaseTTL()); err != nil {
		return err
	}
	outbox.db = db
	return drive(c, db, r, owner, cfg, model, set, settings.APIKey, runner.State{}, false)
}

func resumeAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("resume needs exactly one RUN_ID; see 'agent runs list'")
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	db, err := store.Open(config.DBPath(settings.Home))
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := db.GetRun(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	if r.Status == "completed" || r.Status == "cancelled" {
		return fmt.Errorf("run %s is already %s: %w", r.ID, r.Status, errNotResumable)
	}
	if r.Kind == store.KindHarness {
		return resumeHarness(c, db, r, settings.APIKey)
	}
	var cfg runConfig
	if err := json.Unmarshal(r.Config, &cfg); err != nil {
		return fmt.Errorf("run %s has unreadable settings: %v: %w", r.ID, err, errNotResumable)
	}
	cfg.Model = config.Pick(c.String("model"), cfg.Model)
	cfg.BaseURL = config.Pick(c.String("base-url"), cfg.BaseURL)
	cfg.MaxTurns = config.PickInt(c.Int("max-turns"), cfg.MaxTurns)
	cfg.ModelAttempts = config.PickInt(c.Int("model-attempts"), cfg.ModelAttempts)
	if err := cfg.validate(); err != nil {
		return err
	}
	ws, err := tools.NewWorkspace(r.Workspace)
	if err != nil {
		return fmt.Errorf("run %s workspace: %v: %w", r.ID, err, errNotResumable)
	}
	outbox := &storeOutbox{db: db, runID: r.ID, resend: c.Bool("resend-unknown")}
	set, err := fastPathTools(ws, cfg, r.ID, outbox)
	if err != nil {
		return err
	}
	model, err := modelSettings(c, cfg.Model, cfg.BaseURL, cfg.ModelAttempts)
	if err != nil {
		return err
	}
	if err := checkModelAccess(model, settings.APIKey); err != nil {
		return err
	}
	owner := store.NewLeaseOwner()
	if err := db.AcquireLease(c.Context, r.ID, owner, leaseTTL()); err != nil {
		return err
	}
	state, err := loadState(c.Context, db, r)
	if err == nil {
		// Nothing is carrying out the intents a crash left pending.
		_, err = db.MarkPendingUnknown(c.Context, r.ID, "")
	}
	if err != nil {
		_ = db.ReleaseLease(context.WithoutCancel(c.Context), r.ID, owner)
		return err
	}
	if err := db.SetRunStatus(c.Context, r.ID, "running"); err != nil {
		return err
	}
	return drive(c, db, r, owner, cfg, model, set, settings.APIKey, state, true)
}

// fastPathTools is the fast path's tool set: the workspace tools and the
// side-effecting ones, guarded by the run's outbox.
func fastPathTools(ws *tools.Workspace, cfg runConfig, runID string, outbox tools.Outbox) (*tools.Set, error) {
	effects := tools.EffectTools(tools.EffectScope{RunID: runID}, outbox, nil)
	deny := tools.WithoutUnconfigured(cfg.AllowTools, cfg.DenyTools, nil)
	set, err := tools.NewSet(ws, tools.Options{Allow: cfg.AllowTools, Deny: deny}, effects...)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return set, nil
}

// loadState rebuilds where a run stood from the store.
func loadState(ctx context.Context, db *store.DB, r *store.Run) (runner.State, error) {
	history, err := db.Conversation(ctx, r.ID)
	if err != nil {
		return runner.State{}, err
	}
	calls, err := db.ToolCalls(ctx, r.ID)
	if err != nil {
		return runner.State{}, err
	}
	cps, err := db.Checkpoints(ctx, r.ID)
	if err != nil {
		return runner.State{}, err
	}
	st := runner.State{
		Iteration: r.IterationCount,
		History:   history,
		Turns:     r.Turns,
		Usage:     llm.Usage{PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens},
	}
	for _, tc := range calls {
		if tc.Status == "started" {
			st.Started = append(st.Started, tc.CallID)
		}
	}
	for _, cp := range cps {
		st.Checkpointed = append(st.Checkpointed, cp.Path)
	}
	return st, nil
}

// drive runs the loop for a run this process holds the lease of, and
// records how it ended. It returns an *exitError for any non-zero ending.
func drive(c *cli.Context, db *store.DB, r *store.Run, owner string, cfg runConfig, ms adapter.Model, set *tools.Set, apiKey string, state runner.State, resumed bool) error {
	home, err := config.Home() // where checkpoints keep file contents
	if err != nil {
		return err
	}
	d, err := startDriving(c, db, r, owner, false)
	if err != nil {
		return err
	}
	defer d.close()
	model, closeModel, err := openModel(ms, apiKey, d.sink)
	if err != nil {
		return err
	}
	defer closeModel()

	if err := d.sink.Emit(d.persist, event.New(event.RunStarted, event.RunStartedData{
		Prompt: r.Prompt, Model: cfg.Model, Workspace: r.Workspace, Tools: set.Names(),
		Resumed: resumed, Until: cfg.Until, MaxIterations: cfg.MaxIterations,
	})); err != nil {
		return err
	}
	instructions, warn := readInstructions(r.Workspace)
	if warn != "" {
		_ = d.sink.Emit(d.persist, event.New(event.Warning, event.WarningData{Message: warn}))
	}
	res, runErr := runner.Run(d.ctx, runner.Config{
		Model: model, ModelName: cfg.Model, Tools: set, Sink: d.sink,
		MaxTurns: cfg.MaxTurns, Until: cfg.Until, MaxIterations: cfg.MaxIterations,
		Instructions: instructions, Checkpoints: checkpoint.BlobsIn(home),
	}, r.Prompt, state)

	typ, fin := finalEvent(d.ctx, res, runErr)
	if runErr != nil {
		// The loop stopped early; the totals so far are in the store.
		fin.Turns, fin.Usage = d.totals()
	}
	return d.finish(typ, fin)
}

var (
	errTimeout     = errors.New("timeout")
	errInterrupted = errors.New("interrupted")
	errLeaseLost   = errors.New("lease lost")
)

// finalEvent decides how a run ended: its last event type and data.
func finalEvent(ctx context.Context, res runner.Result, err error) (string, event.RunFinishedData) {
	fin := event.RunFinishedData{
		Status: res.Status, Result: res.Text, Turns: res.Turns, Reason: res.Reason, ExitCode: res.ExitCode(),
		Usage: event.Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens},
	}
	if err == nil {
		if res.Status == runner.StatusCompleted {
			return event.RunCompleted, fin
		}
		return event.RunFailed, fin
	}
	cause := context.Cause(ctx)
	var model *llm.Error
	switch {
	case errors.Is(cause, errInterrupted):
		fin.Status, fin.Reason, fin.ExitCode = "interrupted", "interrupted by signal; resume to continue", 130
		return event.RunInterrupted, fin
	case errors.Is(cause, errTimeout):
		fin.Status, fin.Reason, fin.ExitCode = "failed", cause.Error(), 1
	case errors.Is(cause, errLeaseLost):
		fin.Status, fin.Reason, fin.ExitCode = "interrupted", "lost the run lease to another process", 4
		return event.RunInterrupted, fin
	case errors.As(err, &model):
		fin.Status, fin.Reason, fin.ExitCode = "failed", model.Error(), 3
	default:
		fin.Status, fin.Reason, fin.ExitCode = "failed", err.Error(), 1
	}
	return event.RunFailed, fin
}

// cancelOnSignal cancels the run on SIGINT or SIGTERM so it can be saved as
// interrupted; a second signal exits at once.
func cancelOnSignal(ctx context.Context, cancel context.CancelCauseFunc) func() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			cancel(errInterrupted)
		case <-done:
			return
		}
		select {
		case <-sig:
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}

// keepLease renews the run lease until stopped. Losing it cancels the run:
// another process now drives it.
func keepLease(ctx context.Context, cancel context.CancelCauseFunc, db *store.DB, runID, owner string) func() {
	ttl := leaseTTL()
	return repeat(ctx, ttl/3, func() bool {
		if err := db.RenewLease(context.WithoutCancel(ctx), runID, owner, ttl); errors.Is(err, store.ErrLeaseLost) {
			cancel(errLeaseLost)
			return false
		}
		return true
	})
}

// leaseTTL is how long a lease outlives its last heartbeat. AGENT_LEASE_TTL
// exists for tests.
func leaseTTL() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("AGENT_LEASE_TTL")); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}

// display shows persisted events: the JSON-lines stream, the fast path's
// printer or the harness's phase board.
type display interface {
	Print(event.Event)
	Close()
}

// jsonDisplay is --json: every event as one line on stdout.
type jsonDisplay struct{ enc *event.Encoder }

func (d jsonDisplay) Print(e event.Event) { _ = d.enc.Encode(e) }
func (d jsonDisplay) Close()              {}

// newDisplay picks the display for a command's output flags.
func newDisplay(c *cli.Context, harness bool) display {
	out, errw := c.App.Writer, c.App.ErrWriter
	if c.Bool("json") {
		return jsonDisplay{enc: event.NewEncoder(out)}
	}
	if harness {
		f, isFile := out.(*os.File)
		return console.NewBoard(out, errw, isFile && console.IsTerminal(f))
	}
	f, isFile := errw.(*os.File)
	return console.NewPrinter(out, errw, isFile && console.IsTerminal(f))
}

// runSink persists each event, then shows it. It is safe for concurrent
// use: harness phases run in parallel.
type runSink struct {
	mu      sync.Mutex // shown in seq order, even from parallel phases
	journal *store.Journal
	show    display
}

func (s *runSink) Emit(ctx context.Context, e event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.journal.Append(ctx, e)
	if err != nil {
		return err
	}
	s.show.Print(e)
	return nil
}

func (s *runSink) close() {
	_ = s.journal.Flush(context.Background())
	s.show.Close()
}

// modelSettings gathers the model flags of run, resume and harness.
func modelSettings(c *cli.Context, name, baseURL string, attempts int) (adapter.Model, error) {
	m := adapter.Model{Name: name, BaseURL: baseURL, MaxAttempts: attempts}
	for _, f := range []struct {
		flag string
		dst  *string
	}{{"record", &m.Record}, {"replay", &m.Replay}} {
		if path := c.String(f.flag); path != "" {
			abs, err := filepath.Abs(path)
			if err != nil {
				return m, usageErrorf("--%s: %v", f.flag, err)
			}
			*f.dst = abs
		}
	}
	return m, nil
}

// openModel makes the model client, wrapped for --record or replaced by
// --replay. Retries become retry events.
func openModel(m adapter.Model, apiKey string, sink runner.Sink) (llm.Model, func(), error) {
	var model llm.Model
	closers := []func(){}
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	if path := m.Replay; path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, usageErrorf("--replay: %v", err)
		}
		defer f.Close()
		if model, err = llm.NewReplayer(f, m.Scope); err != nil {
			return nil, nil, usageErrorf("--replay %s: %v", path, err)
		}
	} else {
		client, err := llm.New(llm.Config{
			BaseURL: m.BaseURL, APIKey: apiKey, MaxAttempts: m.MaxAttempts,
			OnRetry: func(ri llm.RetryInfo) {
				_ = sink.Emit(context.Background(), event.New(event.Retry, event.RetryData{
					Attempt: ri.Attempt, MaxAttempts: ri.MaxAttempts, DelayMS: ri.Delay.Milliseconds(),
					Error: ri.Err.Error(), Status: ri.Status,
				}))
			},
			UserAgent: "agent/" + version,
		})
		if err != nil {
			return nil, nil, usageErrorf("--base-url: %v", err)
		}
		model = client
	}
	if path := m.Record; path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, nil, usageErrorf("--record: %v", err)
		}
		closers = append(closers, func() { f.Close() })
		model = llm.NewRecorder(model, f, m.Scope)
	}
	return model, closeAll, nil
}

// checkModelAccess fails early, before any state is written or request
// made, when the model cannot possibly be reached.
func checkModelAccess(m adapter.Model, apiKey string) error {
	if m.Replay != "" {
		if _, err := os.Stat(m.Replay); err != nil {
			return usageErrorf("--replay: %v", err)
		}
		return nil
	}
	u, err := url.Parse(m.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("invalid base URL %q: want http(s)://host[:port]/v1", m.BaseURL)
	}
	if apiKey == "" && !isLoopback(u.Hostname()) {
		return usageErrorf("OPENAI_API_KEY is not set; export it, point --base-url at a local server, or use --replay FILE")
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readPrompt joins the arguments, or reads stdin for "-" or no arguments
// when stdin is not a terminal.
func readPrompt(c *cli.Context) (string, error) {
	args := c.Args().Slice()
	var prompt string
	switch {
	case len(args) == 1 && args[0] == "-", len(args) == 0 && !stdinIsTerminal(c.App.Reader):
		b, err := io.ReadAll(io.LimitReader(c.App.Reader, 1<<20))
		if err != nil {
			return "", fmt.Errorf("read the prompt from stdin: %w", err)
		}
		prompt = string(b)
	default:
		prompt = strings.Join(args, " ")
	}
	prompt = strings.TrimSpace(prompt)
	if prompt == "" {
		return "", usageErrorf("empty prompt; usage: agent run [flags] PROMPT (or - to read stdin)")
	}
	return prompt, nil
}

func stdinIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && console.IsTerminal(f)
}

// readInstructions returns the workspace's AGENTS.md, if any.
func readInstructions(workspace string) (string, string) {
	const limit = 64 << 10
	b, err := os.ReadFile(filepath.Join(workspace, "AGENTS.md"))
	if errors.Is(err, os.ErrNotExist) {
		return "", ""
	}
	if err != nil {
		return "", fmt.Sprintf("AGENTS.md not read: %v", err)
	}
	if len(b) > limit {
		return string(b[:limit]), fmt.Sprintf("AGENTS.md is %d bytes; only the first %d were used", len(b), limit)
	}
	return string(b), ""
}

func (cfg runConfig) validate() error {
	switch {
	case cfg.MaxTurns < 0:
		return usageErrorf("--max-turns must be positive")
	case cfg.ModelAttempts < 0:
		return usageErrorf("--model-attempts must be positive")
	case cfg.MaxIterations < 0:
		return usageErrorf("--max-iterations must be positive")
	case cfg.MaxIterations > 0 && cfg.Until == "":
		return usageErrorf("--max-iterations needs --until PROMISE, the line that marks the task complete")
	case strings.Contains(cfg.Until, "\n"):
		return usageErrorf("--until must be a single line")
	}
	return nil
}

// newRunID returns a random id, so that short prefixes tell runs apart.
func newRunID() string { return uuid.NewString() }

func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}
