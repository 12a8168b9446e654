package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// chatShell is agent chat at a tmux terminal, between two `stty -a` of it
// (before and after, in the workspace), so a test sees the terminal left
// as it was found.
func chatShell(e *e2etest.Env, args ...string) string {
	line := shellCommand(e, append([]string{"chat"}, args...)...)
	before, after := filepath.Join(e.Workspace, "stty.before"), filepath.Join(e.Workspace, "stty.after")
	return "stty -a > " + before + "; " + strings.Replace(line, "; echo EXIT=$?", "; echo EXIT=$?; stty -a > "+after, 1)
}

// sameTerminal fails the test unless the terminal's settings after the
// chat are those before it.
func sameTerminal(t *testing.T, e *e2etest.Env) {
	t.Helper()
	var got [2]string
	for i, name := range []string{"stty.before", "stty.after"} {
		path := filepath.Join(e.Workspace, name)
		e2etest.WaitFor(t, name, func() bool { b, err := os.ReadFile(path); return err == nil && len(b) > 0 })
		b, _ := os.ReadFile(path)
		got[i] = string(b)
	}
	if got[0] != got[1] {
		t.Errorf("the terminal after the chat differs:\nbefore: %s\nafter:  %s", got[0], got[1])
	}
}

// TestChatTmuxConversation: at a real terminal, three messages of one
// session (the third's request carries the first), a message of two lines
// (Ctrl-J), the prompt naming the session and the model, /cost, an unknown
// command, Tab completion, and Ctrl-D leaving with how to come back, the
// terminal as it was.
func TestChatTmuxConversation(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Hello Ada."},
		llmtest.Turn{Text: "Noted: blue."},
		llmtest.Turn{Text: "Your name is Ada."},
		llmtest.Turn{Text: "Two lines seen."},
	)
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the first prompt", capture, func(s string) bool { return strings.Contains(s, "new session · test-model ›") })
	keys("my name is Ada", "Enter")
	waitScreen(t, "the first answer", capture, func(s string) bool { return strings.Contains(s, "Hello Ada.") && strings.Contains(s, "test-model ›") })
	keys("my colour is blue", "Enter")
	waitScreen(t, "the second answer", capture, func(s string) bool { return strings.Contains(s, "Noted: blue.") })
	keys("what is my name?", "Enter")
	s := waitScreen(t, "the third answer", capture, func(s string) bool { return strings.Contains(s, "Your name is Ada.") })
	if third := string(e.Srv.Requests()[2].Body); !strings.Contains(third, "my name is Ada") || !strings.Contains(third, "Hello Ada.") {
		t.Errorf("the third request lacks the first message: %s", third)
	}
	if !strings.Contains(s, "session ") {
		t.Errorf("the prompt does not name the session:\n%s", s)
	}
	// At the editor (typed ahead during a turn, the terminal cooked, a
	// line break is an Enter).
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("line one", "C-j", "line two", "Enter")
	waitScreen(t, "the answer to two lines", capture, func(s string) bool { return strings.Contains(s, "Two lines seen.") })
	if fourth := string(e.Srv.Requests()[3].Body); !strings.Contains(fourth, `line one\nline two`) {
		t.Errorf("the two-line message was not sent as one: %s", fourth)
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("/cos", "Tab", "Enter")
	waitScreen(t, "/cost", capture, func(s string) bool { return strings.Contains(s, "4 runs,") && strings.Contains(s, "tokens") })
	keys("/nope", "Enter")
	waitScreen(t, "the unknown command", capture, func(s string) bool {
		return strings.Contains(s, "unknown command /nope; the commands are /help")
	})
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("C-d")
	s = waitScreen(t, "the chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(s, "go on with: agent chat --continue") || !strings.Contains(s, "EXIT=0") {
		t.Errorf("leaving does not say how to come back:\n%s", s)
	}
	sameTerminal(t, e)
}

