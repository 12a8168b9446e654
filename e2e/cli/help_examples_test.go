package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
	"agent/store/pgtest"
)

// TestHelpExamples runs every example in every command's --help (the
// lines under "Examples:" in each description, walking the command tree
// the help lists) and every line of README.md's shell code blocks, as a user would
// paste them: through sh, in a fresh workspace and AGENT_HOME, against a
// scripted fake model (OPENAI_BASE_URL), with a real `agent gateway` where
// an example needs one. Each must exit 0 (or the code in exampleExit).
//
// Ids in examples (3f2a, 0190c3a2, RUN_ID, ID, SESSION, NEW_ID) stand for
// real ids: each is replaced by the 8-character prefix `runs list` and
// `sessions list` show of a run or session this test created for it.
// Addresses are the test's: 127.0.0.1:7420 becomes the test gateway's, and
// an example that starts `agent gateway` listens on port 0. Examples that
// run until stopped (`agent gateway`, `agent attach`) are started, given
// time to work, then stopped as a user would (SIGTERM, Ctrl-C), and must
// exit 0 then.
func TestHelpExamples(t *testing.T) {
	t.Parallel()
	groups := append(helpExampleGroups(t), readmeExampleGroups(t)...)
	total := 0
	for _, g := range groups {
		total += len(g.examples)
	}
	if total < 40 {
		t.Fatalf("found only %d examples; the extraction is broken", total)
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			env := newExampleEnv(t)
			for _, ex := range g.examples {
				env.run(t, ex)
			}
		})
	}
}

// exampleExit is the documented exit code of an example that does not
// exit 0, by the example as written.
var exampleExit = map[string]int{
	// The test's model answers DONE, which is no JSON: reason schema.
	`agent run --output-schema verdict.schema.json "do the tests pass? check, then give your verdict" > verdict.json`: 1,
}

// exampleSkip are README lines the test does not run, with the reason.
var exampleSkip = map[string]string{
	"scripts/test.sh": "runs this test suite itself",
	"scripts/demo.sh": "builds bin/agent in the repository; the run it shows is TestExampleCassette",
}

type example struct {
	where string // "agent runs --help" or "README.md:123"
	line  string // as written, continuation lines joined
}

type exampleGroup struct {
	name     string
	examples []example
}

// helpExampleGroups collects the examples of every command's help, one
// group per command: the lines under "Examples:" in each command's
// description, as `agent CMD --help` prints it for every command the
// help lists, from `agent --help` down.
func helpExampleGroups(t *testing.T) []exampleGroup {
	t.Helper()
	var groups []exampleGroup
	var walk func(path []string)
	walk = func(path []string) {
		desc, subs := commandHelp(t, path)
		name := strings.Join(append([]string{"agent"}, path...), " ")
		if _, text, ok := strings.Cut(desc, "Examples:\n"); ok {
			// The section ends at the first blank line.
			text, _, _ = strings.Cut(text, "\n\n")
			g := exampleGroup{name: name}
			for _, l := range shellLines(text) {
				g.examples = append(g.examples, example{where: name + " --help", line: l})
			}
			if len(g.examples) == 0 {
				t.Errorf("%s --help has an Examples: section with no example", name)
			}
			groups = append(groups, g)
		}
		for _, sub := range subs {
			walk(append(path[:len(path):len(path)], sub))
		}
	}
	walk(nil)
	return groups
}

// commandHelp runs `agent PATH... --help` and returns the command's
// description (its DESCRIPTION section, unindented) and the names of the
// subcommands it lists (its COMMANDS section, but help).
func commandHelp(t *testing.T, path []string) (desc string, subs []string) {
	t.Helper()
	out, err := exec.Command("agent", append(path, "--help")...).Output()
	if err != nil {
		t.Fatalf("agent %s --help: %v", strings.Join(path, " "), err)
	}
	section := ""
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if line != "" && !strings.HasPrefix(line, " ") {
			section = line // NAME:, USAGE:, DESCRIPTION:, COMMANDS:, OPTIONS:, …
			continue
		}
		switch section {
		case "DESCRIPTION:":
			lines = append(lines, strings.TrimPrefix(line, "   "))
		case "COMMANDS:":
			f := strings.Fields(line)
			if len(f) == 0 || strings.HasSuffix(f[0], ":") { // a blank line, a category
				continue
			}
			if name := strings.TrimSuffix(f[0], ","); name != "help" {
				subs = append(subs, name)
			}
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n")), subs
}

// readmeExampleGroups collects the lines of README.md's ```sh blocks, one
// group per block.
func readmeExampleGroups(t *testing.T) []exampleGroup {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e2etest.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var groups []exampleGroup
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		start := i + 1
		var block []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			block = append(block, lines[i])
		}
		g := exampleGroup{name: fmt.Sprintf("README.md:%d", start)}
		for _, l := range shellLines(strings.Join(block, "\n")) {
			if why, ok := exampleSkip[l]; ok {
				t.Logf("README.md:%d: not run: %s: %s", start, l, why)
				continue
			}
			g.examples = append(g.examples, example{where: g.name, line: l})
		}
		if len(g.examples) > 0 {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		t.Fatal("README.md has no ```sh block")
	}
	return groups
}

