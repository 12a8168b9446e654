// Package cli is agent's command line: its commands and flags, their
// help, what they print, and the one mapping of errors to exit codes. The
// work itself is the packages': a command hands its flags to them and
// presents what they answer.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/gateway"
	"agent/gateway/api"
	"agent/llm"
	"agent/mcp"
	"agent/mcpserve"
	"agent/runner"
	"agent/sandbox"
	"agent/store"
	"agent/supervisor"
)

// Set at build time by scripts/build.sh (-X agent/cli.version=…).
var (
	version = "dev"
	commit  = "unknown"
)

// Run runs the command line args (args[0] is the program's name) and
// returns the exit code (docs/PROTOCOL.md#exit-codes).
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sandbox.Harden()
	app := newApp(stdin, stdout, stderr)
	args, err := normalizeArgs(app, args)
	if err == nil {
		err = app.RunContext(context.Background(), args)
	}
	if err == nil {
		return 0
	}
	code := exitCode(err)
	var quiet *exitError
	if !errors.As(err, &quiet) || quiet.msg != "" {
		fmt.Fprintf(stderr, "agent: %s\n", errorLine(err))
	}
	return code
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "agent",
		Usage: "run LLM agents durably",
		Description: "agent runs a model-and-tools loop in your workspace against any OpenAI-compatible endpoint.\n" +
			"Every run is persisted as it happens, so a crash or Ctrl-C loses nothing: 'agent resume RUN_ID' continues it.\n\n" +
			"Examples:\n" +
			"  agent run \"add a README section about testing\"\n" +
			"  agent run --json --max-turns 10 \"fix the failing test\" > events.jsonl\n" +
			"  agent run --until DONE --max-iterations 5 \"make every test pass\"\n" +
			"  agent runs list\n" +
			"  agent resume 0190c3a2",
		Reader:       stdin,
		Writer:       stdout,
		ErrWriter:    stderr,
		HideVersion:  true, // --version is ours: the same line as 'agent version'
		Suggest:      true,
		OnUsageError: onUsageError,
		Flags: []cli.Flag{
			databaseFlag(),
			&cli.BoolFlag{Name: "version", Aliases: []string{"v"}, Usage: "print the version, as 'agent version' does", DisableDefaultText: true},
		},
		Commands: []*cli.Command{
			runCommand(),
			chatCommand(),
			acpCommand(),
			harnessCommand(),
			resumeCommand(),
			rewindCommand(),
			attachCommand(),
			sessionsCommand(),
			runsCommand(),
			pruneCommand(),
			gatewayCommand(),
			workerCommand(),
			jobsCommand(),
			mcpCommand(),
			sandboxCommand(),
			waitingCommand(),
			approveCommand(),
			denyCommand(),
			answerCommand(),
			signalCommand(),
			doctorCommand(),
			versionCommand(),
			runnerCommand(),
			guardCommand(),
		},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				return printVersion(c)
			}
			if c.Args().Len() > 0 {
				return usageErrorf("unknown command %q; run 'agent --help' for the list", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
	}
	setUsageErrorHandlers(app.Commands)
	return app
}

func setUsageErrorHandlers(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageErrorHandlers(c.Subcommands)
	}
}

// onUsageError turns urfave's "flag provided but not defined" and friends
// into one line with a hint (a misspelt flag's too) instead of a page of help.
func onUsageError(c *cli.Context, err error, _ bool) error {
	typed, _ := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	return usageErrorf("%v%s; see '%s --help'", err, console.DidYouMean(typed, cli.SuggestFlag(c.Command.Flags, typed, false)), commandPath(c))
}

// commandPath is the command a context runs, as the user types it:
// "agent", "agent run", "agent runs list".
func commandPath(c *cli.Context) string {
	var names []string
	for _, ctx := range c.Lineage() {
		if ctx.Command != nil && ctx.Command.Name != "" && ctx.Command.Name != c.App.Name {
			names = append([]string{ctx.Command.Name}, names...)
		}
	}
	return strings.Join(append([]string{c.App.Name}, names...), " ")
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:   "version",
		Usage:  "print the version and the commit it was built from",
		Action: printVersion,
	}
}

func printVersion(c *cli.Context) error {
	_, err := fmt.Fprintf(c.App.Writer, "agent %s (commit %s)\n", version, commit)
	return err
}

// usageError is bad input from the user: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError carries an exit code decided by the command itself, such as a
// task that was not accomplished. An empty msg means the command already
// told the user.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitCode maps an error to the exit codes of docs/PROTOCOL.md#exit-codes. It is the only
// place that does.
func exitCode(err error) int {
	var (
		exit *exitError
		dial *api.DialError
		gw   *gatewayError
	)
	switch {
	case errors.As(err, &exit):
		return exit.code
	case errors.As(err, &dial):
		if dial.Status == 401 || dial.Status == 403 {
			return 2 // a wrong token or origin is the user's configuration
		}
		return 3
	case errors.As(err, &gw):
		return gatewayExitCode(gw.err)
	case errors.As(err, new(*usageError)), errors.As(err, new(*config.Error)), errors.As(err, new(*supervisor.OptionError)),
		errors.As(err, new(*runner.SpecError)), errors.As(err, new(*llm.SetupError)), errors.As(err, new(*api.TokenError)),
		errors.As(err, new(*mcp.ConfigError)), errors.Is(err, api.ErrNoToken):
		return 2
	case errors.As(err, new(*llm.Error)), errors.As(err, new(*api.UnreachableError)):
		return 3
	case errors.As(err, new(*store.LeaseHeldError)), errors.As(err, new(*supervisor.NotResumableError)), errors.As(err, new(*store.SessionInUseError)):
		return 4
	case errors.As(err, new(*store.UnusableError)), errors.As(err, new(*config.HomeError)), errors.As(err, new(*gateway.ListenError)),
		errors.As(err, new(*mcpserve.DirError)):
		return 5
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrAmbiguous):
		return 2
	case errors.Is(err, context.Canceled):
		return 130
	}
	return 1
}

// databaseFlag is --database, which sets AGENT_DATABASE_URL for this
// process and the agent processes it starts. It is global (before the
// command) and also on the commands that serve many machines.
func databaseFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "database", Usage: "keep the store in this PostgreSQL database (postgres://…) instead of AGENT_HOME's SQLite file; as " + config.DatabaseEnv,
		Action: func(_ *cli.Context, url string) error {
			if !store.IsURL(url) {
				return usageErrorf("--database %q: want a PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE", store.Redact(url))
			}
			return os.Setenv(config.DatabaseEnv, url)
		},
	}
}

// errorLine keeps a message to the single line the contract promises,
// naming options by their flags.
func errorLine(err error) string {
	s := err.Error()
	var option *supervisor.OptionError
	if errors.As(err, &option) {
		s = option.Message(flagName)
	}
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// output prints v: one JSON object with --json, else as print shows it to
// people.
func output(c *cli.Context, v any, print func(w io.Writer)) error {
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(v)
	}
	print(c.App.Writer)
	return nil
}

// jsonLines prints each item as one JSON object on a line of its own, as
// the lists do with --json.
func jsonLines[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	for _, item := range items {
		if err := enc.Encode(item); err != nil {
			return err
		}
	}
	return nil
}
