package cli

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"agent/console"
)

func sessionsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON: one object per line for lists, one object otherwise"}
	return &cli.Command{
		Name:  "sessions",
		Usage: "inspect, fork and delete gateway sessions",
		Description: "Sessions live in $AGENT_HOME/agent.db, written by 'agent gateway'. A run in a session sees the\n" +
			"session's earlier messages. SESSION may be a unique prefix.\n\n" +
			"Examples:\n" +
			"  agent sessions list\n" +
			"  agent sessions list --all          # with the sessions scheduled jobs' ticks created\n" +
			"  agent sessions show 3f2a\n" +
			"  agent sessions fork 3f2a --seq 40     # a new session with the conversation up to seq 40\n" +
			"  agent run --gateway --session NEW_ID \"try another approach\"\n" +
			"  agent sessions delete 3f2a         # with its runs and their events; none may be running or waiting",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "list sessions, most recently active first", Flags: []cli.Flag{jsonFlag,
				&cli.IntFlag{Name: "limit", Value: 20, Usage: "show at most N sessions"},
				&cli.BoolFlag{Name: "all", Usage: "also list the sessions scheduled jobs' ticks created"}}, Action: sessionsListAction},
			{Name: "show", Usage: "show a session and its runs", ArgsUsage: "SESSION", Flags: []cli.Flag{jsonFlag}, Action: sessionsShowAction},
			{Name: "fork", Usage: "start a new session from a session's conversation up to a seq", ArgsUsage: "SESSION",
				Flags: []cli.Flag{jsonFlag,
					&cli.Int64Flag{Name: "seq", Usage: "keep the conversation up to this event seq", DefaultText: "all of it"},
					&cli.StringFlag{Name: "title", Usage: "the new session's title"}},
				Action: sessionsForkAction},
			{Name: "delete", Usage: "delete a session with its runs and their events; none may be running or waiting (exit 4)",
				ArgsUsage: "SESSION", Flags: []cli.Flag{jsonFlag}, Action: sessionsDeleteAction},
		},
	}
}

func sessionsListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("sessions list takes no arguments")
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	sessions, err := db.ListSessions(c.Context, c.Int("limit"), c.Bool("all"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return console.PrintSessionsJSON(c.App.Writer, sessions)
	}
	if len(sessions) == 0 {
		jobs, err := db.ListSessions(c.Context, 1, true)
		console.PrintNoSessions(c.App.ErrWriter, !c.Bool("all") && err == nil && len(jobs) > 0)
		return nil
	}
	return console.PrintSessions(c.App.Writer, sessions)
}

func sessionsShowAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("sessions show needs exactly one SESSION")
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := db.GetSession(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	runs, err := db.ListSessionRuns(c.Context, s.ID)
	if err != nil {
		return err
	}
	if !c.Bool("json") {
		return console.PrintSession(c.App.Writer, *s, runs)
	}
	return console.PrintSessionJSON(c.App.Writer, *s, db.RunViews(runs))
}

func sessionsDeleteAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("sessions delete needs exactly one SESSION")
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := db.DeleteSession(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	return console.PrintDeletedSession(c.App.Writer, c.App.ErrWriter, *s, c.Bool("json"))
}

func sessionsForkAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("sessions fork needs exactly one SESSION")
	}
	if c.Int64("seq") < 0 {
		return usageErrorf("--seq must not be negative")
	}
	_, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := db.ForkSession(c.Context, c.Args().First(), uuid.NewString(), c.String("title"), c.Int64("seq"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(s.View())
	}
	fmt.Fprintf(c.App.Writer, "%s\n", s.ID)
	fmt.Fprintf(c.App.ErrWriter, "forked session %s %s; continue it with: agent run --gateway --session %s \"PROMPT\"\n",
		s.ParentID, console.ForkPoint(s.ForkedFromSeq), console.ShortID(s.ID))
	return nil
}