// TestChatTmuxApproval: under --ask bash the call waits and is asked
// inline at the chat's editor; y runs it and the turn goes on.
func TestChatTmuxApproval(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo approved > ran.txt"}`)}},
		llmtest.Turn{Text: "It ran."},
	)
	capture, keys := tmuxSession(t, chatShell(e, "--ask", "bash"))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("run it", "Enter")
	waitScreen(t, "the approval", capture, func(s string) bool { return strings.Contains(s, `Allow bash "echo approved > ran.txt"? [y]es`) })
	keys("y", "Enter")
	waitScreen(t, "the answer", capture, func(s string) bool { return strings.Contains(s, "It ran.") })
	if b, err := os.ReadFile(filepath.Join(e.Workspace, "ran.txt")); err != nil || string(b) != "approved\n" {
		t.Errorf("the approved call's file: %q, %v", b, err)
	}
	leave(t, e, capture, keys)
}

// TestChatTmuxInterrupt: Ctrl-C while the model thinks interrupts the
// turn, resumably, and the chat goes on; the next message's request has
// the interrupted one in it. Ctrl-C twice at an empty prompt leaves.
func TestChatTmuxInterrupt(t *testing.T) {
	t.Parallel()
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	e := e2etest.New(t,
		llmtest.Turn{Text: "never said", Gate: never, When: "count to a million"},
		llmtest.Turn{Text: "Stopped counting.", When: "never mind"},
	)
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("count to a million", "Enter")
	e2etest.WaitFor(t, "the model's request", func() bool { return e.Srv.RequestCount() == 1 })
	keys("C-c")
	waitScreen(t, "the interrupt", capture, func(s string) bool {
		return strings.Contains(s, "interrupted after") && strings.Contains(s, "the next message goes on with it in context")
	})
	keys("never mind", "Enter")
	waitScreen(t, "the follow-up's answer", capture, func(s string) bool { return strings.Contains(s, "Stopped counting.") })
	if second := string(e.Srv.Requests()[1].Body); !strings.Contains(second, "count to a million") {
		t.Errorf("the follow-up's request lacks the interrupted message: %s", second)
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("C-c")
	waitScreen(t, "the hint", capture, func(s string) bool { return strings.Contains(s, "(Ctrl-C again or Ctrl-D to leave)") })
	keys("C-c")
	s := waitScreen(t, "the chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(s, "EXIT=0") || !strings.Contains(s, "agent chat --continue") {
		t.Errorf("final screen:\n%s", s)
	}
	sameTerminal(t, e)
}

// TestChatTmuxHistory: what was typed in one chat is ↑ in the next, which
// --continue opens on the same session.
func TestChatTmuxHistory(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "First answer."}, llmtest.Turn{Text: "Second answer."})
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("remember the word marmalade", "Enter")
	waitScreen(t, "the answer", capture, func(s string) bool { return strings.Contains(s, "First answer.") })
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("C-d")
	waitScreen(t, "the first chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=0") })

	capture, keys = tmuxSession(t, shellCommand(e, "chat", "--continue"))
	waitScreen(t, "the prompt of the session", capture, func(s string) bool { return strings.Contains(s, "session ") && strings.Contains(s, "test-model ›") })
	keys("Up")
	waitScreen(t, "the last message recalled", capture, func(s string) bool { return strings.Contains(s, "› remember the word marmalade") })
	keys("Enter")
	waitScreen(t, "the second answer", capture, func(s string) bool { return strings.Contains(s, "Second answer.") })
	if second := string(e.Srv.Requests()[1].Body); strings.Count(second, "remember the word marmalade") != 2 {
		t.Errorf("the second request should carry the session's first message and the recalled one: %s", second)
	}
}

