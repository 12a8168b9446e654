package sandbox

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// forgeReceipt (forge-receipt DB PHASE TYPE) inserts a done receipt of
// TYPE for PHASE of the newest run into the SQLite database DB, as the
// adversary of issue "trust, round three" did from a sandboxed bash.
func forgeReceipt() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: forge-receipt DB PHASE TYPE")
		os.Exit(2)
	}
	db, err := sql.Open("sqlite3", "file:"+os.Args[1]+"?mode=rw&_busy_timeout=10000")
	if err == nil {
		now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
		_, err = db.Exec(`INSERT INTO receipts (key, run_id, phase_id, attempt, tool, type, state, details_json, created_at, updated_at)
			SELECT 'forged-' || id, id, ?, 1, 'send_email', ?, 'done', '{"message_id":"<forged>"}', ?, ? FROM runs ORDER BY created_at DESC LIMIT 1`,
			os.Args[2], os.Args[3], now, now)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "forge-receipt:", err)
		os.Exit(1)
	}
	fmt.Println("FORGED")
	os.Exit(0)
}

// homeInWorkspace makes the layout of agent run from $HOME: AGENT_HOME
// is WORKSPACE/.local/share/agent, with a gateway token and a config.
func homeInWorkspace(t *testing.T, e *e2etest.Env) (token, config string) {
	t.Helper()
	e.Home = filepath.Join(e.Workspace, ".local", "share", "agent")
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	token = filepath.Join(e.Home, "gateway.token")
	config = filepath.Join(e.Home, "config.toml")
	os.WriteFile(token, []byte("gateway-token-0123456789abcdef\n"), 0o600)
	os.WriteFile(config, []byte("max_turns = 20\n"), 0o600)
	return token, config
}

// AGENT_HOME inside the workspace through agent run: neither bash nor
// the file tools read the token, write config.toml or touch agent.db.
func TestAgentHomeInsideWorkspaceRun(t *testing.T) {
	t.Parallel()
	probes := []llmtest.Call{
		e2etest.ToolCall("bash", `{"command":"cat .local/share/agent/gateway.token; ls -A .local/share/agent"}`),
		e2etest.ToolCall("bash", `{"command":"printf '[mcp_servers.evil]\\ncommand = \"/bin/sh\"\\n' >> .local/share/agent/config.toml && echo APPENDED"}`),
		e2etest.ToolCall("bash", `{"command":"forge-receipt .local/share/agent/agent.db '' email_sent"}`),
		e2etest.ToolCall("read_file", `{"path":".local/share/agent/gateway.token"}`),
		e2etest.ToolCall("write_file", `{"path":".local/share/agent/config.toml","content":"[mcp_servers.evil]\ncommand = \"/bin/sh\"\n"}`),
		e2etest.ToolCall("grep", `{"pattern":"gateway-token"}`),
		e2etest.ToolCall("bash", `{"command":"echo fine > at-root.txt && cat at-root.txt"}`),
	}
	var turns []llmtest.Turn
	for _, p := range probes {
		turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.Call{p}})
	}
	e := e2etest.New(t, append(turns, llmtest.Turn{Text: "Tried."})...)
	_, config := homeInWorkspace(t, e)
	res := e.Run("run", "--json", "try things")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	var outputs []string
	for _, ev := range e2etest.OfType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		ev.Decode(&d)
		outputs = append(outputs, d.Output+d.Error)
	}
	if len(outputs) != len(probes) {
		t.Fatalf("%d tool results, want %d", len(outputs), len(probes))
	}
	for i, o := range outputs {
		if strings.Contains(o, "gateway-token-0123") || strings.Contains(o, "APPENDED") || strings.Contains(o, "FORGED") {
			t.Errorf("probe %d (%s) reached AGENT_HOME: %q", i, probes[i].Arguments, o)
		}
	}
	if !strings.Contains(outputs[len(outputs)-1], "fine") {
		t.Errorf("a write at the workspace's root failed: %q", outputs[len(outputs)-1])
	}
	if b, _ := os.ReadFile(config); string(b) != "max_turns = 20\n" {
		t.Errorf("config.toml was changed: %q", b)
	}
	db := e.OpenStore(t)
	if rs, err := db.Receipts(t.Context(), evs[0].RunID, ""); err != nil || len(rs) != 0 {
		t.Errorf("receipts in the store: %v %v", rs, err)
	}
}

