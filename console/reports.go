package console

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"agent/checkpoint"
	"agent/event"
	"agent/store"
)

// PruneView is agent prune --json: what it was asked, what it removed
// and, with --vacuum, the database's size (its file and WAL) before and
// after.
type PruneView struct {
	DryRun    bool      `json:"dry_run"`
	OlderThan string    `json:"older_than"`
	Before    time.Time `json:"before"` // runs that finished before it
	Runs      int       `json:"runs"`
	store.PruneReport
	DatabaseBefore int64 `json:"database_bytes_before,omitempty"`
	DatabaseAfter  int64 `json:"database_bytes_after,omitempty"`
}

// PrintPruneView prints what agent prune did (as JSON with asJSON), and
// how to give the space back to the disk; flag is --older-than as given.
func PrintPruneView(w io.Writer, v PruneView, vacuumed, asJSON bool, flag string) error {
	if asJSON {
		return json.NewEncoder(w).Encode(v)
	}
	PrintPrune(w, v.PruneReport, v.Before, v.DryRun)
	switch {
	case vacuumed:
		fmt.Fprintf(w, "database %s → %s\n", HumanBytes(v.DatabaseBefore), HumanBytes(v.DatabaseAfter))
	case v.DryRun:
		fmt.Fprintln(w, "nothing was changed (--dry-run)")
	case v.Bytes > 0:
		fmt.Fprintln(w, "the database reuses the space; 'agent prune --older-than "+flag+" --vacuum' gives it back to the disk")
	}
	return nil
}

// PrintRewind shows what a rewind did: a line per file and a summary.
func PrintRewind(w io.Writer, rep checkpoint.Report) {
	if len(rep.Files) == 0 && rep.To == 0 {
		noCheckpoints(w, rep.RunID)
		return
	}
	for _, f := range rep.Files {
		switch {
		case f.Reason == "":
			fmt.Fprintf(w, "%s %s\n", f.Outcome, f.Path)
		case f.Outcome == event.StatusSkipped || f.Outcome == event.StatusFailed:
			fmt.Fprintf(w, "%s %s: %s\n", f.Outcome, f.Path, f.Reason)
		default:
			fmt.Fprintf(w, "%s %s (%s)\n", f.Outcome, f.Path, f.Reason)
		}
	}
	fmt.Fprintf(w, "rewound run %s to checkpoint %d: %d restored, %d removed, %d skipped, %d failed\n",
		ShortID(rep.RunID), rep.To, rep.Count(event.StatusRestored), rep.Count(event.StatusRemoved),
		rep.Count(event.StatusSkipped), rep.Count(event.StatusFailed))
}

// PrintCheckpoints is the table of `agent rewind --list`: each file as it
// was before the run, and the call that changed it.
func PrintCheckpoints(w io.Writer, runID string, cps []store.Checkpoint) error {
	if len(cps) == 0 {
		return noCheckpoints(w, runID)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "N\tPATH\tBEFORE THE RUN\tCHANGED BY")
	for _, cp := range cps {
		before := "did not exist"
		if cp.Existed {
			before = fmt.Sprintf("%d bytes", cp.Bytes)
		}
		by := cp.Tool
		if cp.PhaseID != "" {
			by += fmt.Sprintf(" (phase %s attempt %d)", cp.PhaseID, cp.Attempt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", cp.Number, cp.Path, before, by)
	}
	return tw.Flush()
}

func noCheckpoints(w io.Writer, runID string) error {
	_, err := fmt.Fprintf(w, "run %s has no checkpoints: it changed no files with write_file or edit_file\n", ShortID(runID))
	return err
}

// PrintPrune says what a prune of the runs that finished before before
// removed, or with dryRun would remove.
func PrintPrune(w io.Writer, rep store.PruneReport, before time.Time, dryRun bool) {
	when := before.Local().Format("2006-01-02 15:04")
	verb := "pruned"
	if dryRun {
		verb = "would prune"
	}
	if len(rep.Runs) == 0 {
		fmt.Fprintf(w, "no run that finished before %s is left to prune\n", when)
	} else {
		fmt.Fprintf(w, "%s %s that finished before %s: %s and %s (about %s)\n", verb, plural(len(rep.Runs), "run"), when,
			plural(int(rep.Deltas), "message delta"), plural(int(rep.ToolOutputs), "tool output"), HumanBytes(rep.Bytes))
	}
	switch {
	case rep.BlobsSkipped != "":
		fmt.Fprintf(w, "blobs left alone: %s\n", rep.BlobsSkipped)
	case rep.Blobs > 0:
		verb := "removed"
		if dryRun {
			verb = "would remove"
		}
		fmt.Fprintf(w, "%s %s no checkpoint needs, %s\n", verb, plural(rep.Blobs, "blob"), HumanBytes(rep.BlobBytes))
	}
}