// TestChatTmuxApproveAndFork: a scripted chat under --ask parks (exit 6);
// agent chat --continue at a terminal answers it with /approve, and the run
// goes on here; /fork then goes on in a new session holding the
// conversation, and /deny with nothing waiting says so.
func TestChatTmuxApproveAndFork(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo approved > ran.txt"}`)}},
		llmtest.Turn{Text: "It ran."},
		llmtest.Turn{Text: "Still here, in the fork."},
	)
	script := e.Command("chat", "--ask", "bash", "--json")
	script.Stdin = strings.NewReader("run it\n")
	_ = script.Run()
	if code := script.ProcessState.ExitCode(); code != 6 {
		t.Fatalf("the scripted chat exited %d, want 6: its run waits", code)
	}
	capture, keys := tmuxSession(t, chatShell(e, "--continue"))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("/approve", "Enter")
	waitScreen(t, "the run going on", capture, func(s string) bool { return strings.Contains(s, "It ran.") })
	if b, err := os.ReadFile(filepath.Join(e.Workspace, "ran.txt")); err != nil || string(b) != "approved\n" {
		t.Errorf("the approved call's file: %q, %v", b, err)
	}
	keys("/deny", "Enter")
	waitScreen(t, "nothing to deny", capture, func(s string) bool { return strings.Contains(s, "no run of this session waits") })
	keys("/fork", "Enter")
	waitScreen(t, "the fork", capture, func(s string) bool { return strings.Contains(s, "the next message goes there") })
	keys("are you there?", "Enter")
	waitScreen(t, "the fork's answer", capture, func(s string) bool { return strings.Contains(s, "Still here, in the fork.") })
	if third := string(e.Srv.Requests()[2].Body); !strings.Contains(third, "run it") || !strings.Contains(third, "It ran.") {
		t.Errorf("the fork's request lacks the conversation: %s", third)
	}
	db := e.OpenStore(t)
	ss, err := db.ListSessions(context.Background(), 0, false)
	if err != nil || len(ss) != 2 || ss[0].ParentID != ss[1].ID || !ss[0].Local {
		t.Errorf("sessions after /fork: %+v, %v; want the fork, local, naming its source", ss, err)
	}
	leave(t, e, capture, keys)
}

// TestChatTmuxHarness: /harness REQUEST plans, asks at the editor whether
// to run the plan, shows the phases on the board, and the chat goes on.
func TestChatTmuxHarness(t *testing.T) {
	t.Parallel()
	turns := append(writeAMD(), llmtest.Turn{When: "and now?", Text: "Now we talk again."})
	e := e2etest.NewHarness(t, turns...)
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("/harness write a.md", "Enter")
	waitScreen(t, "the plan's question", capture, func(s string) bool { return strings.Contains(s, "Run this plan? [Y/n]") })
	keys("y", "Enter")
	s := waitScreen(t, "the board's end", capture, func(s string) bool { return regexp.MustCompile(`done in .* · 1 phase`).MatchString(s) })
	if !regexp.MustCompile(`(?m)^✓ write +completed`).MatchString(s) {
		t.Errorf("the board does not show the phase completed:\n%s", s)
	}
	if b, err := os.ReadFile(filepath.Join(e.Workspace, "a.md")); err != nil || string(b) != "A\n" {
		t.Errorf("a.md: %q, %v", b, err)
	}
	keys("and now?", "Enter")
	waitScreen(t, "the next answer", capture, func(s string) bool { return strings.Contains(s, "Now we talk again.") })
	leave(t, e, capture, keys)
}

// atPrompt reports whether the screen ends at the chat's prompt: its
// editor reads again.
func atPrompt(s string) bool {
	lines := strings.Split(strings.TrimRight(s, "\n "), "\n")
	return strings.HasSuffix(lines[len(lines)-1], "›")
}

// TestChatTmuxGateway: at a terminal with --gateway, the turns run in the
// gateway's session, an approval is asked inline at the editor and
// answered through the gateway, and the second message sees the first.
func TestChatTmuxGateway(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo approved > ran.txt"}`)}},
		llmtest.Turn{Text: "It ran in the gateway."},
		llmtest.Turn{Text: "You asked me to run it."},
	)
	g := e.StartGateway()
	line := chatShell(e, "--gateway", "--ask", "bash")
	line = strings.Replace(line, " AGENT_HOME=", " AGENT_GATEWAY=http://"+g.Addr+" AGENT_GATEWAY_TOKEN="+e2etest.GwToken+" AGENT_HOME=", 1)
	capture, keys := tmuxSession(t, line)
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "via "+g.Addr+" ›") })
	keys("run it", "Enter")
	waitScreen(t, "the approval", capture, func(s string) bool { return strings.Contains(s, `Allow bash "echo approved > ran.txt"? [y]es`) })
	keys("y", "Enter")
	waitScreen(t, "the answer", capture, func(s string) bool { return strings.Contains(s, "It ran in the gateway.") })
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("what did I ask?", "Enter")
	waitScreen(t, "the second answer", capture, func(s string) bool { return strings.Contains(s, "You asked me to run it.") })
	if third := string(e.Srv.Requests()[2].Body); !strings.Contains(third, "run it") {
		t.Errorf("the second message's request lacks the first: %s", third)
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("C-d")
	s := waitScreen(t, "the chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=") })
	if !strings.Contains(s, "EXIT=0") || !strings.Contains(s, "agent chat --continue --gateway") {
		t.Errorf("final screen:\n%s", s)
	}
	sameTerminal(t, e)
}

