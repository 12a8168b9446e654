package cli

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"agent/chat"
	"agent/config"
	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/llm"
	"agent/store"
	"agent/supervisor"
)

// Flags shared by run, harness and resume.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print events as JSON lines on stdout and nothing else there"},
		&cli.StringFlag{Name: "model", Usage: "model name (env AGENT_MODEL, default " + config.DefaultModel + ")"},
		&cli.StringFlag{Name: "base-url", Usage: "OpenAI-compatible endpoint (env OPENAI_BASE_URL, default " + config.DefaultBaseURL + ")"},
		// Numeric flags keep a zero Value, so flagOptions (c.IsSet) can lay
		// only what the user gave over the config file or a resumed run's
		// options; DefaultText says the default instead of urfave's zero.
		&cli.IntFlag{Name: "max-turns", Usage: "model calls allowed per iteration", DefaultText: "50, or max_turns in config.toml"},
		&cli.IntFlag{Name: "max-repeats", Usage: "stop when the model makes the same tool call `N` times in a row, refusing the 2 before; a bash or MCP call counts only with the same result, so polling for a change goes on", DefaultText: "5"},
		&cli.IntFlag{Name: "model-attempts", Usage: "attempts per model call before giving up on 429/5xx/connection errors", DefaultText: "5, or model_attempts in config.toml"},
		&cli.DurationFlag{Name: "model-idle-timeout", Usage: "give up on a model reply after this long without a data chunk; keep-alive comments do not count, and a call that stalls twice is not tried again", DefaultText: console.DurationText(llm.DefaultIdleTimeout)},
		&cli.DurationFlag{Name: "model-call-timeout", Usage: "give up on a model call, its retries and waits included, after this long", DefaultText: console.DurationText(llm.DefaultCallTimeout)},
		&cli.DurationFlag{Name: "timeout", Usage: "stop the run after this long, e.g. 10m", DefaultText: "no limit"},
		&cli.IntFlag{Name: "context-window", Usage: "the model's context window in `TOKENS`: the conversation is compacted before a request would pass it", DefaultText: "context_window in config.toml, or the model's known window"},
		&cli.StringFlag{Name: "compact", Usage: "`MODE`: auto, compact the conversation when it outgrows the context window, off, a context error ends the run (exit 3), or now, the session's earlier conversation first", DefaultText: "auto"},
		&cli.IntFlag{Name: "max-tokens", Usage: "stop once the run has used this many `TOKENS` (prompt plus completion); on resume, this many more", DefaultText: "no limit"},
		&cli.Float64Flag{Name: "max-cost", Usage: "stop once the run has cost this many `USD`, at [prices.\"MODEL\"] in config.toml; on resume, this much more", DefaultText: "no limit"},
		&cli.StringFlag{Name: "sandbox", Usage: "what the model's commands (bash, evidence checks) may do, `MODE`: workspace-write " +
			"(write only in the workspace and $TMPDIR), read-only, or off; AGENT_HOME is unreadable and the network off unless off", DefaultText: "workspace-write"},
		&cli.BoolFlag{Name: "network", Usage: "give the model's commands the network in a sandboxed mode"},
		&cli.StringFlag{Name: "record", Usage: "append every model exchange to this cassette `FILE`"},
		&cli.StringFlag{Name: "replay", Usage: "answer model calls from this cassette `FILE`, offline"},
		&cli.StringSliceFlag{Name: "ask", Usage: "ask a person before these tool calls run, `RULES` like bash, 'bash(git push*)', " +
			"'write_file(*.go)', mcp__SERVER or effects (comma separated, repeatable); on a terminal it asks inline, " +
			"otherwise the run waits (exit 6) for agent approve or deny"},
		&cli.BoolFlag{Name: "ask-human", Usage: "offer the model ask_human, to ask you a question and wait for the answer", DefaultText: "on a terminal"},
		&cli.BoolFlag{Name: "wait-tools", Usage: "offer the model wait_until and wait_for_signal (agent signal), to pause without holding a process"},
		&cli.StringFlag{Name: "settings", Usage: "also run the hooks of this Claude Code settings.json `FILE` (its \"hooks\" key), besides config.toml's [hooks]"},
		&cli.IntFlag{Name: "max-subagents", Usage: "run at most `N` of a reply's task calls (subagents) at once; --deny-tools task offers none", DefaultText: "4"},
	}
}

