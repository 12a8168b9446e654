package mcp

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// Trust, round three (issue 24), MCP items: binary results never reach the
// model as text nor twice (9), agent mcp serve answers a line that is not
// JSON-RPC and goes on (10), an effect with key_args = [] (12).

// mediaFile writes a 300 kB file of bytes that are no text into the
// workspace and returns its path and a piece of its base64 from the
// middle, which the model must never see.
func mediaFile(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	b := make([]byte, 300<<10)
	for i := range b {
		b[i] = byte(i*13 + i/509)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(b)
	return path, b64[len(b64)/2 : len(b64)/2+48]
}

// toolMessages are the tool results in the last request to the model.
func toolMessages(t *testing.T, srv *llmtest.Server) []string {
	t.Helper()
	reqs := srv.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the model")
	}
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[len(reqs)-1].Body, &body); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range body.Messages {
		if m.Role == "tool" {
			out = append(out, m.Content)
		}
	}
	return out
}

// checkMediaPrompt checks what the model was sent of a note read as text
// and a 300 kB image: the note once, the image as one line, no base64.
func checkMediaPrompt(t *testing.T, srv *llmtest.Server, secret string, n int) {
	t.Helper()
	msgs := toolMessages(t, srv)
	if len(msgs) != n {
		t.Fatalf("%d tool results reached the model, want %d: %.500q", len(msgs), n, msgs)
	}
	if got := strings.Count(msgs[0], "the answer is 42"); got != 1 {
		t.Errorf("the text file reached the model %d times in its result, want once: %q", got, msgs[0])
	}
	if !strings.Contains(msgs[1], "[image image/png, 307200 bytes, not shown]") || len(msgs[1]) > 200 {
		t.Errorf("the image reached the model as %d bytes: %.300q; want one line naming it", len(msgs[1]), msgs[1])
	}
	body := string(srv.Requests()[len(srv.Requests())-1].Body)
	if strings.Contains(body, secret) {
		t.Errorf("the image's base64 reached the model (%d bytes sent)", len(body))
	}
}

// A server that answers as the reference filesystem server does (the
// test server's read_text_file and read_media_file: content, and the same
// again as structured content, with the base64): the model reads a text
// file once and a 300 kB image as one line; a server's base64 in
// structured content alone is described too.
func TestMCPBinaryResultsDoNotReachTheModel(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	note := filepath.Join(e.Workspace, "note.txt")
	if err := os.WriteFile(note, []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	photo, secret := mediaFile(t, e.Workspace, "photo.png")
	arg := func(path string) string { return fmt.Sprintf(`{"path":%q}`, path) }
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__read_text_file", arg(note))}},
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__read_media_file", arg(photo))}},
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__file_json", arg(photo))}},
		{Text: "A picture; the answer is 42."},
	}})
	e.WithMCP(t, "")
	res := e.Run("run", "--json", "what is in the workspace?")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	checkMediaPrompt(t, e.Srv, secret, 3)
	if msg := toolMessages(t, e.Srv)[2]; !strings.Contains(msg, `"data":"[base64 data, 307200 bytes, not shown]"`) ||
		!strings.Contains(msg, `"name":"photo.png"`) {
		t.Errorf("structured content with base64 reached the model as %.300q", msg)
	}
}

// The same with the reference MCP filesystem server from npm (installed by
// scripts/deps.sh), where the 30 kB of base64 were seen.
func TestMCPReferenceServerMediaFile(t *testing.T) {
	t.Parallel()
	server := referenceServer(t, "filesystem")
	e := e2etest.New(t)
	note := filepath.Join(e.Workspace, "note.txt")
	if err := os.WriteFile(note, []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	photo, secret := mediaFile(t, e.Workspace, "photo.png")
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__fs__read_text_file", fmt.Sprintf(`{"path":%q}`, note))}},
		{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__fs__read_media_file", fmt.Sprintf(`{"path":%q}`, photo))}},
		{Text: "A picture; the answer is 42."},
	}})
	cfg := fmt.Sprintf("[mcp_servers.fs]\ncommand = %q\nargs = [%q]\n", server, e.Workspace)
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.Run("run", "--json", "--allow-tools", "mcp__fs", "what is in the workspace?")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	checkMediaPrompt(t, e.Srv, secret, 2)
}

// rawClient speaks JSON-RPC lines to a process, as a client that is not
// the SDK would, or one with a bug.
type rawClient struct {
	in    io.WriteCloser
	lines chan string
}

func (c *rawClient) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
}

// next is the next line the server writes, within a generous bound.
func (c *rawClient) next(t *testing.T, what string) map[string]any {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatalf("the server closed stdout before answering %s", what)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("answer to %s is not JSON: %q", what, line)
		}
		return m
	case <-time.After(e2etest.Patience):
		t.Fatalf("no answer to %s within %s", what, e2etest.Patience)
	}
	return nil
}

