package mcp

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

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/mcp/mcptest"
)

// referenceServer is the path of a reference MCP server from npm
// (mcp-server-NAME), which scripts/deps.sh installs; the test is skipped
// without it.
func referenceServer(t *testing.T, name string) string {
	t.Helper()
	server, err := filepath.Abs(filepath.Join(e2etest.Root(), ".cache/mcp-servers/node_modules/.bin/mcp-server-"+name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(server); err != nil {
		t.Skipf("the reference MCP server %s is not installed; scripts/deps.sh installs it with npm", name)
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
		if err != nil || !e2etest.Alive(pid) {
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
	return llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__create_issue", fmt.Sprintf(`{"repo":"acme/app","title":%q}`, title))}}
}

// A run offers the server's tools with their schemas, calls them, records
// an effect's receipt, and stops the server when it ends.
func TestMCPRunUsesServerTools(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__echo", `{"text":"hi"}`)}},
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "Filed it."},
	)
	logPath := e.WithMCP(t, issueEffect)
	res := e.Run("run", "--json", "file an issue")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	var started event.RunStartedData
	evs[0].Decode(&started)
	if strings.Join(started.MCPServers, ",") != "tracker" {
		t.Errorf("run.started names MCP servers %v, want tracker", started.MCPServers)
	}
	out := e2etest.ToolOutputs(evs)
	if out["mcp__tracker__echo"] != "echo: hi" || !strings.Contains(out["mcp__tracker__create_issue"], "created issue #2 in acme/app") {
		t.Errorf("tool outputs = %v", out)
	}
	receipts := e2etest.OfType(evs, event.ReceiptRecorded)
	if len(receipts) != 1 {
		t.Fatalf("%d receipts, want 1", len(receipts))
	}
	var rd event.ReceiptData
	_ = receipts[0].Decode(&rd)
	if rd.Type != "issue_created" {
		t.Errorf("receipt = %+v", rd)
	}
	first := string(e.Srv.Requests()[0].Body)
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
	show := e.Run("runs", "show", e2etest.DecodeRunID(t, res.Stdout))
	if !strings.Contains(show.Stdout, "issue_created") {
		t.Errorf("runs show does not list the receipt:\n%s", show.Stdout)
	}
}

// A required server that cannot start fails the run before the first
// model request, exit 5, naming the server and its stderr; the harness
// too. An optional one is a warning and the run goes on without it.
func TestMCPServerThatDoesNotStart(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "done"})
	e.WithMCP(t, "", mcptest.EnvMode+"=fail")
	for _, args := range [][]string{{"run", "hello"}, {"harness", "--yes", "do it"}} {
		res := e.Run(args...)
		if res.Code != 5 || !strings.Contains(res.Stderr, `MCP server "tracker" did not start`) ||
			!strings.Contains(res.Stderr, "token rejected") {
			t.Errorf("agent %s: exit %d, stderr %q; want exit 5 naming the server and its stderr", args[0], res.Code, res.Stderr)
		}
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests were made", n)
	}

	e.WithMCP(t, "required = false", mcptest.EnvMode+"=fail")
	res := e.Run("run", "--json", "hello")
	if res.Code != 0 {
		t.Fatalf("optional server: exit %d: %s", res.Code, res.Stderr)
	}
	var warned bool
	for _, ev := range e2etest.OfType(e2etest.DecodeEvents(t, res.Stdout), event.Warning) {
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
	e := e2etest.New(t, llmtest.Turn{Text: "ok"}, llmtest.Turn{Text: "ok"})
	e.WithMCP(t, "")
	res := e.Run("run", "--json", "--allow-tools", "mcp__tracker", "--deny-tools", "mcp__tracker__crash", "hi")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	offered := string(e.Srv.Requests()[0].Body)
	if !strings.Contains(offered, "mcp__tracker__echo") || strings.Contains(offered, "mcp__tracker__crash") ||
		strings.Contains(offered, `"name":"bash"`) {
		t.Errorf("--allow-tools mcp__tracker --deny-tools mcp__tracker__crash offered:\n%.800s", offered)
	}
	res = e.Run("run", "--allow-tools", "read_file,mcp__tracker__echo", "hi")
	offered = string(e.Srv.Requests()[1].Body)
	if res.Code != 0 || !strings.Contains(offered, "mcp__tracker__echo") || strings.Contains(offered, "mcp__tracker__add") {
		t.Errorf("--allow-tools read_file,mcp__tracker__echo: exit %d, offered:\n%.800s", res.Code, offered)
	}
	res = e.Run("run", "--allow-tools", "mcp__github", "hi")
	if res.Code != 2 || !strings.Contains(res.Stderr, `--allow-tools: "mcp__github" names MCP server "github", which is not configured`) {
		t.Errorf("unknown server: exit %d, %q", res.Code, res.Stderr)
	}
}

// A misspelt MCP tool in --allow-tools or --deny-tools is refused as a
// misspelt builtin is, once the server has listed its tools and before
// the first model request: exit 2, one line naming what the server offers.
// The harness finds it before its planner asks the model; through a
// gateway the run ends the same way.
func TestMCPMisspeltToolIsRefused(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "ok"})
	e.WithMCP(t, "")
	const offers = `; MCP server "tracker" offers: mcp__tracker__add, `
	for _, args := range [][]string{
		{"run", "--allow-tools", "read_file,mcp__tracker__nope", "hi"},
		{"run", "--deny-tools", "mcp__tracker__ehco", "hi"},
		{"harness", "--yes", "--allow-tools", "mcp__tracker__nope", "do it"},
	} {
		res := e.Run(args...)
		list := "--allow-tools"
		if args[1] == "--deny-tools" {
			list = "--deny-tools"
		}
		stderr := strings.TrimSpace(res.Stderr)
		if res.Code != 2 || strings.Contains(stderr, "\n") || !strings.Contains(stderr, list+`: unknown tool "mcp__tracker__`) ||
			!strings.Contains(stderr, offers) || !strings.Contains(stderr, "mcp__tracker__echo") {
			t.Errorf("agent %s: exit %d, stderr %q; want exit 2, one line naming the tool and what the server offers", strings.Join(args, " "), res.Code, res.Stderr)
		}
	}
	res := e.Run("run", "--json", "--allow-tools", "mcp__tracker__nope", "hi")
	fin := e2etest.OfType(e2etest.DecodeEvents(t, res.Stdout), event.RunFailed)
	var d event.RunFinishedData
	if len(fin) != 1 || fin[0].Decode(&d) != nil || d.Reason != event.ReasonInvalidOptions || d.ExitCode != 2 || res.Code != 2 {
		t.Errorf("--json: exit %d, run.failed %+v; want reason invalid_options, exit 2", res.Code, d)
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests were made", n)
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
			e := e2etest.New(t,
				llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__"+c.tool, `{"ms":1500}`)}},
				llmtest.Turn{Text: "Done."},
			)
			logPath := e.WithMCP(t, "")
			b := e.Start("run", "--json", "look it up")
			runID := b.WaitEvent(t, event.ToolStarted).RunID
			e2etest.WaitFor(t, "the server to get the call", func() bool { return len(mcpCalls(t, logPath, c.tool)) == 1 })
			b.Kill9(t)
			e2etest.WaitFor(t, "the orphaned server to exit", func() bool { return !serverAlive(logPath) })

			res := e.Run("resume", runID, "--json")
			if res.Code != 0 {
				t.Fatalf("resume: exit %d: %s", res.Code, res.Stderr)
			}
			calls := mcpCalls(t, logPath, c.tool)
			out := e2etest.ToolOutputs(e2etest.DecodeEvents(t, res.Stdout))["mcp__tracker__"+c.tool]
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
	e := e2etest.NewHarness(t,
		issueTurn("Crash on start"), // attempt 1: the child dies in this call
		issueTurn("Crash on start"), // attempt 2: asks again
		llmtest.Turn{Text: "I could not confirm the issue."},
	)
	logPath := e.WithMCP(t, issueEffect, mcptest.EnvEffectDelay+"=3000")
	plan := e.WritePlan(t, `{"objective":"File it","phases":[
		{"id":"file","instructions":"File the crash in acme/app.","max_attempts":2,
		 "evidence":{"type":"receipt","receipts":["issue_created"]}}]}`)
	b := e.Start("harness", "--json", "--plan-file", plan)
	e2etest.WaitFor(t, "the server to act", func() bool { return len(mcpCalls(t, logPath, "create_issue")) == 1 })
	if err := syscall.Kill(e2etest.FindRunnerChild(b.Cmd.Process.Pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.Done
	_ = b.Cmd.Wait()
	if code := b.Cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("harness exit %d, want 1; stderr %s", code, b.Stderr.String())
	}
	if n := len(mcpCalls(t, logPath, "create_issue")); n != 1 {
		t.Fatalf("the server acted %d times, want exactly once", n)
	}
	b.Mu.Lock()
	evs := b.Events
	b.Mu.Unlock()
	failed := e2etest.OfType(evs, event.PhaseFailed)
	if len(failed) != 2 {
		t.Fatalf("%d phase.failed, want 2", len(failed))
	}
	var last event.PhaseData
	_ = failed[1].Decode(&last)
	if !strings.Contains(last.Reason, "unknown outcome") || !strings.Contains(last.Reason, "--resend-unknown") {
		t.Errorf("attempt 2's reason does not explain the unknown outcome: %s", last.Reason)
	}
	show := e.Run("runs", "show", evs[0].RunID)
	if !strings.Contains(show.Stdout, "receipt issue_created unknown") {
		t.Errorf("runs show does not report the unknown outcome:\n%s", show.Stdout)
	}
}

// kill -9 of the parent right after it recorded the receipt: resume
// restarts the phase, the model asks again, nothing is done again, and the
// receipt proves the phase.
func TestMCPEffectParentKilledAfterReceipt(t *testing.T) {
	t.Parallel()
	e := e2etest.NewHarness(t,
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "Filed.", Gate: make(chan struct{})}, // held: the parent dies while this is pending
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "It was already filed."},
	)
	logPath := e.WithMCP(t, issueEffect)
	plan := e.WritePlan(t, `{"objective":"File it","phases":[
		{"id":"file","instructions":"File the crash in acme/app.",
		 "evidence":{"type":"receipt","receipts":["issue_created"]}}]}`)
	b := e.Start("harness", "--json", "--plan-file", plan)
	runID := b.WaitEvent(t, event.RunStarted).RunID
	b.WaitEvent(t, event.ReceiptRecorded)
	b.Kill9(t)

	res := e.Run("resume", runID, "--json")
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" {
		t.Errorf("final = %+v; stderr %s", fin, res.Stderr)
	}
	if n := len(mcpCalls(t, logPath, "create_issue")); n != 1 {
		t.Errorf("the server acted %d times, want exactly once", n)
	}
	if out := e2etest.ToolOutputs(evs)["mcp__tracker__create_issue"]; !strings.Contains(out, "already sent earlier in this phase") {
		t.Errorf("the repeated call says %q", out)
	}
}

