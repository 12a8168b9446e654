package mcp

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/supervisor"
)

// What a server asks of agent besides answering calls: its tool list
// changes, progress, elicitation, sampling, tasks and resources
// (README.md#mcp-tool-servers), with the reference server that exercises
// them all and with the repository's own.

// withEverything configures server-everything as [mcp_servers.everything].
func withEverything(t *testing.T, e *e2etest.Env) {
	t.Helper()
	server := referenceServer(t, "everything")
	e.WriteConfig(fmt.Sprintf("[mcp_servers.everything]\ncommand = %q\nargs = [\"stdio\"]\ntool_timeout_s = 30\n", server))
}

func warnings(evs []event.Event) string {
	var out []string
	for _, ev := range e2etest.OfType(evs, event.Warning) {
		var w event.WarningData
		_ = ev.Decode(&w)
		out = append(out, w.Message)
	}
	return strings.Join(out, "\n")
}

func offered(t *testing.T, body []byte) []string {
	t.Helper()
	var req struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Function.Name)
	}
	return names
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// server-everything's features end to end: the tools it registers once
// it knows the client's capabilities are offered (tools/list_changed),
// the task-only tool is not and a warning names it, sampling is not
// advertised so its sampling tool is absent, a long-running operation's
// progress is recorded as tool.progress on its call, at most one a
// second, and the model lists and reads its resources.
func TestMCPEverythingServer(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__everything__trigger-long-running-operation", `{"duration":3,"steps":6}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp_resources", `{"server":"everything"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp_read_resource", `{"server":"everything","uri":"demo://resource/static/document/features.md"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp_read_resource", `{"server":"everything","uri":"demo://resource/dynamic/blob/1"}`)}},
		llmtest.Turn{Text: "done"},
	)
	withEverything(t, e)
	res := e.Run("run", "--json", "--allow-tools", "mcp__everything", "exercise the server")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	first := offered(t, e.Srv.Requests()[0].Body)
	for _, want := range []string{"mcp__everything__echo", "mcp__everything__trigger-elicitation-request", "mcp_resources", "mcp_read_resource"} {
		if !has(first, want) {
			t.Errorf("the first request does not offer %s: %v", want, first)
		}
	}
	for _, absent := range []string{"mcp__everything__simulate-research-query", "mcp__everything__trigger-sampling-request"} {
		if has(first, absent) {
			t.Errorf("the first request offers %s", absent)
		}
	}
	if w := warnings(evs); !strings.Contains(w, `MCP server "everything": tools that need MCP tasks, which agent does not support, are not offered: simulate-research-query`) {
		t.Errorf("no warning names the task-only tool; warnings:\n%s", w)
	}

	var calls []string
	for _, ev := range e2etest.OfType(evs, event.ToolStarted) {
		var d event.ToolStartedData
		_ = ev.Decode(&d)
		calls = append(calls, d.CallID)
	}
	progress := e2etest.OfType(evs, event.ToolProgress)
	if len(progress) < 1 || len(progress) > 4 {
		// Six notifications half a second apart: at most one a second
		// (fewer if a loaded machine delivers them in a burst).
		t.Errorf("%d tool.progress events for 6 notifications over 3 s, want 1 to 4", len(progress))
	}
	for _, ev := range progress {
		var d event.ToolProgressData
		_ = ev.Decode(&d)
		if d.CallID != calls[0] || d.Total != 6 || d.Progress < 1 || d.Name != "mcp__everything__trigger-long-running-operation" {
			t.Errorf("tool.progress %+v, want of call %s out of 6", d, calls[0])
		}
	}
	out := toolOutputsInOrder(evs)
	if len(out) != 4 || !strings.Contains(out[0], "Long running operation completed") ||
		!strings.Contains(out[1], "demo://resource/static/document/features.md") ||
		!strings.Contains(out[2], "Server Features") ||
		!strings.Contains(out[3], "[resource demo://resource/dynamic/blob/1") || !strings.Contains(out[3], "not shown]") {
		t.Errorf("tool outputs:\n%s", strings.Join(out, "\n---\n"))
	}
}

func toolOutputsInOrder(evs []event.Event) []string {
	var out []string
	for _, ev := range e2etest.OfType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		out = append(out, d.Output)
	}
	return out
}

