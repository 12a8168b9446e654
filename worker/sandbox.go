package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"agent/config"
	"agent/mcp"
	"agent/sandbox"
)

// NewSandbox is a run's sandbox for the commands the model runs (bash,
// programmatic evidence), in workspace: AGENT_HOME (home) and the rest of
// config.Private hidden, agent's
// secrets and the credentials of the MCP servers (as mcp.Configured read
// them with f) out of env, except the names f's sandbox_env_pass lists.
// A machine that cannot enforce the mode gives a *sandbox.UnsupportedError.
func NewSandbox(home, workspace, mode string, network bool, env []string, f config.File, servers []mcp.Server) (*sandbox.Sandbox, error) {
	m, err := sandbox.ParseMode(mode)
	if err != nil {
		return nil, err
	}
	p := sandbox.Policy{Mode: m, Network: network, Workspace: workspace, Env: env, Secrets: mcp.SecretNames(servers)}
	p.Hidden = config.Private(home)
	if home != "" {
		p.Pass = f.SandboxEnvPass
		for _, dir := range f.SandboxWritable {
			if rest, ok := strings.CutPrefix(dir, "~/"); ok {
				home, err := os.UserHomeDir()
				if err != nil {
					return nil, fmt.Errorf("sandbox_writable %s: %w", dir, err)
				}
				dir = filepath.Join(home, rest)
			}
			p.Writable = append(p.Writable, dir)
		}
	}
	return sandbox.New(p)
}