// TestChatTmuxRewind: /rewind puts back the file the session's last run
// wrote, and the chat goes on.
func TestChatTmuxRewind(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.WriteTurn("a.md", "A\n"), llmtest.Turn{Text: "Wrote a.md."})
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("write a.md", "Enter")
	waitScreen(t, "the answer", capture, func(s string) bool { return strings.Contains(s, "Wrote a.md.") })
	if _, err := os.Stat(filepath.Join(e.Workspace, "a.md")); err != nil {
		t.Fatal(err)
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("/rewind", "Enter")
	e2etest.WaitFor(t, "a.md to be gone", func() bool {
		_, err := os.Stat(filepath.Join(e.Workspace, "a.md"))
		return os.IsNotExist(err)
	})
	waitScreen(t, "the prompt after the rewind", capture, func(s string) bool { return strings.Contains(s, "a.md") && atPrompt(s) })
	keys("C-d")
	waitScreen(t, "the chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=0") })
	sameTerminal(t, e)
}

// TestChatTmuxKill9: agent chat killed with kill -9 at its prompt (the
// line editor's raw mode on), or crashing there, leaves the terminal as
// it found it: its guard puts the settings back.
func TestChatTmuxKill9(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		sig  syscall.Signal
		exit string
	}{
		{"kill -9", syscall.SIGKILL, "EXIT=137"},
		{"a crash", syscall.SIGQUIT, "EXIT=2"}, // Go's goroutine dump and exit 2, as an unrecovered panic
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			killedAtPrompt(t, tt.sig, tt.exit)
		})
	}
}

