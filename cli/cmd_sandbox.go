package cli

import (
	"io"

	"github.com/urfave/cli/v2"

	"agent/console"
	"agent/sandbox"
)

func sandboxCommand() *cli.Command {
	return &cli.Command{
		Name:  "sandbox",
		Usage: "what the sandbox of the model's commands can enforce on this machine",
		Description: "Every command the model runs (bash, and the planner's programmatic evidence checks) runs in a\n" +
			"sandbox chosen with --sandbox:\n" +
			"  workspace-write (default)  write only in the workspace and a private $TMPDIR; read anything but AGENT_HOME\n" +
			"  read-only                  write only in the private $TMPDIR\n" +
			"  off                        no restriction, with the network\n" +
			"In both sandboxed modes the network is off (no TCP or UDP leaves, loopback included) unless --network,\n" +
			"agent's secrets (OPENAI_API_KEY, AGENT_SMTP_PASS, … and any variable named like *_TOKEN, *_KEY,\n" +
			"*_SECRET, *_PASSWORD) are not in the environment unless config.toml's sandbox_env_pass names them,\n" +
			"and every process a command starts dies with it. It needs Landlock (ABI 3, Linux 6.2) and user, PID\n" +
			"and network namespaces; where they are missing, a run fails at once (exit 5) instead of running\n" +
			"unconfined.",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "try the sandbox here and say which modes work and, if not, why",
			Description: "Exit codes: 0 the sandboxed modes work, 5 only --sandbox off does.\n\n" +
				"Examples:\n" +
				"  agent sandbox check\n" +
				"  agent sandbox check --json",
			Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
			Action: sandboxCheckAction,
		}},
	}
}

func sandboxCheckAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("sandbox check takes no arguments")
	}
	sup := sandbox.Check()
	if err := output(c, sup, func(w io.Writer) { console.PrintSandbox(w, sup) }); err != nil {
		return err
	}
	if len(sup.Problems) > 0 {
		return &exitError{code: 5, msg: "the sandbox cannot be enforced here; runs need --sandbox off (see the problem above)"}
	}
	return nil
}