// agent mcp serve answers a line that is not JSON with -32700 Parse error
// (id null) and one that is JSON but no JSON-RPC message with -32600, and
// serves the next request; it ends when the client closes stdin.
func TestMCPServeAnswersMalformedLines(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	cmd := e.Command("mcp", "serve")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	c := &rawClient{in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if m := c.next(t, "initialize"); m["id"] != 1.0 || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	for _, bad := range []struct {
		line string
		code float64
		id   any
	}{
		{`this is not JSON {`, -32700, nil},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list"`, -32700, nil}, // cut short
		{`{"hello":"world"}`, -32600, nil},
		{`{"jsonrpc":"1.0","id":7,"method":"tools/list"}`, -32600, 7.0},
	} {
		c.send(t, bad.line)
		m := c.next(t, bad.line)
		e, _ := m["error"].(map[string]any)
		if m["jsonrpc"] != "2.0" || m["id"] != bad.id || e == nil || e["code"] != bad.code {
			t.Errorf("%s: answered %v, want error %v with id %v", bad.line, m, bad.code, bad.id)
		}
	}

	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	m := c.next(t, "tools/list after the bad lines")
	tools, _ := json.Marshal(m["result"])
	if m["id"] != 3.0 || !strings.Contains(string(tools), `"name":"run"`) {
		t.Fatalf("tools/list after the bad lines: %v; stderr:\n%s", m, stderr.String())
	}

	in.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent mcp serve ended with %v after stdin closed; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(e2etest.Patience):
		t.Fatalf("agent mcp serve did not end within %s of stdin closing", e2etest.Patience)
	}
}

const pingEffect = `
[mcp_servers.tracker.effects.ping]
receipt = "paged"
key_args = []`

// An effect on a tool with no arguments, key_args = []: one per run and
// phase. A retried phase asks again and nothing more happens; the receipt
// of attempt 1 proves the phase.
func TestMCPEffectWithEmptyKeyArgsOncePerPhase(t *testing.T) {
	t.Parallel()
	ping := llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__ping", `{}`)}}
	e := e2etest.NewHarness(t,
		ping,
		llmtest.Turn{Text: "Paged."}, // verification fails: pager.md is missing
		ping,
		e2etest.WriteTurn("pager.md", "# Paged\n"),
		llmtest.Turn{Text: "Written; the page had already gone out."},
	)
	logPath := e.WithMCP(t, pingEffect)
	plan := e.WritePlan(t, `{"objective":"Page on-call","phases":[
		{"id":"page","instructions":"Page the on-call engineer and write pager.md.","max_attempts":2,
		 "evidence":{"type":"hybrid","artifacts":["pager.md"],"receipts":["paged"]}}]}`)
	res := e.Run("harness", "--json", "--plan-file", plan)
	if res.Code != 0 {
		t.Fatalf("harness: exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" {
		t.Fatalf("final = %+v", fin)
	}
	if n := len(mcpCalls(t, logPath, "ping")); n != 1 {
		t.Errorf("the server paged %d times, want once", n)
	}
	if n := len(e2etest.OfType(evs, event.ReceiptRecorded)); n != 1 {
		t.Errorf("%d receipt.recorded events, want 1", n)
	}
	var again event.ToolCompletedData
	for _, ev := range e2etest.OfType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		if d.Name == "mcp__tracker__ping" && ev.Attempt == 2 {
			again = d
		}
	}
	if !strings.Contains(again.Output, "already sent earlier in this phase") {
		t.Errorf("attempt 2's ping = %+v, want: already done in this phase", again)
	}
}

// key_args left out: on a tool with no arguments it is key_args = [] (a
// second call in the run does nothing); on one with arguments the run does
// not start, exit 5, naming the effect, the fix and the file.
func TestMCPEffectKeyArgsLeftOut(t *testing.T) {
	t.Parallel()
	ping := llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__tracker__ping", `{}`)}}
	e := e2etest.New(t, ping, ping, llmtest.Turn{Text: "Paged."})
	logPath := e.WithMCP(t, "[mcp_servers.tracker.effects.ping]\nreceipt = \"paged\"")
	res := e.Run("run", "--json", "page on-call")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	if n := len(mcpCalls(t, logPath, "ping")); n != 1 {
		t.Errorf("the server paged %d times, want once", n)
	}
	if out := e2etest.ToolOutputs(e2etest.DecodeEvents(t, res.Stdout))["mcp__tracker__ping"]; !strings.Contains(out, "already sent earlier") {
		t.Errorf("the second ping says %q", out)
	}

	e = e2etest.New(t, llmtest.Turn{Text: "done"})
	e.WithMCP(t, "[mcp_servers.tracker.effects.create_issue]\nreceipt = \"issue_created\"")
	res = e.Run("run", "file an issue")
	if res.Code != 5 || !strings.Contains(res.Stderr, "effects.create_issue needs key_args") ||
		!strings.Contains(res.Stderr, "key_args = []") || !strings.Contains(res.Stderr, "config.toml") {
		t.Errorf("key_args left out on a tool with arguments: exit %d, stderr %q", res.Code, res.Stderr)
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests were made", n)
	}
}
