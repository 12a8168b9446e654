package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agent/config"
	"agent/event"
	"agent/mcp/mcptest"
	"agent/tools"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

// patience bounds a wait for what a server or the client does: long, as
// a loaded machine may take seconds to start or stop a process, and only
// a failing test waits it out.
const patience = time.Minute

// testServer is the test binary as a stdio MCP server logging to a file
// in dir.
func testServer(t testing.TB, name string, env map[string]string) (Server, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "calls.jsonl")
	e := map[string]string{mcptest.EnvServe: "1", mcptest.EnvLog: logPath}
	for k, v := range env {
		e[k] = v
	}
	s, err := check(name, config.MCPServer{Command: exe, Env: e}, "test config")
	if err != nil {
		t.Fatal(err)
	}
	return s, logPath
}

type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) add(m string) { w.mu.Lock(); w.msgs = append(w.msgs, m); w.mu.Unlock() }
func (w *warnings) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, "\n")
}

func startSet(t testing.TB, servers []Server, outbox tools.Outbox) (*tools.Set, *Servers, *warnings) {
	t.Helper()
	w := &warnings{}
	s, err := Start(context.Background(), servers, Options{Warn: w.add, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.NewSet(ws, tools.Options{MaxOutput: 1000}, s.Tools(tools.EffectScope{RunID: "r1"}, outbox)...)
	if err != nil {
		t.Fatal(err)
	}
	return set, s, w
}

func TestToolsOverStdio(t *testing.T) {
	srv, logPath := testServer(t, "tracker", nil)
	set, _, _ := startSet(t, []Server{srv}, nil)

	names := strings.Join(set.Names(), " ")
	for _, want := range []string{"mcp__tracker__echo", "mcp__tracker__add", "mcp__tracker__create_issue"} {
		if !strings.Contains(names, want) {
			t.Errorf("tools offered: %s; want %s among them", names, want)
		}
	}
	if !set.ReadOnly("mcp__tracker__echo") || set.ReadOnly("mcp__tracker__slow") {
		t.Error("readOnlyHint is not what ReadOnly reports")
	}
	cases := []struct {
		tool, args, want string
		isError          bool
	}{
		{"mcp__tracker__echo", `{"text":"hi"}`, "echo: hi", false},
		{"mcp__tracker__add", `{"a":2,"b":3}`, `{"sum":5}`, false},
		{"mcp__tracker__picture", `{}`, "here it is\n[image image/png, 18 bytes, not shown]", false},
		{"mcp__tracker__fail", `{}`, "the tracker is read-only today", true},
		{"mcp__tracker__echo", `{}`, `invalid arguments for mcp__tracker__echo: missing required argument "text"`, true},
	}
	for _, c := range cases {
		res := set.Run(context.Background(), c.tool, c.args)
		if res.Output != c.want || res.IsError != c.isError {
			t.Errorf("%s %s = %q (error %v), want %q (error %v)", c.tool, c.args, res.Output, res.IsError, c.want, c.isError)
		}
	}
	res := set.Run(context.Background(), "mcp__tracker__big", `{"n":5000}`)
	if !res.Truncated || len(res.Output) > 1200 {
		t.Errorf("a 5000-byte result is not truncated to the set's budget: %d bytes, truncated %v", len(res.Output), res.Truncated)
	}
	calls, err := mcptest.Calls(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 5 { // the call with a missing argument never reached the server
		t.Errorf("server saw %d calls, want 5: %+v", len(calls), calls)
	}
}

// A tool list's entry for one tool of a started server that does not
// offer it is named with what the server does offer; a whole server's
// entry, a tool it offers and another server's tool are not its to judge.
func TestUnknownNamesWhatTheServerOffers(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	_, s, _ := startSet(t, []Server{srv}, nil)
	for _, ok := range [][2][]string{
		{{"mcp__tracker", "read_file"}, nil},
		{{"mcp__tracker__echo"}, {"mcp__tracker__crash"}},
		{{"mcp__github__nope"}, nil},
	} {
		if u := s.Unknown(ok[0], ok[1]); u != nil {
			t.Errorf("Unknown(%v, %v) = %v, want none", ok[0], ok[1], u)
		}
	}
	u := s.Unknown([]string{"mcp__tracker__echo"}, []string{"mcp__tracker__ehco"})
	if u == nil || u.List != "deny" || !strings.HasPrefix(u.Error(), `--deny-tools: unknown tool "mcp__tracker__ehco"; MCP server "tracker" offers: `) ||
		!strings.Contains(u.Error(), "mcp__tracker__echo, ") {
		t.Errorf("Unknown = %v, want the misspelt deny entry with the server's tools", u)
	}
	if u := (*Servers)(nil).Unknown([]string{"mcp__tracker__nope"}, nil); u != nil {
		t.Errorf("no servers: %v", u)
	}
}

func TestRequiredServerThatFailsNamesItWithItsStderr(t *testing.T) {
	srv, _ := testServer(t, "tracker", map[string]string{mcptest.EnvMode: "fail"})
	_, err := Start(context.Background(), []Server{srv}, Options{})
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *StartError", err)
	}
	for _, want := range []string{`MCP server "tracker" did not start`, "token rejected", "test config", "required = false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestServerThatNeverAnswersInitializeTimesOut(t *testing.T) {
	srv, _ := testServer(t, "tracker", map[string]string{mcptest.EnvMode: "hang"})
	srv.StartupTimeout = 300 * time.Millisecond
	began := time.Now()
	_, err := Start(context.Background(), []Server{srv}, Options{})
	if err == nil || !strings.Contains(err.Error(), "no answer to initialize within 300ms (startup_timeout_s)") {
		t.Fatalf("err = %v, want the startup timeout named", err)
	}
	// The error names the timeout it waited; stopping the server that
	// never answered may take a few seconds more on a loaded machine.
	if d := time.Since(began); d > patience {
		t.Errorf("Start took %s for a 300ms startup timeout", d)
	}
}

func TestOptionalServerThatFailsIsAWarning(t *testing.T) {
	bad, _ := testServer(t, "flaky", map[string]string{mcptest.EnvMode: "fail"})
	bad.Required = false
	good, _ := testServer(t, "tracker", nil)
	set, servers, w := startSet(t, []Server{bad, good}, nil)
	if got := strings.Join(servers.Names(), ","); got != "tracker" {
		t.Errorf("started servers = %s, want tracker only", got)
	}
	if !strings.Contains(w.String(), `MCP server "flaky" did not start and its tools are not offered`) {
		t.Errorf("warnings = %q", w)
	}
	if strings.Contains(strings.Join(set.Names(), " "), "flaky") {
		t.Error("the failed server's tools are offered")
	}
}

func TestServerThatDiesIsRestartedOnce(t *testing.T) {
	once := filepath.Join(t.TempDir(), "crashed")
	srv, _ := testServer(t, "tracker", map[string]string{mcptest.EnvCrashOnce: once})
	set, _, w := startSet(t, []Server{srv}, nil)

	res := set.Run(context.Background(), "mcp__tracker__crash", `{}`)
	if !res.IsError || !strings.Contains(res.Output, `MCP server "tracker" died during the call`) ||
		!strings.Contains(res.Output, "crashing as asked") {
		t.Fatalf("the call in flight = %q, want an error naming the death and the server's stderr", res.Output)
	}
	if res := set.Run(context.Background(), "mcp__tracker__echo", `{"text":"again"}`); res.Output != "echo: again" {
		t.Fatalf("the next call = %q, want it answered by a restarted server", res.Output)
	}
	if !strings.Contains(w.String(), "it was restarted") {
		t.Errorf("no warning of the restart: %q", w)
	}
	// Once restarted, a second death is final.
	_ = os.Remove(once)
	_ = set.Run(context.Background(), "mcp__tracker__crash", `{}`)
	res = set.Run(context.Background(), "mcp__tracker__echo", `{"text":"x"}`)
	if !res.IsError || !strings.Contains(res.Output, "died again after its restart") {
		t.Errorf("after a second death: %q", res.Output)
	}
}

func TestToolTimeout(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	srv.ToolTimeout = 200 * time.Millisecond
	set, _, _ := startSet(t, []Server{srv}, nil)
	began := time.Now()
	res := set.Run(context.Background(), "mcp__tracker__slow", `{"ms":600000}`)
	if !res.IsError || !strings.Contains(res.Output, "did not answer within 200ms (tool_timeout_s)") {
		t.Errorf("slow call = %q", res.Output)
	}
	if d := time.Since(began); d > patience {
		t.Errorf("the call took %s with a 200ms timeout", d)
	}
	if res := set.Run(context.Background(), "mcp__tracker__echo", `{"text":"still here"}`); res.Output != "echo: still here" {
		t.Errorf("after a timeout the server does not answer: %q", res.Output)
	}
}

func TestCloseStopsTheWholeProcessGroup(t *testing.T) {
	exe, _ := os.Executable()
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	srv, err := check("tracker", config.MCPServer{
		Command: "/bin/sh", Args: []string{"-c", `sleep 300 & echo $! > "$PIDFILE"; exec "$EXE"`},
		Env: map[string]string{mcptest.EnvServe: "1", "PIDFILE": pidFile, "EXE": exe},
	}, "test config")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), []Server{srv}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	s.Close()
	deadline := time.Now().Add(patience)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the server's child %d outlived Close", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStreamableHTTPWithBearerToken(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "calls.jsonl")
	hs := httptest.NewServer(mcptest.Handler(logPath, "s3cret-token"))
	defer hs.Close()
	srv, err := check("docs", config.MCPServer{URL: hs.URL, BearerTokenEnv: "DOCS_TOKEN"}, "test config")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DOCS_TOKEN": "s3cret-token"}
	s, err := Start(context.Background(), []Server{srv}, Options{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ws, _ := tools.NewWorkspace(t.TempDir())
	set, err := tools.NewSet(ws, tools.Options{}, s.Tools(tools.EffectScope{}, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	if res := set.Run(context.Background(), "mcp__docs__echo", `{"text":"over http"}`); res.Output != "echo: over http" {
		t.Errorf("echo over HTTP = %q", res.Output)
	}

	env["DOCS_TOKEN"] = "wrong"
	_, err = Start(context.Background(), []Server{srv}, Options{Getenv: func(k string) string { return env[k] }})
	if err == nil {
		t.Error("a wrong token started the server")
	}
	delete(env, "DOCS_TOKEN")
	_, err = Start(context.Background(), []Server{srv}, Options{Getenv: func(k string) string { return env[k] }})
	if err == nil || !strings.Contains(err.Error(), "$DOCS_TOKEN is not set") {
		t.Errorf("unset token: %v", err)
	}
}

// memOutbox is an outbox in memory: intents by key.
type memOutbox struct {
	mu      sync.Mutex
	intents map[string]tools.Intent
}

func (o *memOutbox) Begin(_ context.Context, in tools.Intent) (*event.ReceiptData, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.intents == nil {
		o.intents = map[string]tools.Intent{}
	}
	o.intents[in.Key] = in
	return nil, nil
}

func TestEffectGoesThroughTheOutboxWithItsKey(t *testing.T) {
	srv, logPath := testServer(t, "tracker", nil)
	srv.Effects = map[string]config.MCPEffect{"create_issue": {Receipt: "issue_created", KeyArgs: []string{"repo", "title"}}}
	outbox := &memOutbox{}
	set, _, _ := startSet(t, []Server{srv}, outbox)
	if set.ReadOnly("mcp__tracker__create_issue") {
		t.Error("an effect reports read-only")
	}
	res := set.Run(context.Background(), "mcp__tracker__create_issue", `{"repo":"a/b","title":"Bug","body":"x"}`)
	if res.IsError || !strings.Contains(res.Output, "created issue #1") {
		t.Fatalf("create_issue = %q", res.Output)
	}
	if len(res.Events) != 1 || res.Events[0].Type != event.ReceiptRecorded {
		t.Fatalf("events = %+v, want one receipt", res.Events)
	}
	var rd event.ReceiptData
	_ = json.Unmarshal(res.Events[0].Data, &rd)
	if rd.Type != "issue_created" || !strings.HasPrefix(rd.Key, "mcp__tracker__create_issue-") || !strings.Contains(string(rd.Details), `"number":1`) {
		t.Errorf("receipt = %+v %s", rd, rd.Details)
	}
	if _, ok := outbox.intents[rd.Key]; !ok {
		t.Error("no intent was recorded before the call")
	}
	calls, _ := mcptest.Calls(logPath)
	if len(calls) != 1 || calls[0].Key != rd.Key {
		t.Errorf("the server was not given the idempotency key: %+v", calls)
	}

	// A tool that reports an error did not act: the effect failed, certainly.
	srv.Effects = map[string]config.MCPEffect{"fail": {Receipt: "x", KeyArgs: []string{"any"}}}
	set, _, _ = startSet(t, []Server{srv}, outbox)
	res = set.Run(context.Background(), "mcp__tracker__fail", `{}`)
	if !res.IsError || len(res.Events) != 1 || res.Events[0].Type != event.EffectFailed {
		t.Errorf("an error result of an effect = %q %+v, want effect.failed", res.Output, res.Events)
	}
}

func TestLoadConfigAndMCPJSON(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, ".mcp.json")
	os.WriteFile(file, []byte(`{"mcpServers": {
		"github": {"command": "gh-mcp", "args": ["stdio"], "env": {"TOKEN": "${GH_TOKEN}"}},
		"docs": {"type": "http", "url": "http://127.0.0.1:3001/mcp", "headers": {"X-Key": "$K"}}
	}}`), 0o644)
	servers, err := Load(map[string]config.MCPServer{
		"github": {Command: "old"}, "local": {Command: "x", ToolTimeoutS: 2.5},
	}, "config.toml", []string{file})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range servers {
		got = append(got, s.Name+"="+s.Command+s.URL+"@"+s.Source)
	}
	if want := "docs=http://127.0.0.1:3001/mcp@" + file + " github=gh-mcp@" + file + " local=x@config.toml"; strings.Join(got, " ") != want {
		t.Errorf("servers = %s\nwant      %s", strings.Join(got, " "), want)
	}
	if servers[2].ToolTimeout != 2500*time.Millisecond || servers[2].StartupTimeout != DefaultStartupTimeout || !servers[2].Required {
		t.Errorf("defaults: %+v", servers[2])
	}

	for _, c := range []struct{ json, want string }{
		{`{"mcpServers": {"a b": {"command": "x"}}}`, `MCP server "a b": a server name is letters`},
		{`{"mcpServers": {"a": {}}}`, "set command (a stdio server) or url"},
		{`{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}`, `type "sse" is not supported`},
		{`{"servers": {}}`, `no "mcpServers" object`},
		{`{"mcpServers": {"a__b": {"command": "x"}}}`, "single _"},
		{`{"mcpServers": {"a": {"command": "x", "effects": {"t": {"key_args": []}}}}}`, "effects.t needs receipt"},
	} {
		os.WriteFile(file, []byte(c.json), 0o644)
		if _, err := Load(nil, "", []string{file}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.json, err, c.want)
		}
	}
	// key_args = [] is an effect once per run and phase; left out, it is
	// checked against the tool's arguments when the server starts.
	os.WriteFile(file, []byte(`{"mcpServers": {"a": {"command": "x", "effects": {"t": {"receipt": "r", "key_args": []}, "u": {"receipt": "r"}}}}}`), 0o644)
	if servers, err := Load(nil, "", []string{file}); err != nil {
		t.Errorf("key_args = [] or left out: %v", err)
	} else if e := servers[0].Effects; e["t"].KeyArgs == nil || e["u"].KeyArgs != nil {
		t.Errorf("an empty key_args is not told from a missing one: %#v", e)
	}
	if _, err := Load(nil, "", []string{filepath.Join(dir, "missing.json")}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1"}
	get := func(k string) string { return env[k] }
	for in, want := range map[string]string{"$A": "1", "x${A}y": "x1y", "${B:-def}": "def", "plain": "plain"} {
		if got, err := expand(in, get); err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := expand("${B}", get); err == nil || err.Error() != "$B is not set" {
		t.Errorf("unset: %v", err)
	}
}

func TestNames(t *testing.T) {
	if got := ToolName("gh", "create_issue"); got != "mcp__gh__create_issue" {
		t.Errorf("ToolName = %s", got)
	}
	a, b := ToolName("gh", "issues.create"), ToolName("gh", "issues_create")
	if a == b || strings.ContainsAny(a, ".") {
		t.Errorf("sanitized names collide or keep bad characters: %s %s", a, b)
	}
	if long := ToolName("server", strings.Repeat("t", 100)); len(long) > 64 {
		t.Errorf("a long name is %d characters", len(long))
	}
	for _, c := range []struct {
		entry, tool string
		want        bool
	}{
		{"mcp__gh", "mcp__gh__x", true}, {"mcp__gh__x", "mcp__gh__x", true}, {"mcp__g", "mcp__gh__x", false},
		{"mcp__gh__x", "mcp__gh__xy", false}, {"bash", "bash", true},
	} {
		if got := Matches(c.entry, c.tool); got != c.want {
			t.Errorf("Matches(%s, %s) = %v", c.entry, c.tool, got)
		}
	}
}

// A hostile or careless server cannot flood the model's context, and a
// server that writes a log line where the protocol should be still works
// or fails with a clear error, never a hang.
func TestHostileServers(t *testing.T) {
	srv, _ := testServer(t, "flood", map[string]string{mcptest.EnvMode: "flood"})
	set, _, w := startSet(t, []Server{srv}, nil)
	if n := len(set.Names()); n > 6+maxTools {
		t.Errorf("%d tools offered, want at most %d of the server's", n, maxTools)
	}
	for _, want := range []string{"offers more than 256 tools", `tool "huge_schema" has an input schema over 64 KiB`} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("warnings %q do not say %q", w, want)
		}
	}
	for _, d := range set.Definitions() {
		if len(d.Description) > maxDescription+4 {
			t.Errorf("%s: description of %d bytes offered", d.Name, len(d.Description))
		}
	}

	// It fails at once, long before its (generous) startup timeout.
	srv, _ = testServer(t, "noisy", map[string]string{mcptest.EnvMode: "garbage"})
	srv.StartupTimeout = 2 * patience
	began := time.Now()
	s, err := Start(context.Background(), []Server{srv}, Options{})
	if err == nil {
		s.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "it wrote something that is not MCP to stdout") {
		t.Errorf("a server that writes garbage: %v", err)
	}
	if d := time.Since(began); d > patience {
		t.Errorf("a server that writes garbage took %s", d)
	}
}

// BenchmarkMCPStart is what a run with one stdio server pays before its
// first model request and at its end: start, initialize, tools/list, stop.
func BenchmarkMCPStart(b *testing.B) {
	exe, _ := os.Executable()
	srv, err := check("tracker", config.MCPServer{Command: exe, Env: map[string]string{mcptest.EnvServe: "1"}}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := Start(context.Background(), []Server{srv}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkMCPCall is one tool call to a started stdio server.
func BenchmarkMCPCall(b *testing.B) {
	exe, _ := os.Executable()
	srv, err := check("tracker", config.MCPServer{Command: exe, Env: map[string]string{mcptest.EnvServe: "1"}}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Start(context.Background(), []Server{srv}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ws, _ := tools.NewWorkspace(b.TempDir())
	set, err := tools.NewSet(ws, tools.Options{}, s.Tools(tools.EffectScope{}, nil)...)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if res := set.Run(context.Background(), "mcp__tracker__echo", `{"text":"hi"}`); res.IsError {
			b.Fatal(res.Output)
		}
	}
}

// Binary never reaches the model as text, and a result is read once: a
// 300 kB image from a server that answers as the reference filesystem
// server does (the image in content, then again with its base64 in
// structured content) is one line; a text file comes once, not again as
// its structured copy; base64 in structured content alone is described.
func TestBinaryResultsAreDescribedAndReadOnce(t *testing.T) {
	srv, _ := testServer(t, "fs", nil)
	w := &warnings{}
	s, err := Start(context.Background(), []Server{srv}, Options{Warn: w.add, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.NewSet(ws, tools.Options{}, s.Tools(tools.EffectScope{RunID: "r1"}, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := make([]byte, 300<<10)
	for i := range bin {
		bin[i] = byte(i*7 + i/251)
	}
	for _, name := range []string{"photo.png", "voice.wav", "archive.bin"} {
		if err := os.WriteFile(filepath.Join(dir, name), bin, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "note.txt"), []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	arg := func(name string) string { return fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, name)) }
	for _, c := range []struct{ tool, file, want string }{
		{"read_media_file", "photo.png", "[image image/png, 307200 bytes, not shown]"},
		{"read_media_file", "voice.wav", "[audio audio/wav, 307200 bytes, not shown]"},
		{"read_media_file", "archive.bin", "[resource file://" + filepath.Join(dir, "archive.bin") + " (application/octet-stream), 307200 bytes, not shown]"},
		{"read_text_file", "note.txt", "the answer is 42\n"},
		{"file_json", "archive.bin", `{"data":"[base64 data, 307200 bytes, not shown]","name":"archive.bin","size":307200}`},
	} {
		res := set.Run(context.Background(), "mcp__fs__"+c.tool, arg(c.file))
		if res.Output != c.want || res.IsError {
			t.Errorf("%s %s = %.300q (error %v), want %q", c.tool, c.file, res.Output, res.IsError, c.want)
		}
	}
}

// What counts as encoded binary: long base64 (also wrapped, URL-safe or
// in a data: URL) and bytes that are not text; never prose, code, hex, a
// list of names or a string short enough to be a token.
func TestTextOrBinary(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x00\x01binary\xff\xfe", 90)))
	all := make([]byte, 900)
	for i := range all {
		all[i] = byte(i)
	}
	wrapped := ""
	for i := 0; i < len(b64); i += 76 {
		wrapped += b64[i:min(i+76, len(b64))] + "\r\n"
	}
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog 42 times. ", 30)
	branches := strings.Repeat("feature/ABC-123-fix\nmain\nrelease/v2-rc1\n", 40)
	for _, c := range []struct {
		in, want string
	}{
		{b64, "[base64 data, 900 bytes, not shown]"},
		{wrapped, "[base64 data, 900 bytes, not shown]"},
		{base64.URLEncoding.EncodeToString(all), "[base64 data, 900 bytes, not shown]"},
		{"data:image/png;base64," + b64, "[base64 data URL image/png, 900 bytes, not shown]"},
		{strings.Repeat("\x00\x01\x02abc", 200), "[binary data, 1200 bytes, not shown]"},
		{prose, prose},
		{strings.Repeat("deadbeef0123", 100), strings.Repeat("deadbeef0123", 100)},
		{branches, branches},
		{b64[:1000], b64[:1000]},
		{"func main() {\n\tfmt.Println(\"hi\")\n}\n" + prose, "func main() {\n\tfmt.Println(\"hi\")\n}\n" + prose},
	} {
		if got := textOrBinary(c.in); got != c.want {
			t.Errorf("textOrBinary(%.40q…) = %.80q, want %.80q", c.in, got, c.want)
		}
	}
}

// An effect with key_args = [] is one per run and phase whatever its
// arguments; key_args left out is the same on a tool without arguments,
// and an error naming the fix on a tool with them.
func TestEffectWithoutKeyArgs(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	srv.Effects = map[string]config.MCPEffect{
		"ping":         {Receipt: "paged"},                              // no arguments, key_args left out
		"create_issue": {Receipt: "issue_created", KeyArgs: []string{}}, // key_args = []
	}
	key := func(set *tools.Set, tool, args string) string {
		t.Helper()
		res := set.Run(context.Background(), tool, args)
		if res.IsError || len(res.Events) != 1 || res.Events[0].Type != event.ReceiptRecorded {
			t.Fatalf("%s = %q %+v, want a receipt", tool, res.Output, res.Events)
		}
		var rd event.ReceiptData
		_ = json.Unmarshal(res.Events[0].Data, &rd)
		return rd.Key
	}
	set, s, _ := startSet(t, []Server{srv}, &memOutbox{})
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := tools.NewSet(ws, tools.Options{}, s.Tools(tools.EffectScope{RunID: "r1", PhaseID: "p2"}, &memOutbox{})...)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := key(set, "mcp__tracker__ping", `{}`), key(set, "mcp__tracker__ping", `{}`); a != b || a == key(other, "mcp__tracker__ping", `{}`) {
		t.Errorf("ping: keys %s and %s in one phase, want one key per run and phase", a, b)
	}
	if a, b := key(set, "mcp__tracker__create_issue", `{"repo":"a/b","title":"One"}`),
		key(set, "mcp__tracker__create_issue", `{"repo":"c/d","title":"Two"}`); a != b {
		t.Errorf("key_args = []: keys %s and %s, want the same whatever the arguments", a, b)
	}

	srv.Effects = map[string]config.MCPEffect{"create_issue": {Receipt: "issue_created"}}
	_, err = Start(context.Background(), []Server{srv}, Options{})
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "effects.create_issue needs key_args") ||
		!strings.Contains(err.Error(), "key_args = []") || !strings.Contains(err.Error(), "test config") {
		t.Errorf("key_args left out on a tool with arguments: %v", err)
	}
}
