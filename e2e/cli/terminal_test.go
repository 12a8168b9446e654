package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/gateway"
	"agent/llm/llmtest"
)

// What people see of the CLI: the gateway-client flows' human output, and
// in a real terminal (tmux) the spinner and the harness board.

// startHuman starts agent without --json, its output in buffers.
func startHuman(e *e2etest.Env, env []string, args ...string) (cmd *exec.Cmd, stdout, stderr *e2etest.Output, done chan struct{}) {
	e.T.Helper()
	cmd = e.Command(args...)
	cmd.Env = append(cmd.Env, env...)
	stdout, stderr = &e2etest.Output{}, &e2etest.Output{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	done = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	e.T.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd, stdout, stderr, done
}

func waitDone(t *testing.T, done chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(e2etest.Patience):
		t.Fatal("the command did not exit")
	}
}

// With no gateway at the address, the gateway-client commands say so in
// one line, with how to start one, and exit 3 — with no token as well,
// since then most likely no gateway was ever started. When something does
// answer, a missing token is what they name.
func TestTerminalNoGateway(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	want := fmt.Sprintf("agent: no gateway answers at http://%s (connection refused); start one with: agent gateway --listen %s\n", addr, addr)
	agent := func(addr string, token bool, args ...string) (int, string, string) {
		cmd := e.Command(args...)
		cmd.Env = append(cmd.Env, "AGENT_GATEWAY=http://"+addr)
		if token {
			cmd.Env = append(cmd.Env, "AGENT_GATEWAY_TOKEN="+e2etest.GwToken)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), errb.String(), out.String()
	}
	for _, token := range []bool{true, false} {
		for _, args := range [][]string{{"jobs", "list"}, {"run", "hi"}, {"attach", "s1"}} {
			if code, stderr, stdout := agent(addr, token, args...); code != 3 || stderr != want || stdout != "" {
				t.Errorf("agent %s (token %v): exit %d, stderr %q, stdout %q; want exit 3 and %q", strings.Join(args, " "), token, code, stderr, stdout, want)
			}
		}
	}

	listening, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listening.Close()
	code, stderr, _ := agent(listening.Addr().String(), false, "jobs", "list")
	if code != 2 || !strings.HasPrefix(stderr, "agent: no gateway token: set AGENT_GATEWAY_TOKEN or start 'agent gateway' once") {
		t.Errorf("no token, something listening: exit %d, stderr %q", code, stderr)
	}
}

// TestAttachHuman: attach shows the session's prompts before their
// answers, and says on stderr that it follows the session and how to
// stop, also when there is nothing to replay; --json says nothing but
// events.
func TestAttachHuman(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "first answer"})
	srv, _ := e.InProcessGateway(nil)
	env := e.GatewayEnv(srv.Addr())
	cmd := e.Command("run", "--json", "one")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	evs := e2etest.DecodeEvents(t, string(out))
	session, last := evs[0].SessionID, evs[len(evs)-1].Seq

	attach := func(wait func(stdout, stderr string) bool, args ...string) (string, string, int) {
		t.Helper()
		cmd, stdout, stderr, done := startHuman(e, env, append([]string{"attach", session}, args...)...)
		e2etest.WaitFor(t, "attach's output", func() bool { return wait(stdout.String(), stderr.String()) })
		_ = cmd.Process.Signal(syscall.SIGINT)
		waitDone(t, done)
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}

	// The answer's line is whole once its line break is out: the text
	// streams first, the break comes with the message's end.
	stdout, stderr, code := attach(func(o, _ string) bool { return strings.Contains(o, "first answer\n") })
	if stdout != "> one\nfirst answer\n" || code != 0 {
		t.Errorf("replay: exit %d, stdout %q", code, stdout)
	}
	if want := "replaying session " + session + " after seq 0, then following it; Ctrl-C stops\n"; !strings.HasPrefix(stderr, want) {
		t.Errorf("replay: stderr %q, want it to start with %q", stderr, want)
	}

	after := strconv.FormatInt(last, 10)
	want := "following session " + session + ": nothing after seq " + after + " yet; new events show as they come; Ctrl-C stops\n"
	stdout, stderr, code = attach(func(_, e string) bool { return strings.Contains(e, "Ctrl-C") }, "--after-seq", after)
	if stdout != "" || stderr != want || code != 0 {
		t.Errorf("nothing to replay: exit %d, stdout %q, stderr %q, want %q", code, stdout, stderr, want)
	}

	stdout, stderr, _ = attach(func(o, _ string) bool { return strings.Contains(o, `"run.completed"`) }, "--json")
	if stderr != "" || strings.Contains(stdout, "> one") {
		t.Errorf("--json: stderr %q, stdout %q", stderr, stdout)
	}
}

