package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/mcp"
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
		Description: "Each server is started as a run would start it (its startup_timeout_s applies) and stopped again.\n\n" +
			"Exit codes: 0 every required server started, 5 one did not, 2 the configuration is wrong.\n\n" +
			"Examples:\n" +
			"  agent mcp list\n" +
			"  agent mcp list --mcp-config .mcp.json --json",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per server, one per line"},
			mcpConfigFlag(),
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
	servers, err := mcp.Configured(settings.Home, files)
	if err != nil {
		return err
	}
	out := c.App.Writer
	if len(servers) == 0 && !c.Bool("json") {
		fmt.Fprintf(out, "no MCP servers configured: add [mcp_servers.NAME] to %s, or name a .mcp.json with --mcp-config\n",
			filepath.Join(settings.Home, "config.toml"))
		return nil
	}
	failedRequired := 0
	for _, l := range mcp.List(c.Context, servers, mcp.Options{Dir: ".", Version: "agent/" + version}) {
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