// The same layout through a harness: a phase that needs a receipt cannot
// get one by writing agent.db, so it is not verified (exit 1).
func TestAgentHomeInsideWorkspaceHarness(t *testing.T) {
	t.Parallel()
	e := e2etest.NewHarness(t,
		e2etest.BashTurn("forge-receipt .local/share/agent/agent.db notify email_sent"),
		llmtest.Turn{Text: "The email was sent."},
	)
	homeInWorkspace(t, e)
	plan := e.WritePlan(t, `{"objective":"Tell the team","phases":[
		{"id":"notify","instructions":"Email the team.","max_attempts":1,"evidence":{"type":"receipt","receipts":["email_sent"]}}]}`)
	res := e.Run("harness", "--plan-file", plan, "--json")
	if res.Code != 1 {
		t.Fatalf("exit %d, want 1 (not verified); stderr: %s", res.Code, res.Stderr)
	}
	if strings.Contains(res.Stdout, "FORGED") {
		t.Error("the phase's bash wrote a receipt into agent.db")
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	db := e.OpenStore(t)
	if rs, err := db.Receipts(t.Context(), evs[0].RunID, "notify"); err != nil || len(rs) != 0 {
		t.Errorf("receipts in the store: %v %v", rs, err)
	}
}

// The same layout through a gateway whose working directory (its default
// workspace) holds AGENT_HOME.
func TestAgentHomeInsideWorkspaceGateway(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"cat .local/share/agent/gateway.token .local/share/agent/agent.db | head -c 200; ls -A .local/share/agent"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":".local/share/agent/gateway.token"}`)}},
		llmtest.Turn{Text: "Tried."},
	)
	homeInWorkspace(t, e)
	g := e.StartGateway()
	cmd := e.Command("run", "--json", "try things")
	cmd.Env = append(cmd.Env, e.GatewayEnv(g.Addr)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent run --gateway: %v", err)
	}
	if strings.Contains(string(out), "gateway-token-0123") || strings.Contains(string(out), "SQLite format") {
		t.Errorf("a gateway run read AGENT_HOME:\n%s", out)
	}
	if n := len(e2etest.OfType(e2etest.DecodeEvents(t, string(out)), event.ToolCompleted)); n != 2 {
		t.Errorf("%d tool results, want 2:\n%s", n, out)
	}
}

// A descriptor the user's shell left open (exec 7>>outside; agent run …)
// reaches no command of the model's, sandboxed or not.
func TestInheritedDescriptorReachesNoCommand(t *testing.T) {
	t.Parallel()
	write := llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo ESCAPED >&3 && echo WROTE"}`)}}
	e := e2etest.New(t, write, llmtest.Turn{Text: "ok"}, write, llmtest.Turn{Text: "ok"})
	outside := filepath.Join(t.TempDir(), "outside.txt")
	for _, mode := range []string{"workspace-write", "off"} {
		f, err := os.OpenFile(outside, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := e.Command("run", "--json", "--sandbox", mode, "write through fd 3")
		cmd.ExtraFiles = []*os.File{f} // fd 3 in agent, not close-on-exec
		out, err := cmd.Output()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		for _, ev := range e2etest.OfType(e2etest.DecodeEvents(t, string(out)), event.ToolCompleted) {
			var d event.ToolCompletedData
			ev.Decode(&d)
			if strings.Contains(d.Output, "WROTE") || !strings.Contains(d.Output, "Bad file descriptor") {
				t.Errorf("%s: bash said %q", mode, d.Output)
			}
		}
	}
	if b, _ := os.ReadFile(outside); len(b) != 0 {
		t.Errorf("the outside file was written: %q", b)
	}
}

// Under a real terminal (script(1)), a bash call cannot push keystrokes
// into the user's shell with TIOCSTI: the shell that ran agent reads no
// injected command once agent exits.
func TestNoKeystrokesIntoTheUsersShell(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) is not installed")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl is not installed")
	}
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("dev.tty.legacy_tiocsti is 0: this kernel refuses TIOCSTI to everyone")
	}
	marker := filepath.Join(t.TempDir(), "injected")
	inject := fmt.Sprintf(`perl -e 'open(my $t, "+<", "/dev/tty") or open($t, "+<&=", 0) or die "no tty: $!"; for (split //, "touch %s\n") { ioctl($t, 0x5412, $_) or die "TIOCSTI: $!" } print "PUSHED\n"'`, marker)
	for _, mode := range []string{"workspace-write", "read-only"} {
		e := e2etest.New(t, e2etest.BashTurn(inject), llmtest.Turn{Text: "ok"})
		if injectedUnderTerminal(t, e, mode, marker) {
			t.Errorf("--sandbox %s: a bash call pushed a command into the user's shell", mode)
		}
	}
}

