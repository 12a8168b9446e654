package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// A gateway's runs have the hooks of its own config.toml [hooks], run in
// their `agent runner` children; a client may not name a settings file,
// whose hooks would run unsandboxed on the gateway's host, unless the
// gateway was started with --allow-unsandboxed.
func TestGatewayRunsItsConfigHooks(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("rm -rf src"), llmtest.Turn{Text: "left it alone"})
	if err := os.MkdirAll(filepath.Join(e.Workspace, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := `[[hooks.PreToolUse]]
matcher = "Bash"
hooks = [{ type = "command", command = "if jq -r .tool_input.command | grep -q 'rm -rf'; then echo 'no rm -rf on the build host' >&2; exit 2; fi" }]
`
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := e.StartGateway()
	settings := e.WriteHooks(t, `{"hooks": {}}`, nil)
	refused, _ := e.RunWith(e.GatewayEnv(g.Addr), "run", "--gateway", "ws://"+g.Addr, "--settings", settings, "hi")
	if refused.Code != 2 || !strings.Contains(refused.Stderr, "options.settings is refused") || !strings.Contains(refused.Stderr, "--allow-unsandboxed") {
		t.Errorf("--settings through the gateway: exit %d %q", refused.Code, refused.Stderr)
	}

	res, _ := e.RunWith(e.GatewayEnv(g.Addr), "run", "--gateway", "ws://"+g.Addr, "--json", "clean up")
	if res.Code != 0 {
		t.Fatalf("exit %d; stderr %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "src")); err != nil {
		t.Error("the hook did not stop rm -rf")
	}
	recs := e2etest.HookRecords(t, e2etest.DecodeEvents(t, res.Stdout))
	if len(recs) != 1 || recs[0].Decision != "deny" || recs[0].Reason != "no rm -rf on the build host" {
		t.Errorf("hook.completed = %+v", recs)
	}
	if got := e.Srv.Requests()[1].LastMessage().Content; !strings.Contains(got, "no rm -rf on the build host") {
		t.Errorf("the model was told %q", got)
	}
}
