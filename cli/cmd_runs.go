package cli

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/event"
	"agent/store"
	"agent/supervisor"
)

func runsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON: one object per line for lists, one object otherwise"}
	return &cli.Command{
		Name:  "runs",
		Usage: "inspect persisted runs",
		Description: "Every run is stored in $AGENT_HOME/agent.db as it happens. RUN_ID may be a unique prefix.\n\n" +
			"Examples:\n" +
			"  agent runs list\n" +
			"  agent runs show 3f2a\n" +
			"  agent runs events 3f2a --follow --json",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list recent runs, newest first",
				Flags:  []cli.Flag{jsonFlag, &cli.IntFlag{Name: "limit", Value: 20, Usage: "show at most N runs"}},
				Action: runsListAction,
			},
			{
				Name:      "show",
				Usage:     "show one run: status, result and transcript",
				ArgsUsage: "RUN_ID",
				Flags:     []cli.Flag{jsonFlag},
				Action:    runsShowAction,
			},
			{
				Name:      "events",
				Usage:     "print a run's events",
				ArgsUsage: "RUN_ID",
				Flags: []cli.Flag{
					jsonFlag,
					&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until the run ends"},
					&cli.Int64Flag{Name: "after-seq", Usage: "start after this seq"},
				},
				Action: runsEventsAction,
			},
		},
	}
}

// openStore reads the settings and opens the store they name.
func openStore() (config.Settings, *store.DB, error) {
	settings, err := config.Load()
	if err != nil {
		return settings, nil, err
	}
	db, err := store.Open(settings.Database)
	return settings, db, err
}

// openRun opens the store and finds the run named by the only argument.
func openRun(c *cli.Context, command string) (*store.DB, *store.Run, error) {
	if c.Args().Len() != 1 {
		return nil, nil, usageErrorf("%s needs exactly one RUN_ID; see 'agent runs list'", command)
	}
	_, db, err := openStore()
	if err != nil {
		return nil, nil, err
	}
	r, err := db.GetRun(c.Context, c.Args().First())
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, r, nil
}

func runsListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("runs list takes no arguments")
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	runs, err := db.ListRuns(c.Context, c.Int("limit"))
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		return jsonLines(w, db.RunViews(runs))
	}
	if len(runs) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no runs yet; start one with: agent run \"PROMPT\"")
		return nil
	}
	return console.PrintRuns(w, runs)
}

func runsShowAction(c *cli.Context) error {
	db, r, err := openRun(c, "runs show")
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := supervisor.RunDetail(c.Context, db, r)
	if err != nil {
		return err
	}
	return output(c, v, func(w io.Writer) { console.PrintRun(w, v) })
}

func runsEventsAction(c *cli.Context) error {
	db, r, err := openRun(c, "runs events")
	if err != nil {
		return err
	}
	defer db.Close()
	enc := event.NewEncoder(c.App.Writer)
	return db.FollowEvents(c.Context, r.ID, c.Int64("after-seq"), c.Bool("follow"), func(e event.Event) error {
		if c.Bool("json") {
			return enc.Encode(e)
		}
		_, err := fmt.Fprintln(c.App.Writer, console.EventLine(e))
		return err
	})
}
