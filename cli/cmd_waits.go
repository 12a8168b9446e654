package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
)

// The commands that answer a waiting run (docs/PROTOCOL.md#waits): each
// goes through supervisor.Answer, as the gateway, the web view and the
// links do; the first answer wins.

func waitingCommand() *cli.Command {
	return &cli.Command{
		Name:  "waiting",
		Usage: "list the runs that wait for a person or a time: the inbox",
		Description: "Each line is a run, what it waits for (an approval of a tool call, an answer to a question,\n" +
			"a signal or a time) and until when; the deadline applies the wait's on_timeout.\n\n" +
			"Examples:\n" +
			"  agent waiting\n" +
			"  agent approve 3f2a --resume      # allow the call and continue the run here\n" +
			"  agent deny 3f2a --reason \"not on a Friday\"",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object per wait"}},
		Action: waitingAction,
	}
}

func answerFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "call", Usage: "the tool call's `CALL_ID`, when the run waits for more than one"},
		&cli.BoolFlag{Name: "resume", Usage: "continue the run in this process at once (a gateway's or a waiting process's run goes on by itself)"},
		&cli.BoolFlag{Name: "json", Usage: "print the resolved wait as JSON"},
	}, extra...)
}

func approveCommand() *cli.Command {
	return &cli.Command{
		Name: "approve", Usage: "allow the tool call a run waits for", ArgsUsage: "RUN_ID",
		Description: "Allows the call and records who did (cli). --always allows the rule that asked for the rest of\n" +
			"the run. RUN_ID may be a unique prefix.",
		Flags:  answerFlags(&cli.BoolFlag{Name: "always", Usage: "allow the rule that asked for the rest of the run"}),
		Action: func(c *cli.Context) error { return answerAction(c, supervisor.DecideAllow, 1) },
	}
}

func denyCommand() *cli.Command {
	return &cli.Command{
		Name: "deny", Usage: "refuse the tool call a run waits for (or a question)", ArgsUsage: "RUN_ID",
		Description: "The call does not run; the model is told who denied it and why, and decides what to do next.",
		Flags:       answerFlags(&cli.StringFlag{Name: "reason", Usage: "why, for the model: `TEXT`"}),
		Action:      func(c *cli.Context) error { return answerAction(c, supervisor.DecideDeny, 1) },
	}
}

func answerCommand() *cli.Command {
	return &cli.Command{
		Name: "answer", Usage: "answer the question a run asked (ask_human)", ArgsUsage: "RUN_ID TEXT",
		Flags:  answerFlags(),
		Action: func(c *cli.Context) error { return answerAction(c, supervisor.DecideAnswer, 2) },
	}
}

func signalCommand() *cli.Command {
	return &cli.Command{
		Name: "signal", Usage: "send the named signal a run waits for (wait_for_signal)", ArgsUsage: "RUN_ID NAME",
		Flags:  answerFlags(&cli.StringFlag{Name: "data", Usage: "the signal's payload, a `JSON` value"}),
		Action: func(c *cli.Context) error { return answerAction(c, supervisor.DecideSignal, 2) },
	}
}

// answerAction resolves a wait of the run the first argument names.
func answerAction(c *cli.Context, decide string, args int) error {
	if c.Args().Len() != args {
		return usageErrorf("%s needs %s; see 'agent waiting'", c.Command.Name, c.Command.ArgsUsage)
	}
	d := supervisor.Decision{CallID: c.String("call"), Decide: decide, Via: event.ViaCLI, Who: os.Getenv("USER")}
	switch decide {
	case supervisor.DecideAllow:
		d.Always = c.Bool("always")
	case supervisor.DecideDeny:
		d.Text = c.String("reason")
	case supervisor.DecideAnswer:
		d.Text = c.Args().Get(1)
	case supervisor.DecideSignal:
		d.Name = c.Args().Get(1)
		if data := c.String("data"); data != "" {
			if !json.Valid([]byte(data)) {
				return usageErrorf("--data must be a JSON value, e.g. '{\"ok\":true}' or '\"text\"'")
			}
			d.Data = []byte(data)
		}
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := db.GetRun(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	w, err := supervisor.Answer(c.Context, db, r.ID, d)
	var answered *store.AnsweredError
	var fits *supervisor.AnswerError
	switch {
	case errors.As(err, &answered):
		return &exitError{code: 4, msg: fmt.Sprintf("run %s: %v", r.ID, err)}
	case errors.As(err, &fits):
		return usageErrorf("run %s: %v", r.ID, err)
	case err != nil:
		return err
	}
	if err := output(c, api.NewWaitInfo(r, w), func(out io.Writer) {
		fmt.Fprintf(out, "%s: %s\n", strings.TrimSpace(console.ResolvedLine(*w.Resolution)), console.WaitLine(w.Waiting))
	}); err != nil {
		return err
	}
	if note := supervisor.GoesOn(r, c.Bool("resume"), time.Now()); note != "" {
		fmt.Fprintln(c.App.ErrWriter, note)
		return nil
	}
	db.Close()
	return resumeHere(c, r.ID)
}

func waitingAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("waiting takes no arguments")
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	if c.Bool("json") { // as GET /v1/waiting shows them
		list, err := api.Inbox(c.Context, db)
		if err != nil {
			return err
		}
		return jsonLines(c.App.Writer, list.Waits)
	}
	ws, err := db.OpenWaits(c.Context)
	if err != nil {
		return err
	}
	console.PrintWaits(c.App.Writer, ws, supervisor.HowToAnswer)
	return nil
}
