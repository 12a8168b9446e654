package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/gateway"
	"agent/gateway/api"
	"agent/store"
	"agent/tools"
)

func gatewayCommand() *cli.Command {
	return &cli.Command{
		Name:  "gateway",
		Usage: "run the local daemon: sessions, runs and replayable event streams over WebSocket and HTTP",
		Description: "Clients connect to ws://ADDR/ws (protocol v1) or use the HTTP API on the same port: GET /v1/sessions,\n" +
			"GET /v1/runs/ID, GET /v1/runs/ID/events?after_seq=N (Server-Sent Events), POST /v1/runs. Each needs\n" +
			"the token, as 'Authorization: Bearer TOKEN' (or, on /ws, in the connect frame); a token in a URL is\n" +
			"always refused; GET /healthz answers anyone, saying only that the gateway is up. The token is\n" +
			"AGENT_GATEWAY_TOKEN, or the contents of $AGENT_HOME/gateway.token, created with mode 0600 on first start.\n\n" +
			"A browser opens the web view at http://ADDR/ and signs in there with the token, once: the page then\n" +
			"holds an HttpOnly session cookie, which pages of other origins cannot use.\n\n" +
			"A run works in --workspace or a directory below it, or below a --workspace-root; its\n" +
			"options.base_url may only be --base-url unless --allow-any-base-url, since the endpoint receives\n" +
			"OPENAI_API_KEY. The token must have at least 16 characters.\n\n" +
			"Each run executes in its own 'agent runner' child; its events are persisted, numbered per session,\n" +
			"and replayed to clients that reconnect with after_seq. Runs in one session run one after the other\n" +
			"and see the session's earlier conversation.\n\n" +
			"SIGTERM or Ctrl-C drains: no new runs, running ones get --drain-grace to finish, the rest are\n" +
			"recorded interrupted; the next start resumes them. A second signal stops waiting. Runs a crashed\n" +
			"gateway left are resumed once on the next start (--reclaim resume) or marked failed (--reclaim fail).\n\n" +
			"Scheduled jobs ('agent jobs') fire only with --scheduler, or SchedulerEnabled = true in\n" +
			"$AGENT_HOME/config.toml (with SchedulerPollIntervalSeconds, SchedulerMaxConcurrentRuns and\n" +
			"SchedulerRecoveryPolicy). Without it jobs can still be managed, but nothing fires. Each tick is a normal\n" +
			"run in the job's session or a new one. On stop, job runs in flight are cancelled; ticks missed while\n" +
			"the gateway was down follow each job's missed policy (default: SchedulerRecoveryPolicy).\n\n" +
			"With RetentionDays = N in config.toml the gateway prunes the runs that finished more than N days ago,\n" +
			"at start and then daily, as 'agent prune --older-than Nd' does.\n\n" +
			"Examples:\n" +
			"  agent gateway\n" +
			"  agent gateway --listen 127.0.0.1:8080 --max-concurrent-runs 8 --run-timeout 1h\n" +
			"  agent gateway --scheduler\n" +
			"  curl -H \"Authorization: Bearer $(cat ~/.local/share/agent/gateway.token)\" http://127.0.0.1:7420/v1/sessions",
		Flags: []cli.Flag{
			databaseFlag(),
			&cli.StringFlag{Name: "listen", Value: api.DefaultListen, Usage: "`ADDR` to listen on (host:port; port 0 picks one)"},
			&cli.BoolFlag{Name: "allow-remote", Usage: "allow listening on a non-loopback address (the token is still required)"},
			&cli.IntFlag{Name: "max-concurrent-runs", Value: gateway.DefaultMaxConcurrentRuns, Usage: "runs executing at once; more wait in a queue"},
			&cli.DurationFlag{Name: "run-timeout", Value: gateway.DefaultRunTimeout, Usage: "stop a run after this long unless it sets options.timeout"},
			&cli.DurationFlag{Name: "drain-grace", Value: gateway.DefaultDrainGrace, Usage: "on SIGTERM, how long running runs may finish before they are interrupted"},
			&cli.StringFlag{Name: "reclaim", Value: gateway.ReclaimResume, Usage: "runs a crashed gateway left: resume (once) or fail"},
			&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "workspace of runs that name none (default: the current directory); runs may name it or a directory below it"},
			&cli.StringSliceFlag{Name: "workspace-root", Usage: "also allow runs to work in `DIR` and below (repeatable)"},
			&cli.StringFlag{Name: "model", Usage: "default model of runs (env AGENT_MODEL, default " + config.DefaultModel + ")"},
			&cli.StringFlag{Name: "base-url", Usage: "default OpenAI-compatible endpoint of runs (env OPENAI_BASE_URL)"},
			&cli.BoolFlag{Name: "allow-unsandboxed", Usage: "let runs and jobs ask for sandbox \"off\" (unconfined commands, with the network); without it the gateway refuses"},
			&cli.BoolFlag{Name: "allow-any-base-url", Usage: "let run.start's options.base_url name any endpoint, which then receives the API key; without it only --base-url is allowed"},
			&cli.IntFlag{Name: "max-connections", Value: gateway.DefaultMaxConnections, Usage: "connections held open at most; over it, the oldest not doing authorised work is closed"},
			&cli.BoolFlag{Name: "scheduler", Usage: "fire scheduled jobs", DefaultText: "SchedulerEnabled in config.toml, else off"},
			&cli.BoolFlag{Name: "json", Usage: "print the address and token location as one JSON object on stdout"},
		},
		Action: gatewayAction,
	}
}

func gatewayAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("gateway takes no arguments; see 'agent gateway --help'")
	}
	if p := c.String("reclaim"); p != gateway.ReclaimResume && p != gateway.ReclaimFail {
		return usageErrorf("--reclaim %q: want resume or fail", p)
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	token, tokenFrom, err := gateway.ServerToken(settings.Home)
	if err != nil {
		return err
	}
	workspace := c.String("workspace") // "": the gateway's working directory
	if workspace != "" {
		if workspace, err = workspaceFlag("workspace", workspace); err != nil {
			return err
		}
	}
	var roots []string
	for _, dir := range c.StringSlice("workspace-root") {
		abs, err := workspaceFlag("workspace-root", dir)
		if err != nil {
			return err
		}
		roots = append(roots, abs)
	}
	db, err := store.Open(settings.Database)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg := gateway.FromSettings(settings, db, version)
	cfg.Listen, cfg.AllowRemote, cfg.Token, cfg.MaxConnections = c.String("listen"), c.Bool("allow-remote"), token, c.Int("max-connections")
	cfg.DefaultWorkspace, cfg.WorkspaceRoots = workspace, roots
	cfg.Model.Name, cfg.Model.BaseURL = config.Pick(c.String("model"), settings.Model), config.Pick(c.String("base-url"), settings.BaseURL)
	cfg.AllowAnyBaseURL, cfg.AllowUnsandboxed = c.Bool("allow-any-base-url"), c.Bool("allow-unsandboxed")
	cfg.MaxConcurrentRuns, cfg.RunTimeout = c.Int("max-concurrent-runs"), c.Duration("run-timeout")
	cfg.DrainGrace, cfg.ReclaimPolicy = c.Duration("drain-grace"), c.String("reclaim")
	cfg.Logger = slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	if c.IsSet("scheduler") {
		cfg.Scheduler.Enabled = c.Bool("scheduler") // --scheduler=false overrides the file
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		return usageErrorf("%v", strings.TrimPrefix(err.Error(), "gateway: "))
	}

	// Signals are watched before Start: a SIGTERM during reclaim drains too.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	if err := srv.Start(c.Context); err != nil {
		return err
	}
	console.PrintListening(c.App.Writer, c.App.ErrWriter, c.Bool("json"), console.Listening{Addr: srv.Addr(), Version: version, TokenFrom: tokenFrom,
		Scheduling: cfg.Scheduler.Enabled, Workers: cfg.Workers, Store: store.Redact(settings.Database)})
	err = srv.StopOnSignal(sigs)
	if errors.Is(err, context.Canceled) {
		return &exitError{code: 130, msg: "stopped without waiting for runs to finish; they are recorded interrupted"}
	}
	return err
}

// workspaceFlag is the directory a flag names, made absolute, if runs can
// work there.
func workspaceFlag(flag, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usageErrorf("--%s %s: %v", flag, dir, err)
	}
	if why := tools.MissingDir(abs); why != "" {
		return "", usageErrorf("--%s %s: %s", flag, dir, why)
	}
	return abs, nil
}
