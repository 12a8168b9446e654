package cli

import (
	"errors"

	"github.com/urfave/cli/v2"

	"agent/chat"
	"agent/config"
	"agent/console"
	"agent/supervisor"
)

func chatCommand() *cli.Command {
	flags := append(modelFlags(),
		&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "directory the tools work in (default: the current directory)"},
		&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer only these tools, comma separated"},
		&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer these tools, comma separated"},
		mcpConfigFlag(),
		&cli.StringFlag{Name: "session", Usage: "go on in this local session (a unique prefix will do)"},
		&cli.BoolFlag{Name: "continue", Aliases: []string{"c"}, Usage: "go on in the local session last active"},
	)
	return &cli.Command{
		Name:  "chat",
		Usage: "a conversation in the terminal: each message a durable run of one session",
		Description: "Each message is a run of the chat's session, seeing the session's earlier messages, so a crash,\n" +
			"Ctrl-C or a closed terminal loses nothing. The session lives in the local store: 'agent sessions\n" +
			"list' shows it, and 'agent chat --continue' (or --session ID) goes on in it.\n" +
			"With stdin not a terminal, each line is a message and the output is agent run's (--json too);\n" +
			"it stops at the first run that does not complete, exiting as that run did.\n\n" +
			"Examples:\n" +
			"  printf 'my name is Ada\\nwhat is my name?\\n' | agent chat --json\n" +
			"  echo 'and what did I ask first?' | agent chat --continue",
		Flags:  flags,
		Action: chatAction,
	}
}

func chatAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("chat takes no arguments: type the messages (or pipe them, one a line)")
	}
	if c.IsSet("session") && c.Bool("continue") {
		return usageErrorf("--session and --continue together: give one")
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	opts, err := flagOptions(c, supervisor.DefaultOptions(settings))
	if err != nil {
		return err
	}
	db, sup, err := openSupervisor(settings)
	if err != nil {
		return err
	}
	defer db.Close()
	opts, ws, err := sup.Prepare(opts, config.Pick(c.String("workspace"), "."))
	if err != nil {
		return err
	}
	conv, err := chat.Open(c.Context, chat.Config{
		DB: db, Supervisor: sup, Options: opts, Workspace: ws.Root(),
		SessionID: c.String("session"), Continue: c.Bool("continue"),
		Out: c.App.Writer, Err: c.App.ErrWriter, JSON: c.Bool("json"),
	})
	if errors.As(err, new(*chat.GatewaySessionError)) {
		return usageErrorf("%v", err)
	} else if err != nil {
		return err
	}
	if console.IsTerminal(c.App.Reader) && !c.Bool("json") {
		return usageErrorf("agent chat on a terminal is not built yet; pipe the messages, one a line")
	}
	turn, err := conv.Script(c.Context, c.App.Reader)
	if errors.Is(err, chat.ErrNoMessage) {
		return usageErrorf("%v", err)
	} else if err != nil {
		return err
	}
	return finished(c, turn.RunID, turn.End)
}
