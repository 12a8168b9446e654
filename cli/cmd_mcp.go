package cli

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/mcpserve"
	"agent/supervisor"
)

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "MCP tool servers: list the configured ones and their tools, or serve agent itself over MCP",
		Description: "Servers are configured in $AGENT_HOME/config.toml under [mcp_servers.NAME] (a command speaking MCP\n" +
			"on stdio, or the url of a Streamable HTTP server), and with --mcp-config FILE in Claude Code's\n" +
			".mcp.json format. Their tools are offered to the model as mcp__SERVER__TOOL; --allow-tools and\n" +
			"--deny-tools take those names, and mcp__SERVER for all of a server's tools.\n\n" +
			"Example config.toml:\n" +
			"  [mcp_servers.github]\n" +
			"  command = \"github-mcp-server\"\n" +
			"  args = [\"stdio\"]\n" +
			"  env = { GITHUB_TOKEN = \"$GITHUB_TOKEN\" }\n" +
			"  [mcp_servers.github.effects.create_issue]   # a side effect, sent at most once\n" +
			"  receipt = \"issue_created\"\n" +
			"  key_args = [\"owner\", \"repo\", \"title\"]",
		Subcommands: []*cli.Command{mcpListCommand(), mcpServeCommand()},
	}
}

func mcpListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "start each configured MCP server and list its tools, or say why it did not start",
		Description: "Each server is started as a run in this directory would start it (its startup_timeout_s applies;\n" +
			"a stdio server in the sandbox unless its configuration says sandbox = false) and stopped again.\n\n" +
			"Exit codes: 0 every required server started, 5 one did not, 2 the configuration is wrong.\n\n" +
			"Examples:\n" +
			"  agent mcp list\n" +
			"  agent mcp list --mcp-config .mcp.json --json",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per server, one per line"},
			mcpConfigFlag(),
			&cli.StringFlag{Name: "sandbox", Usage: "the run's sandbox the stdio servers start in, `MODE`: workspace-write or off", DefaultText: "workspace-write"},
		},
		Action: mcpListAction,
	}
}

func mcpListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("mcp list takes no arguments; name config files with --mcp-config")
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	o, err := flagOptions(c, supervisor.Options{}) // --mcp-config and --sandbox
	if err != nil {
		return err
	}
	listings, err := supervisor.ListServers(c.Context, settings.Home, "", o, version)
	if err != nil {
		return err
	}
	out := c.App.Writer
	if len(listings) == 0 && !c.Bool("json") {
		fmt.Fprintf(out, "no MCP servers configured: add [mcp_servers.NAME] to %s, or name a .mcp.json with --mcp-config\n",
			filepath.Join(settings.Home, "config.toml"))
		return nil
	}
	failedRequired := 0
	enc := json.NewEncoder(out)
	for _, l := range listings {
		if l.Err != nil && l.Server.Required {
			failedRequired++
		}
		if c.Bool("json") {
			_ = enc.Encode(l)
			continue
		}
		console.PrintServer(out, l)
	}
	if failedRequired > 0 {
		return &exitError{code: 5, msg: fmt.Sprintf("%d required MCP server(s) did not start; runs that use them fail at start", failedRequired)}
	}
	return nil
}

func mcpServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve agent itself over MCP on stdio: tools that start, follow, resume and stop durable runs",
		Description: "An MCP client (Claude Code, Codex, any other) starts this command and speaks MCP on its stdin\n" +
			"and stdout. Its tools:\n" +
			"  run      prompt, workspace?, wait_s?          start a run, as 'agent run' does\n" +
			"  harness  request | plan, workspace?, wait_s?  start a harness run; a plan (a mission.json object)\n" +
			"                                                runs as --plan-file does, without asking\n" +
			"  status   run_id                               status, reason, result, turns, usage; a harness's phases\n" +
			"  events   run_id, after_seq?, limit?           stored events as JSON lines, paged by after_seq\n" +
			"  resume   run_id, wait_s?                      continue a run, as 'agent resume' does\n" +
			"  cancel   run_id, mode?                        stop a running run: for good, or with mode interrupt as\n" +
			"                                                Ctrl-C does (saved, resumable)\n" +
			"run and harness return the run id at once and, if the run ends within wait_s (default 30, at most\n" +
			"300, 0: do not wait), how it ended. Keep wait_s under the client's tool timeout (Codex:\n" +
			"tool_timeout_sec, default 60). A run id may be a unique prefix.\n\n" +
			"Every run is an 'agent run', 'agent harness' or 'agent resume' process of its own, detached from\n" +
			"the server: it goes on after the call returns and after the client stops the server. It is an\n" +
			"ordinary run: 'agent runs list' shows it, 'agent resume' continues it. Its output is kept in\n" +
			"$AGENT_HOME/mcp-serve/RUN_ID.log. A workspace defaults to the directory the server was started\n" +
			"in; the model and the other settings come from the environment and config.toml, as for 'agent\n" +
			"run'. stdout carries only the protocol; the server's own log goes to stderr.\n\n" +
			"Register it with Claude Code:\n" +
			"  claude mcp add agent -- agent mcp serve\n" +
			"or with Codex, in ~/.codex/config.toml:\n" +
			"  [mcp_servers.agent]\n" +
			"  command = \"agent\"\n" +
			"  args = [\"mcp\", \"serve\"]\n\n" +
			"Examples:\n" +
			"  agent mcp serve     # serves until the client closes stdin",
		Action: mcpServeAction,
	}
}

func mcpServeAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("mcp serve takes no arguments; an MCP client starts it and calls its tools")
	}
	settings, db, err := openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mcpserve.Serve(ctx, mcpserve.Config{
		DB: db, Home: settings.Home, Version: version,
		Log: slog.New(slog.NewTextHandler(c.App.ErrWriter, nil)),
	})
}
