package cli

import (
	"errors"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"agent/chat"
	"agent/config"
	"agent/gateway/api"
	"agent/supervisor"
)

func chatCommand() *cli.Command {
	flags := append(modelFlags(),
		&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "directory the tools work in (default: the current directory)"},
		&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer only these tools, comma separated"},
		&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer these tools, comma separated"},
		mcpConfigFlag(), outputSchemaFlag(), imageFlag("with the first message (/image PATH: with the next)"),
		&cli.StringFlag{Name: "session", Usage: "go on in this local session (a unique prefix will do)"},
		&cli.BoolFlag{Name: "continue", Aliases: []string{"c"}, Usage: "go on in the local session last active (with --gateway, the gateway's)"},
		&cli.StringFlag{Name: "gateway", Usage: "keep the session in a gateway, where a turn goes on if the chat closes: `URL`, or bare for $AGENT_GATEWAY or " + api.DefaultURL},
	)
	return &cli.Command{
		Name:  "chat",
		Usage: "a conversation in the terminal: each message a durable run of one session",
		Description: "Each message is a run of the chat's session, seeing its earlier messages, so a crash, Ctrl-C or a closed\n" +
			"terminal loses nothing. The session is in the local store: 'agent sessions list' shows it, and --continue\n" +
			"(or --session ID) goes on in it. Enter sends; Ctrl-J or Alt-Enter adds a line; a paste stays one message;\n" +
			"↑/↓ the history; Tab completes /commands (/help); Ctrl-C interrupts a turn (resumable: the next message goes\n" +
			"on with it in context); Ctrl-C twice or Ctrl-D leaves. With stdin not a terminal each line is a message, the\n" +
			"output agent run's (--json too), stopping at the first run that does not complete, exiting as it did.\n\n" +
			"Examples:\n" +
			"  printf 'my name is Ada\\nwhat is my name?\\n' | agent chat --json\n" +
			"  echo 'and what did I ask first?' | agent chat --continue",
		Flags:  flags,
		Action: chatAction,
	}
}

func chatAction(c *cli.Context) error {
	if c.Args().Len() > 0 || c.IsSet("session") && c.Bool("continue") {
		return usageErrorf("usage: agent chat [--session ID | --continue] [flags]; type the messages, or pipe them one a line")
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	cfg := chat.Config{SessionID: c.String("session"), Continue: c.Bool("continue"), Out: c.App.Writer, Err: c.App.ErrWriter, JSON: c.Bool("json")}
	defaults := supervisor.DefaultOptions(settings)
	addr, remote := gatewayAddress(c)
	if remote {
		defaults = supervisor.Options{} // the gateway fills in its own
	}
	defaults.AskHuman = askHuman(c)
	if cfg.Options, err = flagOptions(c, defaults); err != nil {
		return err
	}
	if remote {
		if cfg.Gateway, err = dialGateway(c.Context, addr); err != nil {
			return err
		}
		defer cfg.Gateway.Close()
		cfg.GatewayAddr = addr
		if cfg.Workspace, err = filepath.Abs(config.Pick(c.String("workspace"), ".")); err != nil {
			return usageErrorf("--workspace: %v", err)
		}
	} else {
		db, sup, err := openSupervisor(settings)
		if err != nil {
			return err
		}
		defer db.Close()
		opts, ws, err := sup.Prepare(cfg.Options, config.Pick(c.String("workspace"), "."))
		if err != nil {
			return err
		}
		cfg.DB, cfg.Supervisor, cfg.Options, cfg.Workspace = db, sup, opts, ws.Root()
	}
	conv, err := chat.Open(c.Context, cfg)
	if errors.As(err, new(*chat.GatewaySessionError)) {
		return usageErrorf("%v", err)
	} else if err != nil {
		return err
	}
	if inline(c) {
		return conv.Terminal(c.Context, settings.Home)
	}
	turn, err := conv.Script(c.Context, c.App.Reader)
	if errors.Is(err, chat.ErrNoMessage) {
		return usageErrorf("%v", err)
	} else if err != nil {
		return err
	}
	return finished(c, turn.RunID, turn.End)
}
