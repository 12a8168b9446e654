package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/store"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check that the data directory, the store and the gateway token can be used",
		Description: "Checks, one line each: AGENT_HOME can be written; the store in use passes SQLite's full\n" +
			"integrity check (or its PostgreSQL database answers); the gateway token file, if any, is readable by you alone; and which runs a\n" +
			"crash or an interrupt left to resume. Each problem says what to do.\n\n" +
			"Exit codes: 0 all is well, 5 something must be fixed.\n\n" +
			"Examples:\n" +
			"  agent doctor\n" +
			"  agent doctor --json",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object per check, one per line"}},
		Action: doctorAction,
	}
}

func doctorAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("doctor takes no arguments")
	}
	var checks []console.Check
	add := func(what string, err error, ok string) {
		if err != nil {
			ok = errorLine(err)
		}
		checks = append(checks, console.Check{Check: what, OK: err == nil, Say: ok})
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	add("data directory", config.Writable(settings.Home), settings.Home+" can be written")
	db, err := store.Open(settings.Database)
	if err == nil {
		defer db.Close()
		err = db.Check(c.Context, true)
	}
	ok := config.DBPath(settings.Home) + " passes SQLite's integrity check"
	if store.IsURL(settings.Database) {
		ok = "the PostgreSQL database " + store.Redact(settings.Database) + " answers"
	}
	add("store", err, ok)
	if _, err := os.Stat(filepath.Join(settings.Home, "gateway.token")); err == nil {
		_, err = api.ClientToken(settings.Home)
		add("gateway token", err, "the token file is readable by you alone")
	}
	if db != nil {
		st, err := db.Stats(c.Context) // by the status people are shown
		waiting := st.Runs[event.StatusRunning] + st.Runs[event.StatusQueued] + st.Runs[event.StatusInterrupted] + st.Runs[event.StatusPlanned]
		say := "no run is waiting to be resumed"
		if waiting > 0 {
			say = fmt.Sprintf("%d runs were left running or interrupted; 'agent runs list' shows them, 'agent resume RUN_ID' continues one", waiting)
		}
		add("runs", err, say)
	}
	if c.Bool("json") {
		_ = jsonLines(c.App.Writer, checks)
	} else {
		console.PrintChecks(c.App.Writer, checks)
	}
	if slices.ContainsFunc(checks, func(ch console.Check) bool { return !ch.OK }) {
		return &exitError{code: 5}
	}
	return nil
}
