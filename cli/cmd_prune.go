package cli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"agent/checkpoint"
	"agent/console"
	"agent/store"
)

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "free space: delete the streamed text and tool outputs of runs that finished long ago",
		Description: "For every run that finished (completed, failed or cancelled) longer ago than --older-than, prune\n" +
			"deletes its message deltas (the reply streamed piece by piece, which the full message repeats) and\n" +
			"replaces its tool outputs with " + store.PrunedOutput + ". It keeps the run, its prompt, status and result, its\n" +
			"messages, receipts, artifacts, plan and verifications, and its checkpoints, so 'agent rewind' still\n" +
			"works. A failed run, which 'agent resume' can continue, and a run in a gateway session, which the\n" +
			"session's later runs build on, keep the tool results their conversation holds. Running and interrupted\n" +
			"runs are never touched. Blobs in $AGENT_HOME/blobs that no checkpoint needs go too, when no run is in\n" +
			"progress. 'agent runs show' says when a run was pruned; a gateway session's replay still has every\n" +
			"seq, each pruned delta as {\"text\":\"\",\"pruned\":true}.\n\n" +
			"DURATION is a Go duration (720h, 90m) or a number of days (30d). --dry-run prints the same report\n" +
			"and changes nothing. The database reuses the space it frees, so it stops growing; --vacuum also gives\n" +
			"the space back to the disk by rewriting the database, which needs as much free disk as the database\n" +
			"takes and is refused while a run is in progress (exit 4).\n\n" +
			"The gateway prunes by itself with RetentionDays = N in $AGENT_HOME/config.toml: at start, then daily.\n\n" +
			"Examples:\n" +
			"  agent prune --older-than 30d --dry-run\n" +
			"  agent prune --older-than 720h\n" +
			"  agent prune --older-than 90d --vacuum --json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "older-than", Usage: "prune runs that finished longer ago than `DURATION` (e.g. 30d, 720h)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "report what would be removed; change nothing"},
			&cli.BoolFlag{Name: "vacuum", Usage: "then rewrite the database so the freed space goes back to the disk"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as one JSON object"},
		},
		Action: pruneAction,
	}
}

func pruneAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("prune takes no arguments; see 'agent prune --help'")
	}
	if !c.IsSet("older-than") {
		return usageErrorf("prune needs --older-than DURATION, e.g. --older-than 30d; see 'agent prune --help'")
	}
	age, err := store.ParseAge(c.String("older-than"))
	if err != nil {
		return usageErrorf("--older-than %q: %v", c.String("older-than"), err)
	}
	settings, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	dry, vacuum := c.Bool("dry-run"), c.Bool("vacuum") && !c.Bool("dry-run")
	if vacuum {
		n, err := db.RunsInProgress(c.Context)
		if err != nil {
			return err
		}
		runs := "runs are"
		if n == 1 {
			runs = "run is"
		}
		if n > 0 {
			return &exitError{code: 4, msg: fmt.Sprintf("--vacuum: %d %s in progress, and the rewrite would hold them up; prune without --vacuum, or again once they have ended", n, runs)}
		}
	}
	before := time.Now().Add(-age)
	rep, err := db.Prune(c.Context, store.PruneOptions{Before: before, DryRun: dry, Blobs: checkpoint.BlobsIn(settings.Home)})
	if err != nil {
		return err
	}
	if rep.Runs == nil {
		rep.Runs = []string{}
	}
	v := console.PruneView{DryRun: dry, OlderThan: age.String(), Before: before.UTC().Truncate(time.Second), Runs: len(rep.Runs), PruneReport: rep}
	if vacuum {
		if v.DatabaseBefore, v.DatabaseAfter, err = db.Vacuum(c.Context); err != nil {
			return err
		}
	}
	return console.PrintPruneView(c.App.Writer, v, vacuum, c.Bool("json"), c.String("older-than"))
}