// The fast path: kill -9 of agent run while the server acts. Resume
// --resend-unknown, the user's choice after checking, calls the tool once
// more from the recorded arguments under the same key; when the model asks
// again, nothing more happens.
func TestMCPEffectFastPathKilledThenResendUnknown(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		issueTurn("Crash on start"), // the process dies in this call
		issueTurn("Crash on start"), // after the resend: already done
		llmtest.Turn{Text: "It is filed."},
	)
	logPath := e.WithMCP(t, issueEffect, mcptest.EnvEffectDelay+"=3000")
	b := e.Start("run", "--json", "file it")
	runID := b.WaitEvent(t, event.ToolStarted).RunID
	e2etest.WaitFor(t, "the server to act", func() bool { return len(mcpCalls(t, logPath, "create_issue")) == 1 })
	b.Kill9(t)

	show := e.Run("runs", "show", runID)
	if !strings.Contains(show.Stdout, "create_issue") {
		t.Errorf("runs show does not mention the interrupted call:\n%s", show.Stdout)
	}
	res := e.Run("resume", runID, "--json", "--resend-unknown")
	calls := mcpCalls(t, logPath, "create_issue")
	if len(calls) != 2 || calls[0].Key != calls[1].Key {
		t.Fatalf("--resend-unknown: %d calls %+v, want a second one under the same key\n%s\n%s", len(calls), calls, res.Stdout, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if n := len(e2etest.OfType(evs, event.ReceiptRecorded)); n != 1 {
		t.Errorf("--resend-unknown recorded %d receipts, want 1; stderr %s", n, res.Stderr)
	}
	if out := e2etest.ToolOutputs(evs)["mcp__tracker__create_issue"]; !strings.Contains(out, "already sent earlier") {
		t.Errorf("the model's repeated call says %q", out)
	}
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" {
		t.Errorf("final = %+v", fin)
	}
}

