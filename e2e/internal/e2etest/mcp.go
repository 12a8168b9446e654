package e2etest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/mcp/mcptest"
)

// WithMCP configures the real test MCP server (mcptest-server, on PATH
// through Main) as [mcp_servers.tracker] in the run's
// config.toml, with extra TOML lines in its table and extra env entries.
// It returns the server's call log, kept outside the workspace in a
// directory the server may write in its sandbox (sandbox_writable).
func (e *Env) WithMCP(t *testing.T, extra string, env ...string) string {
	t.Helper()
	logDir := filepath.Join(filepath.Dir(e.Workspace), "tracker")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, "calls.jsonl")
	envs := []string{fmt.Sprintf("%s = %q", mcptest.EnvLog, logPath)}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envs = append(envs, fmt.Sprintf("%s = %q", k, v))
	}
	cfg := fmt.Sprintf("sandbox_writable = [%q]\n\n[mcp_servers.tracker]\ncommand = \"mcptest-server\"\nenv = { %s }\n%s\n", logDir, strings.Join(envs, ", "), extra)
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return logPath
}