// killedAtPrompt kills agent chat with sig at its prompt, and waits for
// the terminal's settings to be as before.
func killedAtPrompt(t *testing.T, sig syscall.Signal, exit string) {
	e := e2etest.New(t)
	agent, err := exec.LookPath("agent")
	if err != nil {
		t.Fatal(err)
	}
	pidFile, ttyFile := filepath.Join(e.Workspace, "chat.pid"), filepath.Join(e.Workspace, "tty.path")
	line := chatShell(e)
	q := "'" + agent + "' 'chat'"
	if !strings.Contains(line, q) {
		t.Fatalf("no %s in %s", q, line)
	}
	// The chat's pid, as sh execs it; the terminal's path, to read it after.
	line = "tty > " + ttyFile + "; " + strings.Replace(line, q, `sh -c 'echo $$ > `+pidFile+`; exec "$0" chat' '`+agent+`'`, 1)
	// Run by sh, which leaves the terminal as a killed job left it (bash
	// and zsh put it back themselves; a script, ssh or tmux may not).
	script := filepath.Join(e.Workspace, "chat.sh")
	if err := os.WriteFile(script, []byte(line+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	capture, keys := tmuxSession(t, "sh "+script)
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("half a message")
	waitScreen(t, "the typed text", capture, func(s string) bool { return strings.Contains(s, "half a message") })
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	before := readFile(t, filepath.Join(e.Workspace, "stty.before"))
	tty := strings.TrimSpace(readFile(t, ttyFile))
	if raw := sttyOf(t, tty); raw == before {
		t.Fatalf("the chat did not change the terminal's settings at its prompt; the test cannot tell a restore:\n%s", raw)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	waitScreen(t, "the shell after the chat", capture, func(s string) bool { return strings.Contains(s, exit) })
	e2etest.WaitFor(t, "the terminal's settings put back", func() bool { return sttyOf(t, tty) == before })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sttyOf is `stty -a` of the terminal at path.
func sttyOf(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("stty", "-a")
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestChatTmuxCompact: /compact has the next message's run summarise the
// session's earlier messages first (context.compacted, trigger asked);
// that request and the one after carry the summary, not the messages.
func TestChatTmuxCompact(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: "marmalade", Text: "Noted the marmalade."},
		llmtest.Turn{When: "You are compacting the conversation", Text: "SUMMARY: the person likes marmalade."},
		llmtest.Turn{When: "what do I like", Text: "You like marmalade."},
		llmtest.Turn{When: "and again", Text: "Still marmalade."},
	)
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("/compact", "Enter")
	waitScreen(t, "nothing to compact", capture, func(s string) bool { return strings.Contains(s, "nothing to compact") })
	keys("I like marmalade", "Enter")
	waitScreen(t, "the answer", capture, func(s string) bool { return strings.Contains(s, "Noted the marmalade.") })
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("/compact", "Enter")
	waitScreen(t, "the promise", capture, func(s string) bool { return strings.Contains(s, "summarised when your next message starts") })
	keys("what do I like?", "Enter")
	waitScreen(t, "the answer after the summary", capture, func(s string) bool {
		return strings.Contains(s, "compacted the conversation as asked (/compact)") && strings.Contains(s, "You like marmalade.")
	})
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("and again?", "Enter")
	waitScreen(t, "the last answer", capture, func(s string) bool { return strings.Contains(s, "Still marmalade.") })
	reqs := e.Srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4 (a message, the summary, two messages)", len(reqs))
	}
	for _, r := range reqs[2:] {
		if body := string(r.Body); strings.Contains(body, "I like marmalade") || !strings.Contains(body, "SUMMARY: the person likes marmalade.") {
			t.Errorf("a request after /compact carries the compacted message, or not the summary: %s", body)
		}
	}
	leave(t, e, capture, keys)
}

// TestChatTmuxGatewayCommands: the session commands through a gateway: a
// scripted chat's run parks there (exit 6); agent chat --gateway
// --continue shows it waiting and /approve answers it (wait.answer), the
// gateway going on with it; /cost and /sessions read the gateway's
// session; /harness runs a harness in it, on the board; /fork goes on in
// the gateway's copy of the conversation.
func TestChatTmuxGatewayCommands(t *testing.T) {
	t.Parallel()
	turns := append([]llmtest.Turn{
		{When: "run it", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo approved > ran.txt"}`)}},
		{When: "run it", Text: "It ran."},
	}, writeAMD()...)
	turns = append(turns, llmtest.Turn{When: "are you there", Text: "Still here, in the fork."})
	e := e2etest.NewHarness(t, turns...)
	g := e.StartGateway()
	script := e.Command("chat", "--gateway", "--ask", "bash", "--json")
	script.Env = append(script.Env, e.GatewayEnv(g.Addr)...)
	script.Stdin = strings.NewReader("run it\n")
	_ = script.Run()
	if code := script.ProcessState.ExitCode(); code != 6 {
		t.Fatalf("the scripted chat exited %d, want 6: its run waits in the gateway", code)
	}
	line := chatShell(e, "--gateway", "--continue")
	line = strings.Replace(line, " AGENT_HOME=", " AGENT_GATEWAY=http://"+g.Addr+" AGENT_GATEWAY_TOKEN="+e2etest.GwToken+" AGENT_HOME=", 1)
	capture, keys := tmuxSession(t, line)
	waitScreen(t, "the waiting run, then the prompt", capture, func(s string) bool { return strings.Contains(s, "waiting for approval") && atPrompt(s) })
	keys("/approve", "Enter")
	waitScreen(t, "the run going on in the gateway", capture, func(s string) bool { return strings.Contains(s, "It ran.") })
	if b, err := os.ReadFile(filepath.Join(e.Workspace, "ran.txt")); err != nil || string(b) != "approved\n" {
		t.Errorf("the approved call's file: %q, %v", b, err)
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("/cost", "Enter")
	waitScreen(t, "/cost", capture, func(s string) bool { return strings.Contains(s, ": 1 runs,") })
	keys("/sessions", "Enter")
	waitScreen(t, "/sessions", capture, func(s string) bool { return regexp.MustCompile(`(?m)^\* [0-9a-f]{8}  run it`).MatchString(s) })
	keys("/harness write a.md", "Enter")
	s := waitScreen(t, "the board's end", capture, func(s string) bool { return regexp.MustCompile(`done in .* · 1 phase`).MatchString(s) })
	if !regexp.MustCompile(`(?m)^✓ write +completed`).MatchString(s) {
		t.Errorf("the board does not show the phase completed:\n%s", s)
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("/fork", "Enter")
	waitScreen(t, "the fork", capture, func(s string) bool { return strings.Contains(s, "the next message goes there") })
	keys("are you there?", "Enter")
	waitScreen(t, "the fork's answer", capture, func(s string) bool { return strings.Contains(s, "Still here, in the fork.") })
	reqs := e.Srv.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "run it") || !strings.Contains(last, "It ran.") {
		t.Errorf("the fork's request lacks the conversation: %s", last)
	}
	leave(t, e, capture, keys)
}

// TestChatTmuxHarnessOffer: a message of several listed parts gets a
// one-line offer to run it as a harness: no (Enter) sends it as one run,
// yes plans it and runs the phases on the board.
func TestChatTmuxHarnessOffer(t *testing.T) {
	t.Parallel()
	turns := append([]llmtest.Turn{{When: "plain", Text: "Done as one run."}}, writeAMD()...)
	e := e2etest.NewHarness(t, turns...)
	capture, keys := tmuxSession(t, chatShell(e))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "test-model ›") })
	keys("1. plain one", "C-j", "2. plain two", "C-j", "3. plain three", "Enter")
	waitScreen(t, "the offer", capture, func(s string) bool { return strings.Contains(s, "Run this as a harness of verified phases? [y/N]") })
	keys("Enter")
	waitScreen(t, "the one run's answer", capture, func(s string) bool { return strings.Contains(s, "Done as one run.") })
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("1. write a.md", "C-j", "2. check it", "C-j", "3. say so", "Enter")
	waitScreen(t, "the second offer", capture, func(s string) bool { return strings.Count(s, "Run this as a harness") == 2 })
	keys("y", "Enter")
	waitScreen(t, "the plan's question", capture, func(s string) bool { return strings.Contains(s, "Run this plan? [Y/n]") })
	keys("y", "Enter")
	s := waitScreen(t, "the board's end", capture, func(s string) bool { return regexp.MustCompile(`done in .* · 1 phase`).MatchString(s) })
	if !regexp.MustCompile(`(?m)^✓ write +completed`).MatchString(s) {
		t.Errorf("the board does not show the phase completed:\n%s", s)
	}
	if n := len(e.Srv.Requests()); n != 4 {
		t.Errorf("%d model requests, want 4: one run, a planner, a phase of two turns", n)
	}
	leave(t, e, capture, keys)
}

// writeAMD are the model's turns of a harness that writes a.md: a plan of
// one phase, and the phase writing it.
func writeAMD() []llmtest.Turn {
	planArgs := json.RawMessage(`{"objective":"One file","phases":[
		{"id":"write","title":"Write a.md","instructions":"Write a.md.","evidence":{"type":"artifact","artifacts":["a.md"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	return append(turns, e2etest.ForPhase("write", e2etest.WriteTurn("a.md", "A\n"), llmtest.Turn{Text: "a.md written."})...)
}

// leave waits for the chat's prompt, leaves with Ctrl-D and checks the
// chat exited 0 with the terminal as it was.
func leave(t *testing.T, e *e2etest.Env, capture func() string, keys func(...string)) {
	t.Helper()
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("C-d")
	waitScreen(t, "the chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=0") })
	sameTerminal(t, e)
}