// A server's tools change mid-run: the next request offers the new list,
// a warning says what changed, and a call of the tool that went is told
// so; a server that asks for sampling is refused, saying agent does not
// support it.
func TestMCPToolListChangesMidRun(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__swap_tools", `{}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__echo", `{"text":"hi"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__shout", `{"text":"hi"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__sample", `{}`)}},
		llmtest.Turn{Text: "done"},
	)
	e.WithMCP(t, "")
	res := e.Run("run", "--json", "--allow-tools", "mcp__tracker", "change your tools")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	reqs := e.Srv.Requests()
	before, after := offered(t, reqs[0].Body), offered(t, reqs[1].Body)
	if !has(before, "mcp__tracker__echo") || has(before, "mcp__tracker__shout") {
		t.Errorf("first request offers %v", before)
	}
	if has(after, "mcp__tracker__echo") || !has(after, "mcp__tracker__shout") {
		t.Errorf("the request after the change offers %v", after)
	}
	if w := warnings(evs); !strings.Contains(w, `MCP server "tracker" changed its tools: now also offers shout; no longer offers echo; the next model request offers the new list`) {
		t.Errorf("warnings:\n%s", w)
	}
	out := toolOutputsInOrder(evs)
	if len(out) != 4 || !strings.Contains(out[1], `MCP server "tracker" no longer offers mcp__tracker__echo: its tool list changed during the run`) ||
		out[2] != "SHOUT: HI" || !strings.Contains(out[3], "agent does not support sampling") {
		t.Errorf("tool outputs:\n%s", strings.Join(out, "\n---\n"))
	}
}

func elicitTurns() []llmtest.Turn {
	return []llmtest.Turn{
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__everything__trigger-elicitation-request", `{}`)}},
		{Text: "done"},
	}
}

// An elicitation is a question of the run: a run that asks a person
// (--ask-human) and has no terminal holds the call and waits in-process
// for an answer through another channel (agent answer), checks it
// against the form and gives it to the server.
func TestMCPElicitationAnsweredByAgentAnswer(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, elicitTurns()...)
	withEverything(t, e)
	b := e.Start("run", "--json", "--ask-human", "--allow-tools", "mcp__everything", "sign me up")
	ev := b.WaitEvent(t, event.RunWaiting)
	var w event.RunWaitingData
	_ = ev.Decode(&w)
	if w.Kind != event.WaitQuestion || w.Server != "everything" || w.Tool != "mcp__everything__trigger-elicitation-request" ||
		!strings.Contains(w.Question, "Please provide inputs for the following fields:") ||
		!strings.Contains(w.Question, "name (string, required): String: Your full, legal name") ||
		!strings.Contains(w.Question, "Answer with the value of name, or a JSON object of the fields") {
		t.Errorf("run.waiting: %+v", w)
	}
	waiting := e.Run("waiting")
	if !strings.Contains(waiting.Stdout, "Please provide inputs") {
		t.Errorf("agent waiting does not list the question:\n%s", waiting.Stdout)
	}
	if res := e.Run("answer", ev.RunID, "Ada Lovelace"); res.Code != 0 {
		t.Fatalf("agent answer: exit %d: %s", res.Code, res.Stderr)
	}
	<-b.Done
	if err := b.Cmd.Wait(); err != nil {
		t.Fatalf("the run: %v; stderr: %s", err, b.Stderr.String())
	}
	b.Mu.Lock()
	evs := b.Events
	b.Mu.Unlock()
	out := toolOutputsInOrder(evs)
	if len(out) != 1 || !strings.Contains(out[0], "User provided the requested information") || !strings.Contains(out[0], "- Name: Ada Lovelace") ||
		!strings.Contains(out[0], `"integer": 42`) { // the form's default, applied
		t.Errorf("tool output:\n%s", strings.Join(out, "\n---\n"))
	}
	resolved := e2etest.OfType(evs, event.WaitResolved)
	var r event.WaitResolvedData
	if len(resolved) == 1 {
		_ = resolved[0].Decode(&r)
	}
	if r.Outcome != event.WaitAnswered || r.Via != event.ViaCLI || r.Answer != "Ada Lovelace" {
		t.Errorf("wait.resolved: %+v", r)
	}
}