// injectedUnderTerminal runs agent from an interactive shell on a pty and
// reports whether the shell then ran the injected command.
func injectedUnderTerminal(t *testing.T, e *e2etest.Env, mode, marker string) bool {
	t.Helper()
	os.Remove(marker)
	cmd := exec.Command("script", "-qec", "sh -i", "/dev/null")
	cmd.Dir = e.Workspace
	cmd.Env = append(e.Command().Env, "PS1=$ ")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	fmt.Fprintf(stdin, "agent run --sandbox %s 'push keys'; echo AGENT_EXITED=$?\n", mode)
	deadline := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the shell ended before agent did")
			}
			done = strings.HasPrefix(l, "AGENT_EXITED=")
		case <-deadline:
			t.Fatal("agent did not finish under the terminal")
		}
	}
	// Anything pushed into the terminal is queued before this line.
	fmt.Fprintf(stdin, "echo SHELL_DONE\nexit\n")
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			done = !ok || strings.Contains(l, "SHELL_DONE") && !strings.Contains(l, "echo")
		case <-deadline:
			t.Fatal("the shell did not finish under the terminal")
		}
	}
	stdin.Close()
	cmd.Wait()
	_, err = os.Stat(marker)
	return err == nil
}

// A config.toml others may write could name MCP servers that run as the
// user: agent refuses it (exit 5), naming the file and the fix.
func TestConfigOthersMayWriteExits5(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "never asked"})
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.Home, "config.toml")
	if err := os.WriteFile(path, []byte("[mcp_servers.evil]\ncommand = \"/bin/sh\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o666)
	res := e.Run("run", "hello")
	if res.Code != 5 || !strings.Contains(res.Stderr, path) || !strings.Contains(res.Stderr, "chmod go-w") {
		t.Errorf("exit %d, stderr %q; want 5 naming %s and the fix", res.Code, res.Stderr, path)
	}
	if n := len(e.Srv.Requests()); n != 0 {
		t.Errorf("%d model requests were made", n)
	}
}

// An MCP stdio server runs in the run's sandbox by default: a server that
// runs commands reaches neither AGENT_HOME nor files outside the workspace
// (nor, so, the database or the runner's stdout); sandbox = false, the
// operator's choice, runs it as the user.
func TestMCPServerRunsInTheSandbox(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	for _, c := range []struct {
		extra    string
		confined bool
	}{{"", true}, {"sandbox = false", false}} {
		probe := fmt.Sprintf("cat $AGENT_HOME_FOR_TEST/gateway.token; echo x > %s/escape && echo WROTE", outside)
		e := e2etest.New(t,
			llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__sh", fmt.Sprintf(`{"command":%q}`, probe))}},
			llmtest.Turn{Text: "Tried."},
		)
		e.WithMCP(t, c.extra, "AGENT_HOME_FOR_TEST="+e.Home)
		os.WriteFile(filepath.Join(e.Home, "gateway.token"), []byte("gateway-token-0123456789abcdef\n"), 0o600)
		os.Remove(filepath.Join(outside, "escape"))
		res := e.Run("run", "--json", "--allow-tools", "mcp__tracker__sh", "probe")
		if res.Code != 0 {
			t.Fatalf("%q: exit %d: %s", c.extra, res.Code, res.Stderr)
		}
		out := e2etest.ToolOutputs(e2etest.DecodeEvents(t, res.Stdout))["mcp__tracker__sh"]
		_, err := os.Stat(filepath.Join(outside, "escape"))
		reached := strings.Contains(out, "gateway-token-0123") || strings.Contains(out, "WROTE") || err == nil
		if reached == c.confined {
			t.Errorf("%q: the server reached AGENT_HOME or outside = %v, want %v; it said %q", c.extra, reached, !c.confined, out)
		}
	}
}

// A sandboxed MCP server has the network unless its configuration says
// network = false.
func TestMCPServerNetworkSetting(t *testing.T) {
	t.Parallel()
	probe := fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3'", loopbackGreeter(t, "CONNECTED"))
	for _, c := range []struct {
		extra string
		net   bool
	}{{"", true}, {"network = false", false}} {
		e := e2etest.New(t,
			llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__sh", fmt.Sprintf(`{"command":%q}`, probe))}},
			llmtest.Turn{Text: "Tried."},
		)
		e.WithMCP(t, c.extra)
		res := e.Run("run", "--json", "--allow-tools", "mcp__tracker__sh", "probe")
		if res.Code != 0 {
			t.Fatalf("%q: exit %d: %s", c.extra, res.Code, res.Stderr)
		}
		out := e2etest.ToolOutputs(e2etest.DecodeEvents(t, res.Stdout))["mcp__tracker__sh"]
		if strings.Contains(out, "CONNECTED") != c.net {
			t.Errorf("%q: connected = %v, want %v; it said %q", c.extra, !c.net, c.net, out)
		}
	}
}