// imageFlag gives the model image files (README.md#images), when says when.
func imageFlag(when string) cli.Flag {
	return &cli.StringSliceFlag{Name: "image", Aliases: []string{"i"}, Usage: "give the model this image `FILE` (PNG, JPEG, GIF or WebP, at most 20 MB; repeatable) " + when}
}

// gatewayFlags send a new run or harness to a gateway.
func gatewayFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gateway", Usage: "send the run to a gateway: `URL`, or bare for $AGENT_GATEWAY or " + api.DefaultURL},
		&cli.StringFlag{Name: "session", Usage: "with --gateway: run in this gateway session, seeing its earlier messages (default: a new session)"},
	}
}

// mcpConfigFlag adds MCP servers from .mcp.json files (docs/PROTOCOL.md#configuration-files).
func mcpConfigFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "mcp-config", Usage: "also use the MCP servers of this .mcp.json `FILE` (repeatable); " +
		"a workspace's own .mcp.json is used only when named here"}
}

// outputSchemaFlag makes the final answer JSON valid against a schema (README.md#structured-output).
func outputSchemaFlag() cli.Flag {
	return &cli.StringFlag{Name: "output-schema", Usage: "the final answer must be one JSON value valid against this JSON Schema `FILE`; it is asked to fix it twice at most, then the run fails (reason schema, exit 1)"}
}

func runCommand() *cli.Command {
	flags := append(modelFlags(),
		&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "directory the tools work in (default: the current directory)"},
		&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer only these tools, comma separated"},
		&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer these tools, comma separated"},
		mcpConfigFlag(), imageFlag("with the prompt"),
		&cli.StringFlag{Name: "until", Usage: "Ralph loop: repeat with fresh context until the final message has this `PROMISE` line"},
		&cli.IntFlag{Name: "max-iterations", Usage: "Ralph loop: give up after N iterations", DefaultText: "10"},
		outputSchemaFlag(),
	)
	flags = append(flags, gatewayFlags()...)
	return &cli.Command{
		Name:      "run",
		Usage:     "run one agent loop in this process",
		ArgsUsage: "PROMPT (or - to read it from stdin)",
		Description: "The model works in the workspace with read_file, write_file, edit_file, list_files, grep and bash.\n" +
			"Paths are confined to the workspace. The run is persisted as it goes; after a crash or Ctrl-C,\n" +
			"'agent resume RUN_ID' continues it without repeating finished tool calls.\n\n" +
			"Exit codes: 0 done, 1 not accomplished (max turns/iterations), 2 bad input, 3 model provider failure,\n" +
			"4 run busy, 5 environment (store, AGENT_HOME, workspace), 6 waiting for a person or a time (agent waiting),\n" +
			"130 interrupted (resumable).\n\n" +
			"Examples:\n" +
			"  agent run \"write a haiku to poem.txt\"\n" +
			"  agent run --json --deny-tools bash \"summarise README.md\"\n" +
			"  agent run --until DONE --max-iterations 5 \"make go test ./... pass\"\n" +
			"  agent run --replay examples/hello.cassette.jsonl \"$(cat examples/hello.prompt)\"",
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
			"A run that stopped at --max-turns or --max-iterations continues with a fresh budget.\n" +
			"Side effects (send_email, slack_post) never repeat: one whose outcome was lost in a crash is not\n" +
			"sent again unless you pass --resend-unknown after checking it did not arrive; it is then sent\n" +
			"from its recorded arguments before the run goes on.\n" +
			"RUN_ID may be a unique prefix. A run held by a live process exits 4. With --gateway the gateway\n" +
			"resumes a run of one of its sessions.",
		Flags: append(modelFlags(),
			&cli.BoolFlag{Name: "resend-unknown", Usage: "send side effects whose outcome is unknown (lost in a crash) again, first"}, imageFlag("before the run goes on"),
			&cli.StringFlag{Name: "gateway", Usage: "resume in a gateway: `URL`, or bare for $AGENT_GATEWAY or " + api.DefaultURL},
		),
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
	if addr, ok := gatewayAddress(c); ok {
		opts, err := flagOptions(c, supervisor.Options{AskHuman: askHuman(c)}) // the gateway fills in its own defaults
		if err != nil {
			return err
		}
		return runViaGateway(c, addr, prompt, opts)
	}
	if c.String("session") != "" {
		return usageErrorf("--session needs --gateway: sessions live in the gateway")
	}
	return runHere(c, settings, prompt, supervisor.Drive{})
}

