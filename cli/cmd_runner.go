package cli

import (
	"errors"
	"os"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/runner"
)

// runnerCommand is the per-phase child (docs/PROTOCOL.md#the-child-process): PhaseSpec on
// stdin, events on stdout, logs on stderr. It never opens the database.
func runnerCommand() *cli.Command {
	return &cli.Command{
		Name:   "runner",
		Usage:  "run one phase attempt for a parent process (internal)",
		Hidden: true,
		Action: runnerAction,
	}
}

func runnerAction(c *cli.Context) error {
	// The child saves checkpointed files to the blob store itself; without
	// a data directory, checkpoints are off and it says so.
	home, _ := config.Home()
	err := runner.Serve(c.Context, c.App.Reader, c.App.Writer, runner.ServeConfig{
		APIKey: os.Getenv("OPENAI_API_KEY"), Home: home, UserAgent: "agent/" + version,
	})
	if errors.Is(err, runner.ErrParentGone) {
		return &exitError{code: 130, msg: "parent gone; stopped"}
	}
	return err
}

// guardCommand is agent chat's terminal guard (console.GuardTerminal).
func guardCommand() *cli.Command {
	return &cli.Command{Name: console.GuardCommand, Usage: "put the terminal back if agent chat dies (internal)", Hidden: true,
		Action: func(*cli.Context) error { return console.ServeGuard() }}
}
