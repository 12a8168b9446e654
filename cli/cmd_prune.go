package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"agent/checkpoint"
	"agent/config"
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

// pruneView is the JSON report of agent prune.
type pruneView struct {
	DryRun       bool      `json:"dry_run"`
	OlderThan    string    `json:"older_than"`
	Before       time.Time `json:"before"` // runs that finished before it
	Runs         int       `json:"runs"`
	RunIDs       []string  `json:"run_ids"`
	Deltas       int64     `json:"deltas"`        // message.delta events deleted
	ToolOutputs  int64     `json:"tool_outputs"`  // tool results whose output was removed
	ToolMessages int64     `json:"tool_messages"` // conversation tool messages emptied
	Bytes        int64     `json:"bytes"`         // estimated stored size removed from the database
	Blobs        int       `json:"blobs"`
	BlobBytes    int64     `json:"blob_bytes"`
	BlobsSkipped string    `json:"blobs_skipped,omitempty"`
	// With --vacuum: the database and its WAL, in bytes.
	DatabaseBefore int64 `json:"database_bytes_before,omitempty"`
	DatabaseAfter  int64 `json:"database_bytes_after,omitempty"`
}

func pruneAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("prune takes no arguments; see 'agent prune --help'")
	}
	if !c.IsSet("older-than") {
		return usageErrorf("prune needs --older-than DURATION, e.g. --older-than 30d; see 'agent prune --help'")
	}
	age, err := parseAge(c.String("older-than"))
	if err != nil {
		return err
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	db, err := openStore(settings)
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
		if n > 0 {
			return &exitError{code: 4, msg: fmt.Sprintf("--vacuum: %d %s in progress, and the rewrite would hold them up; prune without --vacuum, or again once they have ended",
				n, plural(n, "run is", "runs are"))}
		}
	}
	before := time.Now().Add(-age)
	rep, err := db.Prune(c.Context, store.PruneOptions{Before: before, DryRun: dry, Blobs: checkpoint.BlobsIn(settings.Home)})
	if err != nil {
		return err
	}
	v := pruneView{
		DryRun: dry, OlderThan: age.String(), Before: before.UTC().Truncate(time.Second), Runs: len(rep.Runs), RunIDs: rep.Runs,
		Deltas: rep.Deltas, ToolOutputs: rep.ToolOutputs, ToolMessages: rep.ToolMessages, Bytes: rep.Bytes,
		Blobs: rep.Blobs, BlobBytes: rep.BlobBytes, BlobsSkipped: rep.BlobsSkipped,
	}
	if v.RunIDs == nil {
		v.RunIDs = []string{}
	}
	if vacuum {
		if v.DatabaseBefore, v.DatabaseAfter, err = db.Vacuum(c.Context); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(v)
	}
	printPrune(c, v, vacuum)
	return nil
}

func printPrune(c *cli.Context, v pruneView, vacuum bool) {
	w := c.App.Writer
	when := v.Before.Local().Format("2006-01-02 15:04")
	verb := "pruned"
	if v.DryRun {
		verb = "would prune"
	}
	if v.Runs == 0 {
		fmt.Fprintf(w, "no run that finished before %s is left to prune\n", when)
	} else {
		fmt.Fprintf(w, "%s %d %s that finished before %s: %d message %s and %d tool %s (about %s)\n",
			verb, v.Runs, plural(v.Runs, "run", "runs"), when, v.Deltas, plural64(v.Deltas, "delta", "deltas"),
			v.ToolOutputs, plural64(v.ToolOutputs, "output", "outputs"), humanBytes(v.Bytes))
	}
	switch {
	case v.BlobsSkipped != "":
		fmt.Fprintf(w, "blobs left alone: %s\n", v.BlobsSkipped)
	case v.Blobs > 0:
		verb := "removed"
		if v.DryRun {
			verb = "would remove"
		}
		fmt.Fprintf(w, "%s %d %s no checkpoint needs, %s\n", verb, v.Blobs, plural(v.Blobs, "blob", "blobs"), humanBytes(v.BlobBytes))
	}
	switch {
	case vacuum:
		fmt.Fprintf(w, "database %s → %s\n", humanBytes(v.DatabaseBefore), humanBytes(v.DatabaseAfter))
	case v.DryRun:
		fmt.Fprintln(w, "nothing was changed (--dry-run)")
	case v.Bytes > 0:
		fmt.Fprintln(w, "the database reuses the space; 'agent prune --older-than "+c.String("older-than")+" --vacuum' gives it back to the disk")
	}
}

// parseAge reads --older-than: a Go duration, or whole days as 30d.
func parseAge(s string) (time.Duration, error) {
	bad := usageErrorf("--older-than %q: want a duration such as 720h, or a number of days such as 30d", s)
	var d time.Duration
	if days, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil {
			return 0, bad
		}
		if n > math.MaxInt64/int64(24*time.Hour) {
			return 0, usageErrorf("--older-than %q is too long; at most %dd", s, math.MaxInt64/int64(24*time.Hour))
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(s)); err != nil {
			return 0, bad
		}
	}
	if d < 0 {
		return 0, usageErrorf("--older-than %q must not be negative", s)
	}
	return d, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func plural64(n int64, one, many string) string { return plural(int(min(n, 2)), one, many) }

// humanBytes says a size in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 2 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMG"[i])
}