// runHere records a new run from the command's flags, over the defaults
// of settings, and drives it in this process as d says (d.Options.Harness
// makes it a harness run).
func runHere(c *cli.Context, settings config.Settings, prompt string, d supervisor.Drive) error {
	defaults := supervisor.DefaultOptions(settings)
	defaults.Harness = d.Options.Harness
	defaults.AskHuman = askHuman(c)
	opts, err := flagOptions(c, defaults)
	if err != nil {
		return err
	}
	db, sup, err := openSupervisor(settings)
	if err != nil {
		return err
	}
	defer db.Close()
	opts, ws, err := sup.Prepare(opts, config.Pick(c.String("workspace"), "."))
	if err != nil {
		return err
	}
	d.Options = opts
	r, err := sup.Create(c.Context, supervisor.NewRun{Prompt: prompt, Workspace: ws.Root(), Options: opts})
	if err != nil {
		return err
	}
	return driveRun(c, sup, r, d, d.Options.Harness)
}

func resumeAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("resume needs exactly one RUN_ID; see 'agent runs list'")
	}
	if addr, ok := gatewayAddress(c); ok {
		return resumeViaGateway(c, addr, c.Args().First())
	}
	return resumeHere(c, c.Args().First())
}

// resumeHere continues run id in this process, with the options the
// command's flags change.
func resumeHere(c *cli.Context, id string) error {
	settings, err := config.Load()
	if err != nil {
		return err
	}
	db, sup, err := openSupervisor(settings)
	if err != nil {
		return err
	}
	defer db.Close()
	r, opts, err := sup.Load(c.Context, id)
	if err != nil {
		return err
	}
	stored := opts
	if opts, err = flagOptions(c, opts); err != nil {
		return err
	}
	// A new budget is on top of what the run already spent.
	opts.MaxTokens, opts.MaxCost = stored.MaxTokens, stored.MaxCost
	opts = supervisor.Rebudget(opts, r.Usage, c.Int("max-tokens"), c.Float64("max-cost"))
	if opts, err = sup.Reopen(c.Context, r, opts); err != nil {
		return err
	}
	d := supervisor.Drive{Options: opts, Resume: true, ResendUnknown: c.Bool("resend-unknown")}
	return driveRun(c, sup, r, d, r.Kind == store.KindHarness)
}

// flagOptions lays the option flags the user gave over o: each as
// optionFlags says, the rest of o as it was.
func flagOptions(c *cli.Context, o supervisor.Options) (supervisor.Options, error) {
	given := givenFlags(c)
	if given["record"] && given["replay"] {
		return o, usageErrorf("--record and --replay together: --record saves a live model's answers, --replay answers from a cassette without a model; give one")
	}
	for _, f := range optionFlags {
		if !given[f.name] {
			continue
		}
		if err := f.set(c, f.name, &o); err != nil {
			return o, usageErrorf("--%s: %v", f.name, err)
		}
		if n, ok := c.Value(f.name).(int); ok && n < 1 { // a count or a limit: 0 is no count
			return o, usageErrorf("--%s must be positive, not %d; leave it out for the default", f.name, n)
		}
	}
	return o, o.Validate()
}

