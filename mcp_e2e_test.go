package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"agent/event"
	"agent/gateway"
	"agent/llm/llmtest"
	"agent/mcp/mcptest"
)

// withMCP configures the real test MCP server (mcptest-server, on PATH
// through testscript.Main) as [mcp_servers.tracker] in the run's
// config.toml, with extra TOML lines in its table and extra env entries.
// It returns the server's call log, kept outside the workspace in a
// directory the server may write in its sandbox (sandbox_writable).
func (e *e2e) withMCP(t *testing.T, extra string, env ...string) string {
	t.Helper()
	logDir := filepath.Join(filepath.Dir(e.workspace), "tracker")
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
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return logPath
}

// referenceFilesystemServer is the path of the reference MCP filesystem
// server from npm, which scripts/deps.sh installs; the test is skipped
// without it.
func referenceFilesystemServer(t *testing.T) string {
	t.Helper()
	server, err := filepath.Abs(".cache/mcp-servers/node_modules/.bin/mcp-server-filesystem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(server); err != nil {
		t.Skip("the reference MCP filesystem server is not installed; scripts/deps.sh installs it with npm")
	}
	return server
}

// serverAlive reports whether a test server logging to logPath still
// runs. Its own pid is of its sandbox's PID namespace, so it is found by
// its environment instead.
func serverAlive(logPath string) bool {
	entries, _ := os.ReadDir("/proc")
	want := []byte(mcptest.EnvLog + "=" + logPath + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, want) {
			return true
		}
	}
	return false
}

const issueEffect = `
[mcp_servers.tracker.effects.create_issue]
receipt = "issue_created"
key_args = ["repo", "title"]`

func mcpCalls(t *testing.T, logPath, tool string) []mcptest.Call {
	t.Helper()
	all, err := mcptest.Calls(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []mcptest.Call
	for _, c := range all {
		if c.Tool == tool {
			out = append(out, c)
		}
	}
	return out
}

func issueTurn(title string) llmtest.Turn {
	return llmtest.Turn{ToolCalls: []llmtest.Call{call("mcp__tracker__create_issue", fmt.Sprintf(`{"repo":"acme/app","title":%q}`, title))}}
}

func toolOutputs(evs []event.Event) map[string]string {
	out := map[string]string{}
	for _, ev := range ofType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		out[d.Name] = d.Output
	}
	return out
}

// A run offers the server's tools with their schemas, calls them, records
// an effect's receipt, and stops the server when it ends.
func TestMCPRunUsesServerTools(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("mcp__tracker__echo", `{"text":"hi"}`)}},
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "Filed it."},
	)
	logPath := e.withMCP(t, issueEffect)
	res := e.run("run", "--json", "file an issue")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	var started event.RunStartedData
	evs[0].Decode(&started)
	if strings.Join(started.MCPServers, ",") != "tracker" {
		t.Errorf("run.started names MCP servers %v, want tracker", started.MCPServers)
	}
	out := toolOutputs(evs)
	if out["mcp__tracker__echo"] != "echo: hi" || !strings.Contains(out["mcp__tracker__create_issue"], "created issue #2 in acme/app") {
		t.Errorf("tool outputs = %v", out)
	}
	receipts := ofType(evs, event.ReceiptRecorded)
	if len(receipts) != 1 {
		t.Fatalf("%d receipts, want 1", len(receipts))
	}
	var rd event.ReceiptData
	_ = receipts[0].Decode(&rd)
	if rd.Type != "issue_created" {
		t.Errorf("receipt = %+v", rd)
	}
	first := string(e.srv.Requests()[0].Body)
	if !strings.Contains(first, `"name":"mcp__tracker__echo"`) || !strings.Contains(first, `"text":{"type":"string"}`) {
		t.Errorf("the first request does not offer the server's tool with its schema:\n%.600s", first)
	}
	calls := mcpCalls(t, logPath, "create_issue")
	if len(calls) != 1 || calls[0].Key != rd.Key {
		t.Fatalf("server calls = %+v, want one create_issue with the key %s", calls, rd.Key)
	}
	if serverAlive(logPath) {
		t.Errorf("the server (pid %d) outlived the run", calls[0].PID)
	}
	show := e.run("runs", "show", decodeRunID(t, res.stdout))
	if !strings.Contains(show.stdout, "issue_created") {
		t.Errorf("runs show does not list the receipt:\n%s", show.stdout)
	}
}