// A run nobody can answer (no --ask-human, no terminal) declines the
// elicitation at once, and says so.
func TestMCPElicitationDeclinedWhenNobodyCanAnswer(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, elicitTurns()...)
	withEverything(t, e)
	res := e.Run("run", "--json", "--allow-tools", "mcp__everything", "sign me up")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if out := toolOutputsInOrder(evs); len(out) != 1 || !strings.Contains(out[0], "User declined to provide the requested information") {
		t.Errorf("tool output: %v", out)
	}
	if n := len(e2etest.OfType(evs, event.RunWaiting)); n != 0 {
		t.Errorf("%d run.waiting events", n)
	}
	if w := warnings(evs); !strings.Contains(w, `MCP server "everything" asked a question while mcp__everything__trigger-elicitation-request ran; declined: nobody can answer in this run`) {
		t.Errorf("warnings:\n%s", w)
	}
}

// A run killed while an elicitation waits: the question cannot outlive
// the process (the server went with it), so resume settles it as timed
// out, saying why, and the call is reported interrupted; nothing is left
// waiting.
func TestMCPElicitationKilledAndResumed(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, append(elicitTurns()[:1], llmtest.Turn{Text: "it was interrupted"})...)
	withEverything(t, e)
	b := e.Start("run", "--json", "--ask-human", "--allow-tools", "mcp__everything", "sign me up")
	runID := b.WaitEvent(t, event.RunWaiting).RunID
	b.Kill9(t)
	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	resolved := e2etest.OfType(evs, event.WaitResolved)
	var r event.WaitResolvedData
	if len(resolved) == 1 {
		_ = resolved[0].Decode(&r)
	}
	if r.Outcome != event.WaitTimedOut || !strings.Contains(r.Reason, `MCP server "everything" asked it while a call ran in a process that has ended`) {
		t.Errorf("wait.resolved on resume: %+v", r)
	}
	if out := toolOutputsInOrder(evs); len(out) != 1 || !strings.Contains(out[0], "interrupted") {
		t.Errorf("tool output: %v", out)
	}
	if waiting := e.Run("waiting"); !strings.Contains(waiting.Stdout, "no run is waiting") {
		t.Errorf("agent waiting:\n%s", waiting.Stdout)
	}
}

// Through a gateway: the run's call runs in an agent runner child, its
// progress reaches the session's clients as tool.progress, and a question
// its server asks is a wait the clients see; the child holds the call
// while the gateway waits for the answer (wait.answer), which reaches the
// server.
func TestMCPGatewayProgressAndQuestion(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__everything__trigger-long-running-operation", `{"duration":2,"steps":4}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__everything__trigger-elicitation-request", `{}`)}},
		llmtest.Turn{Text: "done"},
	)
	withEverything(t, e)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "sign me up",
		Options: api.RunOptions{AllowTools: []string{"mcp__everything"}}})
	progress := e2etest.GwFrame(t, c, run.RunID, event.ToolProgress, 0)
	var p event.ToolProgressData
	if err := json.Unmarshal(progress.Data, &p); err != nil || p.Total != 4 || p.Name != "mcp__everything__trigger-long-running-operation" {
		t.Errorf("tool.progress: %s", progress.Data)
	}
	waiting, w := e2etest.GwWaiting(t, c, run.RunID, progress.Seq)
	if w.Kind != event.WaitQuestion || w.Server != "everything" || !strings.Contains(w.Question, "Please provide inputs") {
		t.Fatalf("run.waiting: %+v", w)
	}
	info, code := e2etest.GwAnswer(t, c, api.WaitAnswerParams{RunID: run.RunID, WaitID: w.WaitID, Decision: supervisor.DecideAnswer,
		Text: `{"name":"Grace Hopper","check":true}`})
	if code != "" || info.Resolution == nil || info.Resolution.Outcome != event.WaitAnswered {
		t.Fatalf("wait.answer: %s %+v", code, info)
	}
	evs := e2etest.GwWait(t, c, run.RunID)
	if end := e2etest.LastFrame(evs); end.Event != event.RunCompleted {
		t.Fatalf("the run ended %s", end.Event)
	}
	var outputs []string
	for _, f := range e2etest.OfFrames(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = json.Unmarshal(f.Data, &d)
		if f.Seq > waiting.Seq {
			outputs = append(outputs, d.Output)
		}
	}
	if len(outputs) != 1 || !strings.Contains(outputs[0], "- Name: Grace Hopper") || !strings.Contains(outputs[0], "- Agreed to terms: true") {
		t.Errorf("the elicitation's result: %v", outputs)
	}
}