// optionFlags are the flags that set a run's options, each with what it
// sets: the one table flagOptions applies, whichever command defines them.
var optionFlags = []struct {
	name string
	set  func(c *cli.Context, name string, o *supervisor.Options) error
}{
	{"model", value(func(o *supervisor.Options) *string { return &o.Model })},
	{"base-url", value(func(o *supervisor.Options) *string { return &o.BaseURL })},
	{"max-turns", value(func(o *supervisor.Options) *int { return &o.MaxTurns })},
	{"max-repeats", value(func(o *supervisor.Options) *int { return &o.MaxRepeats })},
	{"max-subagents", value(func(o *supervisor.Options) *int { return &o.MaxSubagents })},
	{"model-attempts", value(func(o *supervisor.Options) *int { return &o.ModelAttempts })},
	{"model-idle-timeout", duration(func(o *supervisor.Options) *supervisor.Duration { return &o.ModelIdleTimeout })},
	{"model-call-timeout", duration(func(o *supervisor.Options) *supervisor.Duration { return &o.ModelCallTimeout })},
	{"timeout", duration(func(o *supervisor.Options) *supervisor.Duration { return &o.Timeout })},
	{"allow-tools", list(func(o *supervisor.Options) *[]string { return &o.AllowTools })},
	{"deny-tools", list(func(o *supervisor.Options) *[]string { return &o.DenyTools })},
	{"mcp-config", paths(func(o *supervisor.Options) *[]string { return &o.MCPConfig })},
	{"settings", path(func(o *supervisor.Options) *string { return &o.Settings })},
	{"sandbox", value(func(o *supervisor.Options) *string { return &o.Sandbox })},
	{"network", value(func(o *supervisor.Options) *bool { return &o.Network })},
	{"context-window", value(func(o *supervisor.Options) *int { return &o.ContextWindow })},
	{"compact", value(func(o *supervisor.Options) *string { return &o.Compact })},
	{"max-tokens", value(func(o *supervisor.Options) *int { return &o.MaxTokens })},
	{"max-cost", value(func(o *supervisor.Options) *float64 { return &o.MaxCost })},
	{"until", trimmed(func(o *supervisor.Options) *string { return &o.Until })},
	{"max-iterations", value(func(o *supervisor.Options) *int { return &o.MaxIterations })},
	{"parallel", value(func(o *supervisor.Options) *int { return &o.Parallel })},
	{"phase-timeout", duration(func(o *supervisor.Options) *supervisor.Duration { return &o.PhaseTimeout })},
	{"context-budget", value(func(o *supervisor.Options) *int { return &o.ContextBudget })},
	{"record", path(func(o *supervisor.Options) *string { return &o.Record })},
	{"replay", path(func(o *supervisor.Options) *string { return &o.Replay })},
	{"ask", list(func(o *supervisor.Options) *[]string { return &o.Ask })},
	{"ask-human", func(c *cli.Context, name string, o *supervisor.Options) error {
		o.AskHuman = new(c.Bool(name))
		return nil
	}},
	{"wait-tools", value(func(o *supervisor.Options) *bool { return &o.WaitTools })},
	{"output-schema", func(c *cli.Context, name string, o *supervisor.Options) (err error) {
		o.OutputSchema, err = supervisor.ReadOutputSchema(c.String(name))
		return err
	}},
	{"image", func(c *cli.Context, name string, o *supervisor.Options) error {
		return o.AttachImages(c.StringSlice(name)...)
	}},
}

// The kinds of option flags: what each reads from its flag and how.
type optionSetter = func(c *cli.Context, name string, o *supervisor.Options) error

// value is the flag's value as its kind reads it: text, a number, money,
// a yes or no.
func value[T any](field func(*supervisor.Options) *T) optionSetter {
	return func(c *cli.Context, name string, o *supervisor.Options) error {
		v, ok := c.Value(name).(T)
		if !ok {
			return fmt.Errorf("not a %T", v)
		}
		*field(o) = v
		return nil
	}
}

// trimmed is text without the spaces around it (a promise line).
func trimmed(field func(*supervisor.Options) *string) optionSetter {
	return func(c *cli.Context, name string, o *supervisor.Options) error {
		*field(o) = strings.TrimSpace(c.String(name))
		return nil
	}
}

func duration(field func(*supervisor.Options) *supervisor.Duration) optionSetter {
	return func(c *cli.Context, name string, o *supervisor.Options) error {
		*field(o) = supervisor.Duration(c.Duration(name))
		return nil
	}
}

// list is a comma-separated, repeatable list.
func list(field func(*supervisor.Options) *[]string) optionSetter {
	return func(c *cli.Context, name string, o *supervisor.Options) error {
		*field(o) = splitList(c.StringSlice(name))
		return nil
	}
}

// path is a file, made absolute (a resumed run, or the gateway, reads it
// from elsewhere); "" leaves the option as it was.
func path(field func(*supervisor.Options) *string) optionSetter {
	return func(c *cli.Context, name string, o *supervisor.Options) error {
		if c.String(name) == "" {
			return nil
		}
		abs, err := filepath.Abs(c.String(name))
		*field(o) = abs
		return err
	}
}

