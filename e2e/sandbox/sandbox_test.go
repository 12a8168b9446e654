package sandbox

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
)

// What a prompt-injected model would try from bash, through agent run as
// a user runs it (the default sandbox): each is refused, and the run says
// which sandbox it ran in.
func TestSandboxedRunRefusesWhatItMust(t *testing.T) {
	t.Parallel()
	port := loopbackGreeter(t, "LEAKED")
	outside := t.TempDir()
	probes := []struct{ name, command string }{
		{"write outside", fmt.Sprintf("echo x > %s/escape.txt && echo WROTE", outside)},
		{"token", "cat $AGENT_HOME_FOR_TEST/gateway.token && echo READ"},
		{"db", "head -c 15 $AGENT_HOME_FOR_TEST/agent.db && echo READ"},
		{"tcp", fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; cat <&3'", port)},
		{"env", "env | grep -c sk-secret-123 || true"},
		// $PPID is 0 in the sandbox's PID namespace; agent's own pid, as
		// this machine numbers it, is found through /proc.
		{"parent fd", "s=$(cut -d' ' -f4 /proc/self/stat); p=$(cut -d' ' -f4 /proc/$s/stat); echo INJECTED > /proc/$p/fd/1 && echo WROTE $p"},
		{"workspace", "echo fine > inside.txt && cat inside.txt"},
	}
	var turns []llmtest.Turn
	for _, p := range probes {
		turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", fmt.Sprintf(`{"command":%q}`, p.command))}})
	}
	e := e2etest.New(t, append(turns, llmtest.Turn{Text: "Tried."})...)
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.Home, "gateway.token"), []byte("gateway-token-value\n"), 0o600)
	cmd := e.Command("run", "--json", "try things")
	cmd.Env = append(cmd.Env, "OPENAI_API_KEY=sk-secret-123", "AGENT_HOME_FOR_TEST="+e.Home)
	out, _ := cmd.Output()
	evs := e2etest.DecodeEvents(t, string(out))
	var started event.RunStartedData
	evs[0].Decode(&started)
	if started.Sandbox != "workspace-write" || started.Network {
		t.Errorf("run.started says sandbox %q network %v", started.Sandbox, started.Network)
	}
	var outputs []string
	for _, ev := range e2etest.OfType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		ev.Decode(&d)
		outputs = append(outputs, d.Output+d.Error)
	}
	if len(outputs) != len(probes) {
		t.Fatalf("%d tool results, want %d", len(outputs), len(probes))
	}
	for i, p := range probes {
		o := outputs[i]
		switch p.name {
		case "write outside":
			if strings.Contains(o, "WROTE") || !strings.Contains(o, "the sandbox (workspace-write) may have refused this") {
				t.Errorf("%s: %q", p.name, o)
			}
		case "token", "db":
			if strings.Contains(o, "READ") || strings.Contains(o, "gateway-token-value") || strings.Contains(o, "SQLite") {
				t.Errorf("%s: %q", p.name, o)
			}
		case "tcp":
			if strings.Contains(o, "LEAKED") {
				t.Errorf("%s: the loopback listener was reached: %q", p.name, o)
			}
		case "env":
			if !strings.HasPrefix(strings.TrimSpace(o), "0") {
				t.Errorf("%s: the model's environment holds the API key: %q", p.name, o)
			}
		case "workspace":
			if !strings.Contains(o, "fine") {
				t.Errorf("%s: %q", p.name, o)
			}
		case "parent fd":
			if strings.Contains(o, "WROTE") || strings.Contains(string(out), "\nINJECTED") {
				t.Errorf("%s: agent's stdout was written: %q", p.name, o)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "escape.txt")); err == nil {
		t.Error("a file was written outside the workspace")
	}
	show := e.Run("runs", "show", evs[0].RunID)
	if !strings.Contains(show.Stdout, "sandbox   workspace-write, network off") {
		t.Errorf("runs show does not say the sandbox:\n%s", show.Stdout)
	}
}

// loopbackGreeter listens on the loopback for as long as the test runs,
// says greeting to every connection and closes it; it returns the port.
func loopbackGreeter(t *testing.T, greeting string) int {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	go func() {
		for {
			c, err := listener.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(greeting + "\n"))
			c.Close()
		}
	}()
	return listener.Addr().(*net.TCPAddr).Port
}