// A required server that cannot start fails the run before the first
// model request, exit 5, naming the server and its stderr; the harness
// too. An optional one is a warning and the run goes on without it.
func TestMCPServerThatDoesNotStart(t *testing.T) {
	t.Parallel()
	e := newE2E(t, llmtest.Turn{Text: "done"})
	e.withMCP(t, "", mcptest.EnvMode+"=fail")
	for _, args := range [][]string{{"run", "hello"}, {"harness", "--yes", "do it"}} {
		res := e.run(args...)
		if res.code != 5 || !strings.Contains(res.stderr, `MCP server "tracker" did not start`) ||
			!strings.Contains(res.stderr, "token rejected") {
			t.Errorf("agent %s: exit %d, stderr %q; want exit 5 naming the server and its stderr", args[0], res.code, res.stderr)
		}
	}
	if n := e.srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests were made", n)
	}

	e.withMCP(t, "required = false", mcptest.EnvMode+"=fail")
	res := e.run("run", "--json", "hello")
	if res.code != 0 {
		t.Fatalf("optional server: exit %d: %s", res.code, res.stderr)
	}
	var warned bool
	for _, ev := range ofType(decodeEvents(t, res.stdout), event.Warning) {
		var w event.WarningData
		_ = ev.Decode(&w)
		warned = warned || strings.Contains(w.Message, `MCP server "tracker" did not start and its tools are not offered`)
	}
	if !warned {
		t.Error("no warning for the optional server")
	}
}

// --allow-tools and --deny-tools take mcp__SERVER and mcp__SERVER__TOOL;
// naming a server that is not configured is an error naming it.
func TestMCPAllowAndDenyTools(t *testing.T) {
	t.Parallel()
	e := newE2E(t, llmtest.Turn{Text: "ok"}, llmtest.Turn{Text: "ok"})
	e.withMCP(t, "")
	res := e.run("run", "--json", "--allow-tools", "mcp__tracker", "--deny-tools", "mcp__tracker__crash", "hi")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	offered := string(e.srv.Requests()[0].Body)
	if !strings.Contains(offered, "mcp__tracker__echo") || strings.Contains(offered, "mcp__tracker__crash") ||
		strings.Contains(offered, `"name":"bash"`) {
		t.Errorf("--allow-tools mcp__tracker --deny-tools mcp__tracker__crash offered:\n%.800s", offered)
	}
	res = e.run("run", "--allow-tools", "read_file,mcp__tracker__echo", "hi")
	offered = string(e.srv.Requests()[1].Body)
	if res.code != 0 || !strings.Contains(offered, "mcp__tracker__echo") || strings.Contains(offered, "mcp__tracker__add") {
		t.Errorf("--allow-tools read_file,mcp__tracker__echo: exit %d, offered:\n%.800s", res.code, offered)
	}
	res = e.run("run", "--allow-tools", "mcp__github", "hi")
	if res.code != 2 || !strings.Contains(res.stderr, `--allow-tools: "mcp__github" names MCP server "github", which is not configured`) {
		t.Errorf("unknown server: exit %d, %q", res.code, res.stderr)
	}
}

// After a kill -9 mid-call, resume runs an interrupted call again only if
// the server marks the tool readOnlyHint.
func TestMCPResumeRerunsOnlyReadOnlyCalls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tool     string
		readOnly bool
	}{{"wait", true}, {"slow", false}} {
		t.Run(c.tool, func(t *testing.T) {
			t.Parallel()
			e := newE2E(t,
				llmtest.Turn{ToolCalls: []llmtest.Call{call("mcp__tracker__"+c.tool, `{"ms":1500}`)}},
				llmtest.Turn{Text: "Done."},
			)
			logPath := e.withMCP(t, "")
			b := e.start("run", "--json", "look it up")
			runID := b.waitEvent(t, event.ToolStarted).RunID
			waitFor(t, "the server to get the call", func() bool { return len(mcpCalls(t, logPath, c.tool)) == 1 })
			b.kill9(t)
			waitFor(t, "the orphaned server to exit", func() bool { return !serverAlive(logPath) })

			res := e.run("resume", runID, "--json")
			if res.code != 0 {
				t.Fatalf("resume: exit %d: %s", res.code, res.stderr)
			}
			calls := mcpCalls(t, logPath, c.tool)
			out := toolOutputs(decodeEvents(t, res.stdout))["mcp__tracker__"+c.tool]
			switch {
			case c.readOnly && (len(calls) != 2 || out != "looked it up"):
				t.Errorf("read-only call: %d calls, output %q; want it run again", len(calls), out)
			case !c.readOnly && (len(calls) != 1 || !strings.Contains(out, "interrupted")):
				t.Errorf("call with effects: %d calls, output %q; want it not run again and the model told", len(calls), out)
			}
		})
	}
}

