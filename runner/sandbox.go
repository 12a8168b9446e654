package runner

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
// config.Private hidden, agent's secrets and the credentials of the MCP
// servers (as mcp.Configured read them with f) out of env, except the
// names f's sandbox_env_pass lists. A machine that cannot enforce the
// mode gives a *sandbox.UnsupportedError.
func NewSandbox(home, workspace, mode string, network bool, env []string, f config.File, servers []mcp.Server) (*sandbox.Sandbox, error) {
	m, err := sandbox.ParseMode(mode)
	if err != nil {
		return nil, err
	}
	p, err := policy(home, workspace, m, f)
	if err != nil {
		return nil, err
	}
	p.Network, p.Env, p.Secrets = network, env, mcp.SecretNames(servers)
	return sandbox.New(p)
}

// ServerSandbox is how a run's MCP stdio servers are confined
// (mcp.Options.Confine): as the run's commands, but with writes in the
// workspace whatever the run's mode, the network as each server says, and
// the environment its configuration gives it. Nil when the run's sandbox
// is off: its servers run unconfined as its commands do.
func ServerSandbox(home, workspace, mode string, f config.File) (func(network bool) (*sandbox.Sandbox, error), error) {
	m, err := sandbox.ParseMode(mode)
	if err != nil || m == sandbox.Off {
		return nil, err
	}
	p, err := policy(home, workspace, sandbox.WorkspaceWrite, f)
	if err != nil {
		return nil, err
	}
	p.KeepEnv = true
	return func(network bool) (*sandbox.Sandbox, error) {
		q := p
		q.Network = network
		return sandbox.New(q)
	}, nil
}

// policy is what every sandbox of a run shares: the workspace, the paths
// hidden from it, and config.toml's sandbox_writable and sandbox_env_pass.
func policy(home, workspace string, mode sandbox.Mode, f config.File) (sandbox.Policy, error) {
	p := sandbox.Policy{Mode: mode, Workspace: workspace, Hidden: config.Private(home)}
	if home == "" {
		return p, nil
	}
	p.Pass = f.SandboxEnvPass
	for _, dir := range f.SandboxWritable {
		if rest, ok := strings.CutPrefix(dir, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return p, fmt.Errorf("sandbox_writable %s: %w", dir, err)
			}
			dir = filepath.Join(home, rest)
		}
		p.Writable = append(p.Writable, dir)
	}
	return p, nil
}