// paths is a repeatable path.
func paths(field func(*supervisor.Options) *[]string) optionSetter {
	return func(c *cli.Context, name string, o *supervisor.Options) error {
		var out []string
		for _, f := range c.StringSlice(name) {
			abs, err := filepath.Abs(f)
			if err != nil {
				return err
			}
			out = append(out, abs)
		}
		*field(o) = out
		return nil
	}
}

// givenFlags is the command's flags given (or set from the environment), by
// every name: found once, as urfave's IsSet runs a regexp per flag per call.
func givenFlags(c *cli.Context) map[string]bool {
	local, given := c.LocalFlagNames(), map[string]bool{}
	for _, f := range c.Command.Flags {
		if names := f.Names(); f.IsSet() || slices.ContainsFunc(names, func(n string) bool { return slices.Contains(local, n) }) {
			for _, n := range names {
				given[n] = true
			}
		}
	}
	return given
}

// flagName is how the CLI names an option: by its flag.
func flagName(field string) string {
	if field == "harness" {
		return "agent harness"
	}
	return "--" + strings.ReplaceAll(field, "_", "-")
}

// openSupervisor opens the store and the supervisor of this process.
func openSupervisor(settings config.Settings) (*store.DB, *supervisor.Supervisor, error) {
	db, err := store.Open(settings.Database)
	if err != nil {
		return nil, nil, err
	}
	sup, err := supervisor.New(supervisor.ConfigFor(settings, db, version))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, sup, nil
}

// driveRun drives a run this process holds with its signals and display,
// and turns how it ended into the command's exit.
func driveRun(c *cli.Context, sup *supervisor.Supervisor, r *store.Run, d supervisor.Drive, harness bool) error {
	show := newDisplay(c, harness)
	defer show.Close()
	d.Show = show.Print
	if inline(c) {
		d.Ask = chat.NewTerminalAsker(c.App.Reader, c.App.ErrWriter).Ask
	}
	ctx, stop := chat.InterruptOnSignal(c.Context)
	defer stop()
	end, err := sup.Drive(ctx, r, d)
	if err != nil {
		return err
	}
	return finished(c, r.ID, end.Data)
}

// finished turns a run's terminal event into the command's exit: an
// *exitError for any non-zero ending.
func finished(c *cli.Context, runID string, fin event.RunFinishedData) error {
	if fin.ExitCode == 0 {
		return nil
	}
	msg := ""
	if c.Bool("json") || fin.Status == event.StatusWaiting {
		msg = fin.Detail // without --json the display already said it, but how to answer
	}
	if c.Bool("json") && fin.Status == event.StatusInterrupted {
		msg = fmt.Sprintf("run %s %s", runID, msg) // a script's Ctrl-C: which run to resume
	}
	return &exitError{code: fin.ExitCode, msg: msg}
}

// inline reports whether a person at this terminal can answer the run's
// questions and approvals as it runs.
func inline(c *cli.Context) bool {
	return !c.Bool("json") && console.IsTerminal(c.App.Reader) && console.IsTerminal(c.App.ErrWriter)
}

// askHuman is whether the model may ask the person: yes when one is at
// this terminal to answer (a cassette replays the tools it was recorded
// with). The CLI always says, so a run through the gateway offers what
// the same run here would.
func askHuman(c *cli.Context) *bool { return new(inline(c) && !c.IsSet("replay")) }

// newDisplay picks the display for a command's output flags.
func newDisplay(c *cli.Context, harness bool) console.Display {
	return console.NewDisplay(c.App.Writer, c.App.ErrWriter, harness, c.Bool("json"))
}

// readPrompt is the command's prompt (console.ReadPrompt), refused empty.
func readPrompt(c *cli.Context) (string, error) {
	prompt, err := console.ReadPrompt(c.Args().Slice(), c.App.Reader)
	if err != nil || prompt != "" {
		return prompt, err
	}
	// The command's own argument: run takes a PROMPT, harness a REQUEST.
	usage := config.Pick(c.Command.ArgsUsage, "PROMPT")
	noun, _, _ := strings.Cut(usage, " ")
	return "", usageErrorf("empty %s; usage: %s [flags] %s", strings.ToLower(noun), commandPath(c), usage)
}

func splitList(vals []string) []string {
	var out []string
	for _, part := range strings.Split(strings.Join(vals, ","), ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