// The effect tests of send_email, with an MCP tool: kill -9 of the child
// after the server acted and before the child could report it; the
// effect happened once, is never repeated, and the outcome is unknown.
func TestMCPEffectChildKilledAfterCall(t *testing.T) {
	t.Parallel()
	e := newHarness(t,
		issueTurn("Crash on start"), // attempt 1: the child dies in this call
		issueTurn("Crash on start"), // attempt 2: asks again
		llmtest.Turn{Text: "I could not confirm the issue."},
	)
	logPath := e.withMCP(t, issueEffect, mcptest.EnvEffectDelay+"=3000")
	plan := e.writePlan(t, `{"objective":"File it","phases":[
		{"id":"file","instructions":"File the crash in acme/app.","max_attempts":2,
		 "evidence":{"type":"receipt","receipts":["issue_created"]}}]}`)
	b := e.start("harness", "--json", "--plan-file", plan)
	waitFor(t, "the server to act", func() bool { return len(mcpCalls(t, logPath, "create_issue")) == 1 })
	if err := syscall.Kill(findRunnerChild(b.cmd.Process.Pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.done
	_ = b.cmd.Wait()
	if code := b.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("harness exit %d, want 1; stderr %s", code, b.stderr.String())
	}
	if n := len(mcpCalls(t, logPath, "create_issue")); n != 1 {
		t.Fatalf("the server acted %d times, want exactly once", n)
	}
	b.mu.Lock()
	evs := b.events
	b.mu.Unlock()
	failed := ofType(evs, event.PhaseFailed)
	if len(failed) != 2 {
		t.Fatalf("%d phase.failed, want 2", len(failed))
	}
	var last event.PhaseData
	_ = failed[1].Decode(&last)
	if !strings.Contains(last.Reason, "unknown outcome") || !strings.Contains(last.Reason, "--resend-unknown") {
		t.Errorf("attempt 2's reason does not explain the unknown outcome: %s", last.Reason)
	}
	show := e.run("runs", "show", evs[0].RunID)
	if !strings.Contains(show.stdout, "receipt issue_created unknown") {
		t.Errorf("runs show does not report the unknown outcome:\n%s", show.stdout)
	}
}

// kill -9 of the parent right after it recorded the receipt: resume
// restarts the phase, the model asks again, nothing is done again, and the
// receipt proves the phase.
func TestMCPEffectParentKilledAfterReceipt(t *testing.T) {
	t.Parallel()
	e := newHarness(t,
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "Filed.", DelayMS: 5000}, // the parent dies while this is pending
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "It was already filed."},
	)
	logPath := e.withMCP(t, issueEffect)
	plan := e.writePlan(t, `{"objective":"File it","phases":[
		{"id":"file","instructions":"File the crash in acme/app.",
		 "evidence":{"type":"receipt","receipts":["issue_created"]}}]}`)
	b := e.start("harness", "--json", "--plan-file", plan)
	runID := b.waitEvent(t, event.RunStarted).RunID
	b.waitEvent(t, event.ReceiptRecorded)
	b.kill9(t)

	res := e.run("resume", runID, "--json")
	evs := decodeEvents(t, res.stdout)
	if fin := lastFinished(t, evs); fin.Status != "completed" {
		t.Errorf("final = %+v; stderr %s", fin, res.stderr)
	}
	if n := len(mcpCalls(t, logPath, "create_issue")); n != 1 {
		t.Errorf("the server acted %d times, want exactly once", n)
	}
	if out := toolOutputs(evs)["mcp__tracker__create_issue"]; !strings.Contains(out, "already sent earlier in this phase") {
		t.Errorf("the repeated call says %q", out)
	}
}