// Approval rules name tools a server offers only after its list changed:
// the new tool's call waits for its approval like any other, and a
// denial reaches the model without the server being called.
func TestMCPApprovalRulesApplyToNewTools(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__swap_tools", `{}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__shout", `{"text":"hi"}`)}},
		llmtest.Turn{Text: "Not shouting, then."},
	)
	logPath := e.WithMCP(t, "")
	res := e.Run("run", "--json", "--allow-tools", "mcp__tracker", "--ask", "mcp__tracker__shout", "shout")
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6 (waiting): %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	var w event.RunWaitingData
	_ = e2etest.OfType(evs, event.RunWaiting)[0].Decode(&w)
	if w.Kind != event.WaitApproval || w.Tool != "mcp__tracker__shout" || w.Rule != "mcp__tracker__shout" {
		t.Fatalf("run.waiting: %+v", w)
	}
	runID := e2etest.DecodeRunID(t, res.Stdout)
	if res := e.Run("deny", runID, "--reason", "no shouting"); res.Code != 0 {
		t.Fatalf("deny: exit %d: %s", res.Code, res.Stderr)
	}
	res = e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d: %s", res.Code, res.Stderr)
	}
	if out := toolOutputsInOrder(e2etest.DecodeEvents(t, res.Stdout)); len(out) != 1 || !strings.Contains(out[0], "denied (cli): no shouting") {
		t.Errorf("tool outputs after the denial: %v", out)
	}
	if calls := mcpCalls(t, logPath, "shout"); len(calls) != 0 {
		t.Errorf("the server was called: %+v", calls)
	}
}

// server-everything over Streamable HTTP: the task-only tool is left out
// with a warning there too, and a question its server asks while a call
// runs reaches the person and the answer the server.
func TestMCPEverythingServerOverHTTP(t *testing.T) {
	t.Parallel()
	server := referenceServer(t, "everything")
	// A port nobody listens on now; the server says when it listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(server, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	var stderr e2etest.Output
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e2etest.WaitFor(t, "server-everything to listen", func() bool { return strings.Contains(stderr.String(), "listening on port") })

	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__everything__trigger-elicitation-request", `{}`)}},
		llmtest.Turn{Text: "done"},
	)
	e.WriteConfig(fmt.Sprintf("[mcp_servers.everything]\nurl = \"http://127.0.0.1:%d/mcp\"\n", port))
	b := e.Start("run", "--json", "--ask-human", "--allow-tools", "mcp__everything", "sign me up")
	ev := b.WaitEvent(t, event.RunWaiting)
	if res := e.Run("answer", ev.RunID, `{"name":"Ada Lovelace"}`); res.Code != 0 {
		t.Fatalf("agent answer: exit %d: %s", res.Code, res.Stderr)
	}
	<-b.Done
	if err := b.Cmd.Wait(); err != nil {
		t.Fatalf("the run: %v; stderr: %s", err, b.Stderr.String())
	}
	b.Mu.Lock()
	evs := b.Events
	b.Mu.Unlock()
	if w := warnings(evs); !strings.Contains(w, `MCP server "everything": tools that need MCP tasks, which agent does not support, are not offered: simulate-research-query`) {
		t.Errorf("warnings:\n%s", w)
	}
	first := offered(t, e.Srv.Requests()[0].Body)
	if has(first, "mcp__everything__simulate-research-query") || !has(first, "mcp__everything__trigger-elicitation-request") {
		t.Errorf("the first request offers %v", first)
	}
	if out := toolOutputsInOrder(evs); len(out) != 1 || !strings.Contains(out[0], "- Name: Ada Lovelace") {
		t.Errorf("tool output: %v", out)
	}
}
