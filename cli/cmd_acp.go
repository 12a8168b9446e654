package cli

import (
	"slices"

	"github.com/urfave/cli/v2"

	"agent/acp"
	"agent/config"
	"agent/supervisor"
)

func acpCommand() *cli.Command {
	return &cli.Command{
		Name:        "acp",
		Usage:       "serve the Agent Client Protocol on stdio: an editor (Zed, JetBrains, Neovim) drives durable runs",
		Description: "Each prompt is a durable run of a local session. Zed: \"agent_servers\": {\"agent\": {\"command\": \"agent\", \"args\": [\"acp\"]}}",
		Flags: append(slices.DeleteFunc(modelFlags(), func(f cli.Flag) bool { return f.Names()[0] == "json" }), // stdout is the protocol's
			&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer only these tools, comma separated"},
			&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer these tools, comma separated"},
			mcpConfigFlag(),
			&cli.BoolFlag{Name: "allow-client-mcp", Usage: "run the MCP servers the editor passes (unsandboxed, as config.toml's); refused otherwise"}),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageErrorf("agent acp takes no arguments: an editor starts it and speaks ACP on stdio")
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
			cfg := acp.Config{DB: db, Supervisor: sup, Options: opts, Home: settings.Home, AllowClientMCP: c.Bool("allow-client-mcp"), Version: version}
			return acp.Serve(c.Context, cfg, c.App.Reader, c.App.Writer)
		},
	}
}