// --sandbox off lifts everything (the checks above bite), and --sandbox
// read-only refuses writes in the workspace; the human summary says which.
func TestSandboxModesThroughTheCLI(t *testing.T) {
	t.Parallel()
	write := llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo x > made.txt && echo MADE"}`)}}
	e := e2etest.New(t, write, llmtest.Turn{Text: "ok"}, write, llmtest.Turn{Text: "ok"})
	res := e.Run("run", "--sandbox", "read-only", "write made.txt")
	if res.Code != 0 || !strings.Contains(res.Stderr, "· sandbox read-only ·") {
		t.Errorf("read-only: exit %d, stderr %q", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "made.txt")); err == nil {
		t.Error("read-only let bash write in the workspace")
	}
	res = e.Run("run", "--sandbox", "off", "write made.txt")
	if res.Code != 0 || !strings.Contains(res.Stderr, "· sandbox off ·") {
		t.Errorf("off: exit %d, stderr %q", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "made.txt")); err != nil {
		t.Error("off did not let bash write")
	}
	res = e.Run("run", "--sandbox", "none", "x")
	if res.Code != 2 || !strings.Contains(res.Stderr, `--sandbox: "none" is not a sandbox mode; use workspace-write, read-only or off`) {
		t.Errorf("bad mode: exit %d, stderr %q", res.Code, res.Stderr)
	}
}

// A machine that cannot enforce the sandbox fails the run before the
// first model request, exit 5, naming what is missing and the way out.
func TestSandboxUnsupportedFailsBeforeTheModel(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "never asked"})
	for _, args := range [][]string{{"run", "hi"}, {"harness", "--yes", "hi"}} {
		cmd := e.Command(args...)
		cmd.Env = append(cmd.Env, "AGENT_SANDBOX_SIMULATE_MISSING=Landlock is not available: kernel 5.4")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 5 ||
			!strings.Contains(string(out), "Landlock is not available: kernel 5.4; use --sandbox off to run unsandboxed") {
			t.Errorf("agent %s: exit %d, %s", args[0], code, out)
		}
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests", n)
	}
}

// The gateway refuses sandbox "off" from a client unless it was started
// with --allow-unsandboxed, for runs and for jobs.
func TestGatewayRefusesUnsandboxed(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "ok"})
	srv, _ := e.JobsGateway(false)
	c := e2etest.GwDial(t, srv.Addr())
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	err := c.Call(ctx, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{Sandbox: "off"}}, nil)
	if err == nil || !strings.Contains(err.Error(), `options.sandbox "off" is refused: this gateway was not started with --allow-unsandboxed`) {
		t.Errorf("run.start with sandbox off: %v", err)
	}
	err = c.Call(ctx, api.MethodJobCreate, api.JobCreateParams{Name: "j", CronExpr: "@hourly", Prompt: "x",
		Policy: []byte(`{"sandbox":"off"}`)}, nil)
	if err == nil || !strings.Contains(err.Error(), `policy.sandbox "off" is refused`) {
		t.Errorf("job.create with sandbox off: %v", err)
	}

	open, _ := e.InProcessGateway(func(c *gateway.Config) { c.AllowUnsandboxed = true })
	c2 := e2etest.GwDial(t, open.Addr())
	sid = e2etest.GwCall[api.SessionInfo](t, c2, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c2, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "x", Options: api.RunOptions{Sandbox: "off"}})
	if run.RunID == "" {
		t.Error("--allow-unsandboxed still refused")
	}
}

// The planner model writes programmatic evidence commands: they run in
// the run's sandbox too.
func TestSandboxedEvidenceCommand(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	e := e2etest.NewHarness(t, llmtest.Turn{Text: "Done."})
	plan := e.WritePlan(t, fmt.Sprintf(`{"objective":"Check","phases":[{"id":"check","instructions":"Nothing to do.",
		"max_attempts":1,"evidence":{"type":"programmatic","command":"echo pwned > %s/pwned.txt"}}]}`, outside))
	res := e.Run("harness", "--json", "--plan-file", plan)
	if res.Code != 1 {
		t.Fatalf("exit %d, want 1: the check could not write outside the workspace; %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned.txt")); err == nil {
		t.Error("an evidence command wrote outside the workspace")
	}
	var note string
	for _, ev := range e2etest.OfType(e2etest.DecodeEvents(t, res.Stdout), event.VerificationCompleted) {
		note += string(ev.Data)
	}
	if !strings.Contains(note, "the sandbox (workspace-write) may have refused this") {
		t.Errorf("the failed check does not say the sandbox may be why: %s", note)
	}
}

// A gateway client cannot name MCP servers: they run unsandboxed, and the
// file could be one it wrote itself.
func TestGatewayRefusesClientMCPConfig(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "ok"})
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	err := c.Call(ctx, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "x",
		Options: api.RunOptions{MCPConfig: []string{filepath.Join(e.Workspace, ".mcp.json")}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "options.mcp_config is refused") {
		t.Errorf("run.start with mcp_config: %v", err)
	}
}