// TestTerminalGatewayDrain: a gateway that stops (its drain) interrupts a
// run it resumes itself when it starts again; its client is told so, and
// how to follow it, not to resume it. This is also where console's copy
// of the drain's detail is checked against the gateway's.
func TestTerminalGatewayDrain(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Long step.", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"`+e2etest.MarkThenSleep+`"}`)}},
	)
	srv, _ := e.InProcessGateway(func(c *gateway.Config) { c.DrainGrace = 100 * time.Millisecond })
	cmd, stdout, stderr, done := startHuman(e, e.GatewayEnv(srv.Addr()), "run", "a long task")
	e2etest.WaitFor(t, "the long tool to start", func() bool {
		data, err := os.ReadFile(filepath.Join(e.Workspace, "started"))
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.Patience)
	defer cancel()
	_ = srv.Stop(ctx)
	waitDone(t, done)
	runs := e.Run("runs", "list", "--json")
	var run struct {
		ID        string `json:"id"`
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(runs.Stdout, "\n", 2)[0]), &run); err != nil {
		t.Fatalf("runs list: %v: %s", err, runs.Stdout)
	}
	want := "interrupted after [0-9.]+s: the gateway stopped; it resumes run " + run.ID +
		" when it starts again; follow it with: agent attach " + run.SessionID + "\n$"
	if code := cmd.ProcessState.ExitCode(); code != 130 || !regexp.MustCompile(want).MatchString(stderr.String()) {
		t.Errorf("exit %d, stderr %q, want 130 and %q (stdout %q)", code, stderr.String(), want, stdout.String())
	}
}

// tmuxSession runs a shell command in a detached tmux session of its own
// server, 100×30, and returns a function that captures the pane.
func tmuxSession(t *testing.T, command string) (capture func() string, keys func(...string)) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed; this test drives the CLI in a real terminal through it")
	}
	server := fmt.Sprintf("agent-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	tmux := func(args ...string) (string, error) {
		cmd := exec.Command("tmux", append([]string{"-L", server, "-f", "/dev/null"}, args...)...)
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TMUX=") {
				env = append(env, kv)
			}
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := tmux("new-session", "-d", "-x", "100", "-y", "30", "-s", "t", command); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	pane := -1
	if out, err := tmux("display-message", "-p", "-t", "t", "#{pane_pid}"); err == nil {
		pane, _ = strconv.Atoi(strings.TrimSpace(out))
	}
	t.Cleanup(func() {
		// The server hangs up on the pane and returns at once. A chat the
		// test left running still writes to its home as it ends: it must
		// be gone before the test's directories are removed.
		left := e2etest.Descendants(pane)
		_, _ = tmux("kill-server")
		for _, pid := range left {
			e2etest.WaitFor(t, fmt.Sprintf("process %d of the terminal to end once hung up", pid), func() bool { return !e2etest.Alive(pid) })
		}
	})
	capture = func() string {
		out, err := tmux("capture-pane", "-p", "-t", "t")
		if err != nil {
			t.Fatalf("tmux capture-pane: %v: %s", err, out)
		}
		return out
	}
	keys = func(k ...string) {
		if out, err := tmux(append([]string{"send-keys", "-t", "t"}, k...)...); err != nil {
			t.Fatalf("tmux send-keys: %v: %s", err, out)
		}
	}
	return capture, keys
}