// The fast path: kill -9 of agent run while the server acts. Resume
// --resend-unknown, the user's choice after checking, calls the tool once
// more from the recorded arguments under the same key; when the model asks
// again, nothing more happens.
func TestMCPEffectFastPathKilledThenResendUnknown(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		issueTurn("Crash on start"), // the process dies in this call
		issueTurn("Crash on start"), // after the resend: already done
		llmtest.Turn{Text: "It is filed."},
	)
	logPath := e.withMCP(t, issueEffect, mcptest.EnvEffectDelay+"=3000")
	b := e.start("run", "--json", "file it")
	runID := b.waitEvent(t, event.ToolStarted).RunID
	waitFor(t, "the server to act", func() bool { return len(mcpCalls(t, logPath, "create_issue")) == 1 })
	b.kill9(t)

	show := e.run("runs", "show", runID)
	if !strings.Contains(show.stdout, "create_issue") {
		t.Errorf("runs show does not mention the interrupted call:\n%s", show.stdout)
	}
	res := e.run("resume", runID, "--json", "--resend-unknown")
	calls := mcpCalls(t, logPath, "create_issue")
	if len(calls) != 2 || calls[0].Key != calls[1].Key {
		t.Fatalf("--resend-unknown: %d calls %+v, want a second one under the same key\n%s\n%s", len(calls), calls, res.stdout, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	if n := len(ofType(evs, event.ReceiptRecorded)); n != 1 {
		t.Errorf("--resend-unknown recorded %d receipts, want 1; stderr %s", n, res.stderr)
	}
	if out := toolOutputs(evs)["mcp__tracker__create_issue"]; !strings.Contains(out, "already sent earlier") {
		t.Errorf("the model's repeated call says %q", out)
	}
	if fin := lastFinished(t, evs); fin.Status != "completed" {
		t.Errorf("final = %+v", fin)
	}
}

// A server that dies mid-run: the call in flight is an error result, and
// the server is restarted for the next call.
func TestMCPServerDiesMidRun(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("mcp__tracker__crash", `{}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{call("mcp__tracker__echo", `{"text":"back"}`)}},
		llmtest.Turn{Text: "Recovered."},
	)
	e.withMCP(t, "", mcptest.EnvCrashOnce+"="+filepath.Join(filepath.Dir(e.workspace), "crashed"))
	res := e.run("run", "--json", "go")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	out := toolOutputs(decodeEvents(t, res.stdout))
	if !strings.Contains(out["mcp__tracker__crash"], "died during the call") || out["mcp__tracker__echo"] != "echo: back" {
		t.Errorf("outputs = %v", out)
	}
}

// agent mcp list starts each server and lists its tools.
func TestMCPList(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	e.withMCP(t, issueEffect)
	res := e.run("mcp", "list")
	if res.code != 0 || !strings.Contains(res.stdout, "tracker (stdio, required,") ||
		!strings.Contains(res.stdout, "mcp__tracker__create_issue [effect, receipt issue_created]") ||
		!strings.Contains(res.stdout, "mcp__tracker__echo [read-only]") {
		t.Errorf("mcp list: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = e.run("mcp", "list", "--json")
	var l serverListing
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &l); err != nil || !l.OK || len(l.Tools) < 5 {
		t.Errorf("mcp list --json: %v %+v", err, l)
	}
	e.withMCP(t, "", mcptest.EnvMode+"=fail")
	res = e.run("mcp", "list")
	if res.code != 5 || !strings.Contains(res.stdout, "did not start") || !strings.Contains(res.stdout, "token rejected") {
		t.Errorf("failing server: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// A gateway run starts the servers in its runner child; an effect's
// intent goes to the gateway's outbox like send_email's, and a repeated
// call is not done twice.
func TestMCPGatewayRun(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		issueTurn("Crash on start"),
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "Filed."},
	)
	logPath := e.withMCP(t, issueEffect)
	srv, _ := e.inProcessGateway(nil)
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	run := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{
		SessionID: sid, Input: "file it", Options: gateway.RunOptions{AllowTools: []string{"mcp__tracker__create_issue"}}})
	got := gwWait(t, c, run.RunID)
	if fin := finishedFrame(t, lastFrame(got)); fin.Status != "completed" {
		t.Fatalf("final = %+v", fin)
	}
	calls := mcpCalls(t, logPath, "create_issue")
	if len(calls) != 1 {
		t.Errorf("the server acted %d times, want once", len(calls))
	}
	if !strings.Contains(frameTypes(got), "receipt.recorded") {
		t.Errorf("no receipt in the stream: %s", frameTypes(got))
	}
	if len(calls) > 0 && serverAlive(logPath) {
		t.Errorf("the server outlived the run")
	}
}

// The reference MCP filesystem server from npm (installed by
// scripts/deps.sh): a third-party server, as users run them.
func TestMCPReferenceFilesystemServer(t *testing.T) {
	t.Parallel()
	server := referenceFilesystemServer(t)
	e := newE2E(t)
	note := filepath.Join(e.workspace, "note.txt")
	if err := os.WriteFile(note, []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.srv = llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{call("mcp__fs__read_text_file", fmt.Sprintf(`{"path":%q}`, note))}},
		{ToolCalls: []llmtest.Call{call("mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"42\n"}`, filepath.Join(e.workspace, "answer.txt")))}},
		{ToolCalls: []llmtest.Call{call("mcp__fs__read_text_file", `{"path":"/etc/passwd"}`)}},
		{Text: "The answer is 42."},
	}})
	cfg := fmt.Sprintf("[mcp_servers.fs]\ncommand = %q\nargs = [%q]\n", server, e.workspace)
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.run("run", "--json", "--allow-tools", "mcp__fs", "what is the answer?")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var outputs []event.ToolCompletedData
	for _, ev := range ofType(decodeEvents(t, res.stdout), event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		outputs = append(outputs, d)
	}
	if len(outputs) != 3 || !strings.Contains(outputs[0].Output, "the answer is 42") || !outputs[1].OK ||
		outputs[2].OK || !strings.Contains(outputs[2].Error+outputs[2].Output, "denied") {
		t.Errorf("tool results = %+v", outputs)
	}
	if b, err := os.ReadFile(filepath.Join(e.workspace, "answer.txt")); err != nil || string(b) != "42\n" {
		t.Errorf("answer.txt = %q, %v", b, err)
	}
}