// shellLines splits text into commands: one per line, a line ending in a
// backslash continued by the next; blank lines dropped.
func shellLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if cont, ok := strings.CutSuffix(l, `\`); ok {
			cur += cont
			continue
		}
		cur += l
		if strings.TrimSpace(cur) != "" {
			out = append(out, strings.TrimSpace(cur))
		}
		cur = ""
	}
	if strings.TrimSpace(cur) != "" {
		out = append(out, strings.TrimSpace(cur))
	}
	return out
}

// splitComment cuts a shell line's trailing "# comment", minding quotes.
func splitComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\\' && quote != '\'':
			i++
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i])
		}
	}
	return strings.TrimSpace(line)
}

// exampleEnv is a user's machine: a workspace (with the repository's
// examples/), a HOME whose ~/.local/share/agent is AGENT_HOME, a fake
// model, and a gateway started when an example needs one.
type exampleEnv struct {
	dir, home, agentHome, ws string
	model                    string // OPENAI_BASE_URL
	gateway                  string // host:port once started
	forked                   string // the session the last `sessions fork` printed
	rewindRun                string
	richSession              string
	postgres                 string // a PostgreSQL server's DSN, once an example needs one
}

// examplePostgres is an example's database URL, which becomes a fresh
// database on a real server the test starts.
var examplePostgres = regexp.MustCompile(`postgres://\S+`)

const (
	exampleToken = "example-gateway-token-0123456789"
	// Prompts of the runs the test makes for examples to refer to.
	fixtureMaxTurns = "fixture: stop at max turns"
	fixtureFiles    = "fixture: write three files"
	fixtureSession  = "fixture: many tool calls"
	fixtureWaiting  = "fixture: a call that waits for approval"
	fixtureRichness = 15 // tool calls in the session fixture: > 40 events
)

func newExampleEnv(t *testing.T) *exampleEnv {
	t.Helper()
	dir := t.TempDir()
	e := &exampleEnv{dir: dir, home: filepath.Join(dir, "home"), ws: filepath.Join(dir, "ws")}
	e.agentHome = filepath.Join(e.home, ".local", "share", "agent")
	for _, d := range []string{e.agentHome, filepath.Join(e.ws, "examples")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A user runs the examples in a checkout: examples/ is there.
	for _, f := range []string{"hello.cassette.jsonl", "hello.prompt"} {
		data, err := os.ReadFile(filepath.Join(e2etest.Root(), "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.ws, "examples", f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The screenshot an example gives the model.
	e2etest.WriteImage(t, filepath.Join(e.ws, "screenshot.png"), "png", 32, 24)
	// The MCP server examples name in a workspace's .mcp.json is the test
	// MCP server, as the model is a fake one.
	mcpJSON := `{"mcpServers": {"github": {"command": "mcptest-server"}}}`
	if err := os.WriteFile(filepath.Join(e.ws, ".mcp.json"), []byte(mcpJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	// The token file 'agent gateway' would write, for examples that read it.
	if err := os.WriteFile(filepath.Join(e.agentHome, "gateway.token"), []byte(exampleToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.model = startExampleModel(t)
	return e
}

// startExampleModel serves every model request of the examples: the
// planner gets a one-phase plan, the fixtures their tool calls, and
// everything else the text "DONE" (which also ends --until DONE loops).
func startExampleModel(t *testing.T) string {
	t.Helper()
	planArgs := json.RawMessage(`{"objective":"Do what was asked","phases":[
		{"id":"only","title":"Only","instructions":"Do it and say DONE.","evidence":{"type":"none"}}]}`)
	loop := func(turns ...llmtest.Turn) *llmtest.Server {
		return llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: turns})
	}
	done := loop(llmtest.Turn{Text: "DONE"})
	planner := loop(llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}})
	tool := loop(llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("list_files", `{}`)}})
	// Distinct calls, so the run is not stopped for repeating itself.
	var greps []llmtest.Turn
	for i := range fixtureRichness {
		greps = append(greps, llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("grep", fmt.Sprintf(`{"pattern":"word%d"}`, i))}})
	}
	grep := loop(greps...)
	var writes []*llmtest.Server
	for _, name := range []string{"a", "b", "c"} {
		writes = append(writes, loop(llmtest.Turn{ToolCalls: []llmtest.Call{{
			ID: "call_write_" + name, Name: "write_file", Arguments: json.RawMessage(`{"path":"` + name + `.txt","content":"` + name + `\n"}`),
		}}}))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		var text strings.Builder
		answers := 0
		for _, m := range req.Messages {
			var s string
			if json.Unmarshal(m.Content, &s) == nil {
				text.WriteString(s + "\n")
			}
			if m.Role == "assistant" {
				answers++
			}
		}
		all := text.String()
		to := done
		switch {
		case strings.Contains(all, e2etest.PlannerMarker):
			to = planner
		case (strings.Contains(all, fixtureMaxTurns) || strings.Contains(all, fixtureWaiting)) && answers == 0:
			to = tool
		case strings.Contains(all, fixtureFiles) && answers < len(writes):
			to = writes[answers]
		case strings.Contains(all, fixtureSession) && answers < fixtureRichness:
			to = grep
		}
		to.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// environ is the environment of every command: the user's, with this
// machine's agent settings replaced.
func (e *exampleEnv) environ(withGateway bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AGENT_") || strings.HasPrefix(k, "OPENAI_") || k == "HOME" || k == "XDG_DATA_HOME" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+e.home, "AGENT_HOME="+e.agentHome, "OPENAI_BASE_URL="+e.model,
		"OPENAI_API_KEY=", "AGENT_MODEL=test-model", "AGENT_GATEWAY_TOKEN="+exampleToken)
	if withGateway {
		env = append(env, "AGENT_GATEWAY=http://"+e.gateway)
	}
	return env
}

// ran is a finished command.
type ran struct {
	stdout, stderr string
	code           int
}

// sh runs a command line through sh in the workspace.
func (e *exampleEnv) sh(t *testing.T, line string, withGateway bool) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir, cmd.Env = e.ws, e.environ(withGateway)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", line, err)
	}
	return ran{stdout: out.String(), stderr: errb.String(), code: code}
}

