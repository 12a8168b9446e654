package cli

import (
	"errors"
	"io"

	"github.com/urfave/cli/v2"

	"agent/checkpoint"
	"agent/config"
	"agent/console"
	"agent/event"
)

func rewindCommand() *cli.Command {
	return &cli.Command{
		Name:      "rewind",
		Usage:     "put back the files a run changed, as they were before it",
		ArgsUsage: "RUN_ID",
		Description: "Before a run first changes a file with write_file or edit_file, agent saves the file's content\n" +
			"(or notes that it did not exist) as a numbered checkpoint; the content is kept in $AGENT_HOME/blobs.\n" +
			"rewind puts those files back and prints one line per file:\n\n" +
			"  restored PATH   its content and mode from before the run are back\n" +
			"  removed PATH    the run created it, so it is deleted again\n" +
			"  skipped PATH    it changed after the run (edited or deleted since): rewind leaves your change\n" +
			"                  alone unless you pass --force\n" +
			"  failed PATH     it could not be put back; the reason follows\n\n" +
			"Not tracked: files changed by bash or by anything but write_file and edit_file, and directories\n" +
			"the run created (they stay). --to N rewinds only the files the run first changed at checkpoint N\n" +
			"or later and leaves the earlier ones as the run left them; --list shows the checkpoints.\n" +
			"RUN_ID may be a unique prefix. The rewind is recorded in the run as a rewind.completed event.\n\n" +
			"Exit codes: 0 nothing failed, 1 some file failed, 2 unknown run or --to out of range,\n" +
			"4 run busy (a live process holds it).\n\n" +
			"Examples:\n" +
			"  agent rewind 0190c3a2\n" +
			"  agent rewind 0190c3a2 --list\n" +
			"  agent rewind 0190c3a2 --to 3\n" +
			"  agent rewind 0190c3a2 --force --json",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "to", Value: 1, Usage: "rewind only files first changed at checkpoint `N` or later; 1 is the whole run"},
			&cli.BoolFlag{Name: "force", Usage: "put back files that changed after the run too, discarding those changes"},
			&cli.BoolFlag{Name: "list", Usage: "list the run's checkpoints and change nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object (with --list: one per checkpoint, per line)"},
		},
		Action: rewindAction,
	}
}

func rewindAction(c *cli.Context) error {
	if c.Int("to") < 1 {
		return usageErrorf("--to must be a checkpoint number, 1 or more")
	}
	if c.Args().Len() != 1 {
		return usageErrorf("rewind needs exactly one RUN_ID; see 'agent runs list'")
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	db, sup, err := openSupervisor(settings)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := db.GetRun(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	if c.Bool("list") {
		cps, err := db.Checkpoints(c.Context, r.ID)
		switch {
		case err != nil:
			return err
		case c.Bool("json"):
			return jsonLines(c.App.Writer, cps)
		}
		return console.PrintCheckpoints(c.App.Writer, r.ID, cps)
	}

	rep, err := sup.Rewind(c.Context, r, c.Int("to"), c.Bool("force"), nil)
	var rng *checkpoint.RangeError
	if errors.As(err, &rng) {
		return usageErrorf("--to: %v; see 'agent rewind %s --list'", err, console.ShortID(r.ID))
	}
	if err != nil {
		return err
	}
	if err := output(c, rep, func(w io.Writer) { console.PrintRewind(w, rep) }); err != nil {
		return err
	}
	if rep.Count(event.StatusFailed) > 0 {
		return &exitError{code: 1}
	}
	return nil
}