// shellCommand is agent args in e's environment, as a line for sh.
func shellCommand(e *e2etest.Env, args ...string) string {
	agent, err := exec.LookPath("agent")
	if err != nil {
		e.T.Fatal(err)
	}
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	line := fmt.Sprintf("cd %s && AGENT_HOME=%s OPENAI_BASE_URL=%s OPENAI_API_KEY= AGENT_MODEL=test-model %s",
		q(e.Workspace), q(e.Home), q(e.Srv.URL()), q(agent))
	for _, a := range args {
		line += " " + q(a)
	}
	return line + "; echo EXIT=$?; sleep 600"
}

// waitScreen polls the pane until cond holds, and returns it.
func waitScreen(t *testing.T, what string, capture func() string, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(e2etest.Patience)
	for {
		s := capture()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; the screen:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTerminalTmuxSpinner: in a real terminal, the spinner is back after
// write_file's "wrote" line while the model thinks, and counts. The model
// thinks until the test has seen it count.
func TestTerminalTmuxSpinner(t *testing.T) {
	t.Parallel()
	thinking := make(chan struct{})
	e := e2etest.New(t,
		e2etest.WriteTurn("slow.txt", "slow\n"),
		llmtest.Turn{Text: "Done.", Gate: thinking},
	)
	capture, _ := tmuxSession(t, shellCommand(e, "run", "write slow.txt"))
	waiting := regexp.MustCompile(`(?m)wrote slow\.txt \(5 bytes\)\n. waiting for the model \([1-9]s\)`)
	waitScreen(t, "the spinner after the wrote line", capture, waiting.MatchString)
	close(thinking)
	s := waitScreen(t, "the end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(s, "EXIT=0") || !strings.Contains(s, "Done.\ndone in ") || strings.Contains(s, "waiting for the model") {
		t.Errorf("final screen:\n%s", s)
	}
}

// TestTerminalTmuxHarness: in a real terminal, the board shows the
// planner at work, asks about the plan without drawing over the prompt,
// shows each transition once, and its total leaves out the time at the
// prompt.
func TestTerminalTmuxHarness(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"One file","phases":[
		{"id":"write","title":"Write a.md","instructions":"Write a.md.","evidence":{"type":"artifact","artifacts":["a.md"]}}]}`)
	// The planner thinks until the test has seen the board count.
	thinking := make(chan struct{})
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, Gate: thinking, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("write", e2etest.WriteTurn("a.md", "A\n"), llmtest.Turn{Text: "a.md written."})...)
	e := e2etest.NewHarness(t, turns...)
	capture, keys := tmuxSession(t, shellCommand(e, "harness", "write a.md"))
	planning := regexp.MustCompile(`(?m)^. planning [1-9](\.[0-9])?s`)
	waitScreen(t, "the planning line", capture, planning.MatchString)
	close(thinking)
	s := waitScreen(t, "the plan prompt", capture, func(s string) bool { return strings.Contains(s, "[Y/n]") })
	if !regexp.MustCompile(`(?m)^the plan is in \.agent/runs/[0-9a-f-]{36}/mission\.json\nRun this plan\? \[Y/n\] *$`).MatchString(s) {
		t.Errorf("the prompt is not a short line of its own under the plan's path:\n%s", s)
	}
	time.Sleep(1500 * time.Millisecond) // a person reads the plan
	if s2 := capture(); s2 != s || strings.Contains(s, "planning") {
		t.Errorf("the screen changed at the prompt, or kept the planning line:\n%s\nthen:\n%s", s, s2)
	}
	keys("y", "Enter")
	s = waitScreen(t, "the end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	done := regexp.MustCompile(`done in [0-9.]+s \(\+[1-9][0-9.]*s waiting to start\) · 1 phase`)
	if !strings.Contains(s, "EXIT=0") || !done.MatchString(s) || strings.Contains(s, "attempt 1 started") || strings.Contains(s, "verified in") ||
		!regexp.MustCompile(`(?m)^✓ write +completed +attempt 1 +[0-9.]+s`).MatchString(s) {
		t.Errorf("final screen:\n%s", s)
	}
	for _, l := range strings.Split(s, "\n") {
		if l != "" && strings.ContainsRune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏", []rune(l)[0]) {
			t.Errorf("a spinner frame left on screen: %q", l)
		}
	}
}
