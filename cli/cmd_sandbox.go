package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

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
	out := c.App.Writer
	if c.Bool("json") {
		line, _ := json.Marshal(sup)
		fmt.Fprintln(out, string(line))
	} else {
		landlock := "none"
		if sup.LandlockV > 0 {
			landlock = fmt.Sprintf("ABI %d", sup.LandlockV)
		}
		modes := make([]string, len(sup.Modes))
		for i, m := range sup.Modes {
			modes[i] = string(m)
		}
		fmt.Fprintf(out, "kernel      %s\n", sup.Kernel)
		fmt.Fprintf(out, "landlock    %s\n", landlock)
		fmt.Fprintf(out, "namespaces  %s\n", map[bool]string{true: "user, PID and network: yes", false: "not usable"}[sup.Namespaces])
		fmt.Fprintf(out, "modes       %s\n", strings.Join(modes, ", "))
		if sup.StartMS > 0 {
			fmt.Fprintf(out, "cost        %.1f ms to start one sandboxed command\n", sup.StartMS)
		}
		for _, p := range sup.Problems {
			fmt.Fprintf(out, "problem     %s\n", p)
		}
	}
	if len(sup.Problems) > 0 {
		return &exitError{code: 5, msg: "the sandbox cannot be enforced here; runs need --sandbox off (see the problem above)"}
	}
	return nil
}
