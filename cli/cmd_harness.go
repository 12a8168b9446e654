package cli

import (
	"os"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/orchestrator"
	"agent/plan"
	"agent/supervisor"
)

func harnessCommand() *cli.Command {
	flags := append(modelFlags(),
		&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "directory the phases work in (default: the current directory)"},
		&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer phases only these tools, comma separated"},
		&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer phases these tools, comma separated"},
		mcpConfigFlag(),
		&cli.IntFlag{Name: "parallel", Usage: "run up to N independent phases at once", DefaultText: "1"},
		&cli.DurationFlag{Name: "phase-timeout", Usage: "stop a phase attempt after this long (SIGTERM, then SIGKILL)", DefaultText: console.DurationText(orchestrator.DefaultPhaseTimeout)},
		&cli.IntFlag{Name: "context-budget", Usage: "start a fresh iteration when a phase's prompt passes this many `TOKENS`", DefaultText: "no budget"},
		&cli.BoolFlag{Name: "plan", Usage: "plan only: write mission.json, print the plan and the run id, and stop"},
		&cli.StringFlag{Name: "plan-file", Usage: "run this mission.json `FILE` without a planning call"},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation of the plan on a terminal"},
	)
	flags = append(flags, gatewayFlags()...)
	return &cli.Command{
		Name:      "harness",
		Usage:     "plan a long task, run each phase in a fresh child process, verify it with evidence",
		ArgsUsage: "REQUEST (or - to read it from stdin)",
		Description: "A planner splits the request into phases with dependencies and evidence (files, a command, receipts).\n" +
			"Each phase attempt runs in a fresh 'agent runner' child with only what it needs: the objective, its\n" +
			"instructions, its dependencies' results, the learnings so far and the guardrails of failed attempts.\n" +
			"A phase passes only when its evidence verifies; it is retried up to its max_attempts (default 3).\n" +
			"Every transition is checkpointed: after a crash, 'agent resume RUN_ID' never re-runs a verified phase.\n" +
			"Files go to WORKSPACE/.agent/runs/RUN_ID: mission.json, progress.md, verification/, logs/.\n\n" +
			"Exit codes: 0 every phase verified, 1 a phase failed after its retries, 2 bad input or invalid plan,\n" +
			"3 model provider failure, 4 run busy, 5 environment, 6 waiting for a person or a time, 130 interrupted.\n" +
			"With --gateway the harness runs in the gateway, without asking to confirm its plan.\n\n" +
			"Examples:\n" +
			"  agent harness \"write a market report on e-bikes with sources\"\n" +
			"  agent harness --plan \"migrate the tests to testify\"     # review .agent/runs/ID/mission.json, then: agent resume ID\n" +
			"  agent harness --plan-file mission.json --parallel 2 --json",
		Flags:  flags,
		Action: harnessAction,
	}
}

func harnessAction(c *cli.Context) error {
	var given *plan.Plan
	if path := c.String("plan-file"); path != "" {
		if c.Bool("plan") {
			return usageErrorf("--plan and --plan-file together make no sense: the plan already exists")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return usageErrorf("--plan-file: %v", err)
		}
		if given, err = plan.Parse(data); err != nil {
			return usageErrorf("%s: %v", path, err)
		}
	}
	if given != nil && c.Args().Len() > 0 {
		// The plan's objective is the request; a second one would be
		// silently ignored.
		return usageErrorf("a REQUEST and --plan-file together: the plan in %s already says what to do (its objective: %q); "+
			"drop the request, or drop --plan-file to plan it", c.String("plan-file"), console.OneLine(given.Objective, 60))
	}
	request := ""
	if given == nil {
		var err error
		if request, err = readPrompt(c); err != nil {
			return err
		}
	} else {
		request = given.Objective
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	if addr, ok := gatewayAddress(c); ok {
		if given != nil || c.Bool("plan") {
			return usageErrorf("--plan and --plan-file run here, not with --gateway: plan here (agent harness --plan), then resume it here")
		}
		opts, err := flagOptions(c, supervisor.Options{Harness: true, AskHuman: askHuman(c)}) // the gateway fills in its own defaults
		if err != nil {
			return err
		}
		return runViaGateway(c, addr, request, opts)
	}
	if c.String("session") != "" {
		return usageErrorf("--session needs --gateway: sessions live in the gateway")
	}
	return runHere(c, settings, request, supervisor.Drive{
		Options: supervisor.Options{Harness: true}, Plan: given, PlanOnly: c.Bool("plan"), Confirm: confirmPlan(c),
	})
}

// confirmPlan asks on a terminal whether to run a new plan; elsewhere, or
// with --yes or --json, it does not ask (nil).
func confirmPlan(c *cli.Context) func(missionPath string) bool {
	if c.Bool("yes") || c.Bool("json") {
		return nil
	}
	return console.PlanConfirmation(c.App.Reader, c.App.ErrWriter)
}
