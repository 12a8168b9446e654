package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/mcp"
	"agent/mcpserve"
	"agent/runner"
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

// serverListing is one line of agent mcp list --json.
type serverListing struct {
	Server    string         `json:"server"`
	Source    string         `json:"source"`
	Transport string         `json:"transport"` // stdio or http
	Required  bool           `json:"required"`
	OK        bool           `json:"ok"`
	Error     string         `json:"error,omitempty"`
	Tools     []mcp.ToolInfo `json:"tools"`
}

func mcpListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("mcp list takes no arguments; name config files with --mcp-config")
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	var files []string
	for _, f := range c.StringSlice("mcp-config") {
		abs, err := filepath.Abs(f)
		if err != nil {
			return usageErrorf("--mcp-config: %v", err)
		}
		files = append(files, abs)
	}
	f, servers, err := mcp.Configured(settings.Home, files)
	if err != nil {
		return err
	}
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	confine, err := runner.ServerSandbox(settings.Home, dir, c.String("sandbox"), f)
	if err != nil {
		return usageErrorf("--sandbox: %v", err)
	}
	out := c.App.Writer
	if len(servers) == 0 && !c.Bool("json") {
		fmt.Fprintf(out, "no MCP servers configured: add [mcp_servers.NAME] to %s, or name a .mcp.json with --mcp-config\n",
			filepath.Join(settings.Home, "config.toml"))
		return nil
	}
	failedRequired := 0
	for _, l := range mcp.List(c.Context, servers, mcp.Options{Dir: dir, Version: "agent/" + version, Confine: confine}) {
		s := serverListing{Server: l.Server.Name, Source: l.Server.Source, Transport: "stdio", Required: l.Server.Required,
			OK: l.Err == nil, Tools: l.Tools}
		if l.Server.HTTP() {
			s.Transport = "http"
		}
		if l.Err != nil {
			s.Error = l.Err.Error()
			if l.Server.Required {
				failedRequired++
			}
		}
		if s.Tools == nil {
			s.Tools = []mcp.ToolInfo{}
		}
		if c.Bool("json") {
			line, _ := json.Marshal(s)
			fmt.Fprintln(out, string(line))
			continue
		}
		printServer(out, s)
	}
	if failedRequired > 0 {
		return &exitError{code: 5, msg: fmt.Sprintf("%d required MCP server(s) did not start; runs that use them fail at start", failedRequired)}
	}
	return nil
}

func printServer(out io.Writer, s serverListing) {
	kind := "required"
	if !s.Required {
		kind = "optional"
	}
	if !s.OK {
		fmt.Fprintf(out, "%s (%s, %s, %s): did not start: %s\n", s.Server, s.Transport, kind, s.Source, s.Error)
		return
	}
	fmt.Fprintf(out, "%s (%s, %s, %s): %d tools\n", s.Server, s.Transport, kind, s.Source, len(s.Tools))
	for _, t := range s.Tools {
		var notes []string
		if t.ReadOnly {
			notes = append(notes, "read-only")
		}
		if t.Receipt != "" {
			notes = append(notes, "effect, receipt "+t.Receipt)
		}
		note := ""
		if len(notes) > 0 {
			note = " [" + strings.Join(notes, ", ") + "]"
		}
		desc := strings.Join(strings.Fields(t.Description), " ")
		if r := []rune(desc); len(r) > 80 {
			desc = string(r[:77]) + "..."
		}
		fmt.Fprintf(out, "  %s%s  %s\n", t.Name, note, desc)
	}
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
	settings, err := config.Load()
	if err != nil {
		return err
	}
	db, err := openStore(settings)
	if err != nil {
		return err
	}
	defer db.Close()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the agent binary: %w", err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("find the current directory: %w", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = mcpserve.Serve(ctx, mcpserve.Config{
		DB: db, Home: settings.Home, Exe: exe, Cwd: cwd, Version: version,
		Log: slog.New(slog.NewTextHandler(c.App.ErrWriter, nil)),
	})
	var dir *mcpserve.DirError
	if errors.As(err, &dir) {
		return &exitError{code: 5, msg: err.Error()}
	}
	return err
}