// agent runs a fixture command and insists on its exit code.
func (e *exampleEnv) agent(t *testing.T, want int, withGateway bool, args ...string) ran {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	res := e.sh(t, "agent "+strings.Join(quoted, " "), withGateway)
	if res.code != want {
		t.Fatalf("fixture agent %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), res.code, want, res.stderr)
	}
	return res
}

// firstEvent is the ids of a --json event stream.
func firstEvent(t *testing.T, stdout string) (runID, sessionID string) {
	t.Helper()
	var ev struct {
		RunID     string `json:"run_id"`
		SessionID string `json:"session_id"`
	}
	line, _, _ := strings.Cut(stdout, "\n")
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.RunID == "" {
		t.Fatalf("no event on stdout: %q", stdout)
	}
	return ev.RunID, ev.SessionID
}

// startGateway starts the gateway examples talk to, with the scheduler on
// (for jobs run-now), once.
func (e *exampleEnv) startGateway(t *testing.T) {
	t.Helper()
	if e.gateway != "" {
		return
	}
	cmd := exec.Command("agent", "gateway", "--listen", "127.0.0.1:0", "--scheduler", "--json")
	cmd.Dir, cmd.Env = e.ws, e.environ(false)
	errf, err := os.Create(filepath.Join(e.dir, "gateway.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(e2etest.Patience):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	var hello struct {
		Listen string `json:"listen"`
	}
	if err != nil || json.Unmarshal([]byte(line), &hello) != nil || hello.Listen == "" {
		data, _ := os.ReadFile(errf.Name())
		t.Fatalf("the test's gateway did not start: %q %v\n%s", line, err, data)
	}
	e.gateway = hello.Listen
}

// latestRun is the newest run, as `runs list --json` shows it.
func (e *exampleEnv) latestRun(t *testing.T) (e2etest.RunView, bool) {
	t.Helper()
	res := e.agent(t, 0, false, "runs", "list", "--json", "--limit", "1")
	if strings.TrimSpace(res.stdout) == "" {
		return e2etest.RunView{}, false
	}
	var v e2etest.RunView
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		t.Fatalf("runs list --json: %v: %s", err, res.stdout)
	}
	return v, true
}

// anyRun is a run to show: the newest, or a new one.
func (e *exampleEnv) anyRun(t *testing.T) string {
	t.Helper()
	if v, ok := e.latestRun(t); ok {
		return v.ID
	}
	id, _ := firstEvent(t, e.agent(t, 0, false, "run", "--json", "say DONE").stdout)
	return id
}

// resumableRun is the newest run if it can be resumed in this process
// (as after `agent harness --plan`), else a run stopped at --max-turns.
func (e *exampleEnv) resumableRun(t *testing.T) string {
	t.Helper()
	if v, ok := e.latestRun(t); ok && v.SessionID == "" && (v.Status == "planned" || v.Status == "interrupted" || v.Status == "failed") {
		return v.ID
	}
	id, _ := firstEvent(t, e.agent(t, 1, false, "run", "--json", "--max-turns", "1", fixtureMaxTurns).stdout)
	return id
}

// waitingRun is a run that waits for the approval of its call: a new one
// each time, since an answer uses the wait up.
func (e *exampleEnv) waitingRun(t *testing.T) string {
	t.Helper()
	id, _ := firstEvent(t, e.agent(t, 6, false, "run", "--json", "--ask", "list_files", fixtureWaiting).stdout)
	return id
}

// gatewayResumableRun is a gateway run stopped at --max-turns.
func (e *exampleEnv) gatewayResumableRun(t *testing.T) string {
	t.Helper()
	e.startGateway(t)
	id, _ := firstEvent(t, e.agent(t, 1, true, "run", "--gateway", "--json", "--max-turns", "1", fixtureMaxTurns).stdout)
	return id
}

// filesRun is a run that wrote three files, so it has checkpoints 1-3.
func (e *exampleEnv) filesRun(t *testing.T) string {
	t.Helper()
	if e.rewindRun == "" {
		e.rewindRun, _ = firstEvent(t, e.agent(t, 0, false, "run", "--json", fixtureFiles).stdout)
	}
	return e.rewindRun
}

// session is a gateway session with more than 40 events (sessions fork
// --seq 40).
func (e *exampleEnv) session(t *testing.T) string {
	t.Helper()
	if e.richSession == "" {
		e.startGateway(t)
		_, e.richSession = firstEvent(t, e.agent(t, 0, true, "run", "--gateway", "--json", fixtureSession).stdout)
	}
	return e.richSession
}

var (
	exampleIDs     = regexp.MustCompile(`\b(3f2a|0190c3a2|RUN_ID|ID|SESSION|NEW_ID)\b`)
	exampleListen  = regexp.MustCompile(`--listen[ =]\S+`)
	defaultAddress = "127.0.0.1:7420"
)

// prepare turns an example into the command to run on this machine.
func (e *exampleEnv) prepare(t *testing.T, line string) (cmdline string, withGateway bool) {
	t.Helper()
	cmdline = splitComment(line)
	fields := strings.Fields(cmdline)
	sub := func(i int) string {
		if i < len(fields) {
			return fields[i]
		}
		return ""
	}
	withGateway = strings.Contains(cmdline, "--gateway") || sub(1) == "attach" || sub(1) == "jobs"
	if examplePostgres.MatchString(cmdline) {
		if e.postgres == "" {
			e.postgres = pgtest.Start(t)
		}
		cmdline = examplePostgres.ReplaceAllString(cmdline, pgtest.Database(t, e.postgres, ""))
	}
	if withGateway || strings.Contains(cmdline, defaultAddress) {
		e.startGateway(t)
		cmdline = strings.ReplaceAll(cmdline, defaultAddress, e.gateway)
	}
	if sub(0) == "agent" && sub(1) == "harness" && strings.Contains(cmdline, "--plan-file mission.json") {
		// The user has a plan: one written by --plan, or by hand.
		plan := `{"objective":"Do what was asked","phases":[{"id":"only","title":"Only","instructions":"Do it and say DONE.","evidence":{"type":"none"}}]}`
		if err := os.WriteFile(filepath.Join(e.ws, "mission.json"), []byte(plan), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmdline = exampleIDs.ReplaceAllStringFunc(cmdline, func(tok string) string {
		var id string
		switch {
		case tok == "NEW_ID":
			if e.forked == "" {
				t.Fatalf("%q: NEW_ID before any 'agent sessions fork'", line)
			}
			id = e.forked
		case sub(1) == "sessions" || sub(1) == "attach" || strings.Contains(cmdline, "--session "+tok):
			id = e.session(t)
		case sub(1) == "resume" && withGateway:
			id = e.gatewayResumableRun(t)
		case sub(1) == "resume":
			id = e.resumableRun(t)
		case sub(1) == "rewind":
			id = e.filesRun(t)
		case sub(1) == "runs":
			id = e.anyRun(t)
		case sub(1) == "approve" || sub(1) == "deny":
			id = e.waitingRun(t)
		default:
			t.Fatalf("%q: the test does not know what %s stands for; teach prepare", line, tok)
		}
		return shortID(id)
	})
	return cmdline, withGateway
}

// run runs one example and checks its exit code.
func (e *exampleEnv) run(t *testing.T, ex example) {
	t.Helper()
	cmdline, withGateway := e.prepare(t, ex.line)
	want := exampleExit[ex.line]
	fields := strings.Fields(cmdline)
	var res ran
	switch {
	case len(fields) >= 2 && fields[0] == "agent" && fields[1] == "gateway":
		// A daemon: it must start, serve, and stop cleanly on SIGTERM.
		if exampleListen.MatchString(cmdline) {
			cmdline = exampleListen.ReplaceAllString(cmdline, "--listen 127.0.0.1:0")
		} else {
			cmdline += " --listen 127.0.0.1:0"
		}
		res = e.untilStopped(t, cmdline, withGateway, "listening on", syscall.SIGTERM)
	case len(fields) >= 2 && fields[0] == "agent" && (fields[1] == "worker" || len(fields) >= 4 && fields[1] == "--database" && fields[3] == "worker"):
		// A daemon too (agent worker, or agent --database URL worker):
		// it claims runs until SIGTERM.
		res = e.untilStopped(t, cmdline, withGateway, "driving up to", syscall.SIGTERM)
	case len(fields) >= 2 && fields[0] == "agent" && fields[1] == "attach":
		// Follows until Ctrl-C.
		res = e.untilStopped(t, cmdline, withGateway, "", syscall.SIGINT)
	default:
		res = e.sh(t, cmdline, withGateway)
	}
	t.Logf("%s: %s\n    ran: %s\n    exit %d", ex.where, ex.line, cmdline, res.code)
	if res.code != want {
		t.Errorf("%s: example does not run as written:\n    %s\nran: %s\nexit %d, want %d\nstdout: %s\nstderr: %s",
			ex.where, ex.line, cmdline, res.code, want, res.stdout, res.stderr)
		return
	}
	if len(fields) > 0 && fields[0] == "curl" && strings.Contains(res.stdout, `"error"`) {
		t.Errorf("%s: %s: the gateway refused it: %s", ex.where, ex.line, res.stdout)
	}
	if len(fields) >= 3 && fields[0] == "agent" && fields[1] == "sessions" && fields[2] == "fork" {
		e.forked = strings.TrimSpace(res.stdout)
		if e.forked == "" {
			t.Errorf("%s: %s printed no session id", ex.where, ex.line)
		}
	}
}

// untilStopped runs a command that runs until stopped: it waits for
// ready on stderr (when ready is "": for any output, or three seconds),
// then sends sig.
func (e *exampleEnv) untilStopped(t *testing.T, cmdline string, withGateway bool, ready string, sig syscall.Signal) ran {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec "+cmdline)
	cmd.Dir, cmd.Env = e.ws, e.environ(withGateway)
	var out, errb e2etest.Output // written by the command, read by the test
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.After(e2etest.Patience)
	settle := time.After(3 * time.Second)
wait:
	for {
		select {
		case <-done: // ended on its own: an error
			return ran{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
		case <-deadline:
			break wait
		case <-settle:
			if ready == "" {
				break wait
			}
		case <-time.After(20 * time.Millisecond):
			if ready != "" && strings.Contains(errb.String(), ready) {
				break wait
			}
			if ready == "" && out.String()+errb.String() != "" {
				time.Sleep(200 * time.Millisecond) // printed while it sets up; let it finish
				break wait
			}
		}
	}
	if ready != "" && !strings.Contains(errb.String(), ready) {
		_ = cmd.Process.Kill()
		<-done
		return ran{stdout: out.String(), stderr: errb.String() + "\n(no " + ready + " within " + e2etest.Patience.String() + ")", code: -1}
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(e2etest.Patience):
		_ = cmd.Process.Kill()
		<-done
		return ran{stdout: out.String(), stderr: errb.String() + "\n(did not stop within " + e2etest.Patience.String() + ")", code: -1}
	}
	return ran{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
}

// shortID is the 8-character prefix 'agent runs list' shows of an id.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