// A server that dies mid-run: the call in flight is an error result, and
// the server is restarted for the next call.
func TestMCPServerDiesMidRun(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__crash", `{}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__echo", `{"text":"back"}`)}},
		llmtest.Turn{Text: "Recovered."},
	)
	e.WithMCP(t, "", mcptest.EnvCrashOnce+"="+filepath.Join(filepath.Dir(e.Workspace), "crashed"))
	res := e.Run("run", "--json", "go")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	out := e2etest.ToolOutputs(e2etest.DecodeEvents(t, res.Stdout))
	if !strings.Contains(out["mcp__tracker__crash"], "died during the call") || out["mcp__tracker__echo"] != "echo: back" {
		t.Errorf("outputs = %v", out)
	}
}

// agent mcp list starts each server and lists its tools.
func TestMCPList(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	e.WithMCP(t, issueEffect)
	res := e.Run("mcp", "list")
	if res.Code != 0 || !strings.Contains(res.Stdout, "tracker (stdio, required,") ||
		!strings.Contains(res.Stdout, "mcp__tracker__create_issue [effect, receipt issue_created]") ||
		!strings.Contains(res.Stdout, "mcp__tracker__echo [read-only]") {
		t.Errorf("mcp list: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = e.Run("mcp", "list", "--json")
	var l e2etest.ServerListing
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &l); err != nil || !l.OK || len(l.Tools) < 5 {
		t.Errorf("mcp list --json: %v %+v", err, l)
	}
	e.WithMCP(t, "", mcptest.EnvMode+"=fail")
	res = e.Run("mcp", "list")
	if res.Code != 5 || !strings.Contains(res.Stdout, "did not start") || !strings.Contains(res.Stdout, "token rejected") {
		t.Errorf("failing server: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// A gateway run starts the servers in its runner child; an effect's
// intent goes to the gateway's outbox like send_email's, and a repeated
// call is not done twice.
func TestMCPGatewayRun(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		issueTurn("Crash on start"),
		issueTurn("Crash on start"),
		llmtest.Turn{Text: "Filed."},
	)
	logPath := e.WithMCP(t, issueEffect)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{
		SessionID: sid, Input: "file it", Options: api.RunOptions{AllowTools: []string{"mcp__tracker__create_issue"}}})
	got := e2etest.GwWait(t, c, run.RunID)
	if fin := e2etest.FinishedFrame(t, e2etest.LastFrame(got)); fin.Status != "completed" {
		t.Fatalf("final = %+v", fin)
	}
	calls := mcpCalls(t, logPath, "create_issue")
	if len(calls) != 1 {
		t.Errorf("the server acted %d times, want once", len(calls))
	}
	if !strings.Contains(e2etest.FrameTypes(got), "receipt.recorded") {
		t.Errorf("no receipt in the stream: %s", e2etest.FrameTypes(got))
	}
	if len(calls) > 0 && serverAlive(logPath) {
		t.Errorf("the server outlived the run")
	}
}

// The reference MCP filesystem server from npm (installed by
// scripts/deps.sh): a third-party server, as users run them.
func TestMCPReferenceFilesystemServer(t *testing.T) {
	t.Parallel()
	server := referenceServer(t, "filesystem")
	e := e2etest.New(t)
	note := filepath.Join(e.Workspace, "note.txt")
	if err := os.WriteFile(note, []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__fs__read_text_file", fmt.Sprintf(`{"path":%q}`, note))}},
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"42\n"}`, filepath.Join(e.Workspace, "answer.txt")))}},
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__fs__read_text_file", `{"path":"/etc/passwd"}`)}},
		{Text: "The answer is 42."},
	}})
	cfg := fmt.Sprintf("[mcp_servers.fs]\ncommand = %q\nargs = [%q]\n", server, e.Workspace)
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.Run("run", "--json", "--allow-tools", "mcp__fs", "what is the answer?")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var outputs []event.ToolCompletedData
	for _, ev := range e2etest.OfType(e2etest.DecodeEvents(t, res.Stdout), event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		outputs = append(outputs, d)
	}
	if len(outputs) != 3 || !strings.Contains(outputs[0].Output, "the answer is 42") || !outputs[1].OK ||
		outputs[2].OK || !strings.Contains(outputs[2].Error+outputs[2].Output, "denied") {
		t.Errorf("tool results = %+v", outputs)
	}
	if b, err := os.ReadFile(filepath.Join(e.Workspace, "answer.txt")); err != nil || string(b) != "42\n" {
		t.Errorf("answer.txt = %q, %v", b, err)
	}
}
