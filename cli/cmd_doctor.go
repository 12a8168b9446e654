package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/event"
	"agent/gateway/api"
	"agent/store"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check that the data directory, the store and the gateway token can be used",
		Description: "Checks, one line each: AGENT_HOME can be written; the database passes SQLite's full\n" +
			"integrity check; the gateway token file, if any, is readable by you alone; and which runs a\n" +
			"crash or an interrupt left to resume. Each problem says what to do.\n\n" +
			"Exit codes: 0 all is well, 5 something must be fixed.\n\n" +
			"Examples:\n" +
			"  agent doctor\n" +
			"  agent doctor --json",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object per check, one per line"}},
		Action: doctorAction,
	}
}

// finding is one check of agent doctor.
type finding struct {
	Check string `json:"check"`
	OK    bool   `json:"ok"`
	Say   string `json:"say"`
}

func doctorAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("doctor takes no arguments")
	}
	var found []finding
	add := func(check string, err error, ok string) {
		if err != nil {
			found = append(found, finding{Check: check, Say: errorLine(err)})
			return
		}
		found = append(found, finding{Check: check, OK: true, Say: ok})
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	add("data directory", writable(settings.Home), settings.Home+" can be written")
	db, err := store.Open(settings.Database)
	if err == nil {
		defer db.Close()
		err = db.Check(c.Context, true)
	}
	add("store", err, config.DBPath(settings.Home)+" passes SQLite's integrity check")
	if _, err := os.Stat(filepath.Join(settings.Home, "gateway.token")); err == nil {
		_, err = api.ClientToken(settings.Home)
		add("gateway token", err, "the token file is readable by you alone")
	}
	if db != nil {
		runs, err := db.ListRuns(c.Context, 0)
		waiting := 0
		for _, r := range runs {
			if r.Status == event.StatusRunning || r.Status == event.StatusInterrupted {
				waiting++
			}
		}
		say := "no run is waiting to be resumed"
		if waiting > 0 {
			say = fmt.Sprintf("%d runs were left running or interrupted; 'agent runs list' shows them, 'agent resume RUN_ID' continues one", waiting)
		}
		add("runs", err, say)
	}

	failed := false
	for _, f := range found {
		failed = failed || !f.OK
		if c.Bool("json") {
			_ = json.NewEncoder(c.App.Writer).Encode(f)
			continue
		}
		mark := "ok     "
		if !f.OK {
			mark = "PROBLEM"
		}
		fmt.Fprintf(c.App.Writer, "%s %-15s %s\n", mark, f.Check, f.Say)
	}
	if failed {
		return &exitError{code: 5}
	}
	return nil
}

// writable tries to create a file in dir.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s cannot be written: %v; make it writable, or set AGENT_HOME to a directory you own", dir, pe.Err)
		}
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
