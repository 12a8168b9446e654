package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

// e2e runs the real agent binary (the test binary, installed in PATH by
// TestMain) as separate processes against a scripted fake model.
type e2e struct {
	t         *testing.T
	home      string
	workspace string
	srv       *llmtest.Server
}

func newE2E(t *testing.T, turns ...llmtest.Turn) *e2e {
	t.Helper()
	dir := t.TempDir()
	e := &e2e{
		t:         t,
		home:      filepath.Join(dir, "home"),
		workspace: filepath.Join(dir, "ws"),
		srv:       llmtest.NewServer(t, llmtest.Script{Turns: turns}),
	}
	if err := os.MkdirAll(e.workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *e2e) command(args ...string) *exec.Cmd {
	cmd := exec.Command("agent", args...)
	cmd.Dir = e.workspace
	cmd.Env = append(os.Environ(),
		"AGENT_HOME="+e.home,
		"OPENAI_BASE_URL="+e.srv.URL(),
		"OPENAI_API_KEY=",
		"AGENT_MODEL=test-model",
	)
	return cmd
}

// result of a finished command.
type result struct {
	stdout, stderr string
	code           int
}

// runWith runs agent with extra environment variables and times it.
func (e *e2e) runWith(extra []string, args ...string) (result, time.Duration) {
	e.t.Helper()
	cmd := e.command(args...)
	cmd.Env = append(cmd.Env, extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		e.t.Fatalf("agent %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}, took
}

func (e *e2e) run(args ...string) result {
	e.t.Helper()
	r, _ := e.runWith(nil, args...)
	return r
}

// background is an agent process whose --json events are read as they come.
type background struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	events []event.Event
	stderr bytes.Buffer
	done   chan struct{}
}

func (e *e2e) start(args ...string) *background {
	e.t.Helper()
	return e.startWith(nil, args...)
}

// startWith is start with the environment adjusted by env.
func (e *e2e) startWith(env func([]string) []string, args ...string) *background {
	e.t.Helper()
	cmd := e.command(args...)
	if env != nil {
		cmd.Env = env(cmd.Env)
	}
	b := &background{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &b.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, event.MaxLine)
		for sc.Scan() {
			var ev event.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				b.mu.Lock()
				b.events = append(b.events, ev)
				b.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-b.done
		_ = cmd.Wait()
	})
	return b
}

// waitEvent waits until an event of type typ has been printed.
func (b *background) waitEvent(t *testing.T, typ string) event.Event {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		for _, ev := range b.events {
			if ev.Type == typ {
				b.mu.Unlock()
				return ev
			}
		}
		b.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s event within 15s; stderr: %s", typ, b.stderr.String())
	return event.Event{}
}

// kill9 kills the process the hard way and waits for it to be gone.
func (b *background) kill9(t *testing.T) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.done
	_ = b.cmd.Wait()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func call(name, args string) llmtest.Call {
	return llmtest.Call{Name: name, Arguments: json.RawMessage(args)}
}

// decodeEvents parses a --json stdout and checks the stream contract: only
// JSON lines, v 1, one run id, seq strictly increasing, a terminal last line.
func decodeEvents(t *testing.T, stdout string) []event.Event {
	t.Helper()
	var evs []event.Event
	dec := event.NewDecoder(strings.NewReader(stdout))
	for {
		ev, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stdout is not a pure event stream: %v", err)
		}
		if ev.V != 1 || ev.RunID == "" || ev.TS.IsZero() {
			t.Fatalf("bad envelope: %+v", ev)
		}
		if n := len(evs); n > 0 && (ev.Seq <= evs[n-1].Seq || ev.RunID != evs[n-1].RunID) {
			t.Fatalf("seq %d after %d (run %s after %s)", ev.Seq, evs[n-1].Seq, ev.RunID, evs[n-1].RunID)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 || !event.IsTerminal(evs[len(evs)-1].Type) {
		t.Fatalf("stream does not end with a terminal event:\n%s", stdout)
	}
	return evs
}

func lastFinished(t *testing.T, evs []event.Event) event.RunFinishedData {
	t.Helper()
	var d event.RunFinishedData
	if err := evs[len(evs)-1].Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestCrashDuringToolThenResume kills the agent with SIGKILL while a bash
// call runs. Resume must not repeat the finished call, must not re-run the
// interrupted non-read-only call, must tell the model, and must finish.
func TestCrashDuringToolThenResume(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("bash", `{"command":"echo ran >> count.txt"}`)}},
		llmtest.Turn{Text: "Now the long step.", ToolCalls: []llmtest.Call{call("bash", `{"command":"`+markThenSleep+`"}`)}},
		llmtest.Turn{Text: "The long step was interrupted; the count is right, so I am done."},
	)
	b := e.start("run", "--json", "count, then wait")
	runID := b.waitEvent(t, event.RunStarted).RunID
	started := filepath.Join(e.workspace, "started")
	waitFor(t, "the second bash call to start", func() bool {
		data, err := os.ReadFile(started)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	bash, _ := waitSandboxed(t, e.workspace)
	b.kill9(t)
	// The sandboxed command dies with the process that ran it.
	waitFor(t, "the bash call to die with agent", func() bool { return !alive(bash) })

	res := e.run("resume", runID, "--json")
	if res.code != 0 {
		t.Fatalf("resume exit %d: %s", res.code, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	if evs[0].Type != event.RunStarted || evs[0].Seq <= 1 {
		t.Errorf("resumed stream starts with %s seq %d; want run.started continuing the run's seq", evs[0].Type, evs[0].Seq)
	}
	if fin := lastFinished(t, evs); fin.Status != "completed" || fin.Turns != 3 {
		t.Errorf("final = %+v, want completed after 3 turns in all", fin)
	}
	if n := countLines(t, filepath.Join(e.workspace, "count.txt")); n != 1 {
		t.Errorf("count.txt has %d lines: the finished bash call ran again", n)
	}
	for _, ev := range evs {
		if ev.Type == event.ToolStarted {
			t.Errorf("resume ran a tool: %s", ev.Data)
		}
	}

	// The model was asked once more, with the interrupted result in place.
	reqs := e.srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model got %d requests, want 3", len(reqs))
	}
	last := reqs[2].LastMessage()
	if last.Role != "tool" || !strings.HasPrefix(last.Content, "interrupted:") {
		t.Errorf("last message of the resumed request = %+v, want an interrupted tool result", last)
	}

	// The stored transcript is whole.
	show := e.run("runs", "show", runID, "--json")
	var v runView
	if err := json.Unmarshal([]byte(show.stdout), &v); err != nil {
		t.Fatalf("runs show --json: %v\n%s", err, show.stdout)
	}
	var roles []string
	for _, m := range v.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,assistant,tool,assistant" {
		t.Errorf("transcript roles = %s", got)
	}
	if v.Status != "completed" || v.Turns != 3 {
		t.Errorf("stored run: status %s turns %d", v.Status, v.Turns)
	}
}

// TestCrashDuringModelCallThenResume kills the agent while the model is
// streaming. Resume asks the model again with the same conversation.
func TestCrashDuringModelCallThenResume(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"a.txt","content":"a"}`)}},
		llmtest.Turn{Text: "I am thinking about", Hang: true},
		llmtest.Turn{Text: "Done."},
	)
	b := e.start("run", "--json", "write a")
	runID := b.waitEvent(t, event.RunStarted).RunID
	b.waitEvent(t, event.ToolCompleted)
	waitFor(t, "the second model call", func() bool { return e.srv.RequestCount() == 2 })
	b.kill9(t)

	res := e.run("resume", runID, "--json")
	if res.code != 0 {
		t.Fatalf("resume exit %d: %s", res.code, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	if fin := lastFinished(t, evs); fin.Result != "Done." {
		t.Errorf("result = %q", fin.Result)
	}
	reqs := e.srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model got %d requests, want 3", len(reqs))
	}
	before, after := reqs[1].Messages(), reqs[2].Messages()
	if !equalJSON(t, before, after) {
		t.Errorf("resumed request differs from the interrupted one:\n%+v\n%+v", before, after)
	}
	for _, ev := range evs {
		if ev.Type == event.ToolStarted {
			t.Errorf("resume ran a tool again: %s", ev.Data)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return bytes.Equal(x, y)
}

// TestLeaseAndInterrupt: a second process cannot drive a live run (exit 4,
// naming the holder); Ctrl-C saves the run as interrupted (exit 130); resume
// then finishes it.
func TestLeaseAndInterrupt(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{Text: "Let me think", Hang: true},
		llmtest.Turn{Text: "Finished after the interruption."},
	)
	b := e.start("run", "--json", "think hard")
	runID := b.waitEvent(t, event.RunStarted).RunID
	waitFor(t, "the model call", func() bool { return e.srv.RequestCount() == 1 })

	busy := e.run("resume", runID[:8])
	if busy.code != 4 {
		t.Fatalf("resume of a live run: exit %d, want 4; stderr: %s", busy.code, busy.stderr)
	}
	holder := "/" + strconv.Itoa(b.cmd.Process.Pid) + "/"
	if !strings.Contains(busy.stderr, "lease held by") || !strings.Contains(busy.stderr, holder) {
		t.Errorf("busy message does not name the holder %q: %s", holder, busy.stderr)
	}
	if strings.Count(strings.TrimSpace(busy.stderr), "\n") != 0 {
		t.Errorf("busy message is not one line: %q", busy.stderr)
	}

	if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-b.done
	err := b.cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130", err)
	}
	if ev := b.waitEvent(t, event.RunInterrupted); ev.RunID != runID {
		t.Errorf("interrupted event for run %s", ev.RunID)
	}

	res := e.run("resume", runID, "--json")
	if res.code != 0 {
		t.Fatalf("resume exit %d: %s", res.code, res.stderr)
	}
	if fin := lastFinished(t, decodeEvents(t, res.stdout)); fin.Result != "Finished after the interruption." {
		t.Errorf("result = %q", fin.Result)
	}
	again := e.run("resume", runID)
	if again.code != 4 || !strings.Contains(again.stderr, "already completed") {
		t.Errorf("resume of a completed run: exit %d %q, want 4 'already completed'", again.code, again.stderr)
	}
}

// TestExampleCassette runs the README's offline example: the shipped
// cassette replays against a fresh workspace with no key and no network.
func TestExampleCassette(t *testing.T) {
	t.Parallel()
	prompt, err := os.ReadFile("examples/hello.prompt")
	if err != nil {
		t.Fatal(err)
	}
	cassette, err := filepath.Abs("examples/hello.cassette.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	e := newE2E(t)
	cmd := e.command("run", "--json", "--replay", cassette, strings.TrimSpace(string(prompt)))
	cmd.Env = append(cmd.Env, "OPENAI_BASE_URL=https://api.openai.com/v1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("example run: %v (if prompts or tools changed, re-record with scripts/record-example.sh)", err)
	}
	if fin := lastFinished(t, decodeEvents(t, string(out))); fin.Status != "completed" || fin.Turns != 3 {
		t.Errorf("final = %+v", fin)
	}
	got, err := os.ReadFile(filepath.Join(e.workspace, "hello.txt"))
	if err != nil || !strings.HasPrefix(string(got), "Hello from agent!") {
		t.Errorf("hello.txt = %q, %v", got, err)
	}
	if e.srv.RequestCount() != 0 {
		t.Errorf("replay made %d model requests", e.srv.RequestCount())
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	res := newE2E(t).run("version")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "agent ") || !strings.Contains(res.stdout, "(commit ") {
		t.Errorf("version: exit %d %q", res.code, res.stdout)
	}
}

// TestEventsFollow: `runs events --follow` on a live run prints events as
// they are persisted and stops after the run's last event.
func TestEventsFollow(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("bash", `{"command":"sleep 0.3"}`)}},
		llmtest.Turn{Text: "slowly done", ChunkDelayMS: 100},
	)
	b := e.start("run", "--json", "go slowly")
	runID := b.waitEvent(t, event.RunStarted).RunID
	res := e.run("runs", "events", runID, "--follow", "--json")
	if res.code != 0 {
		t.Fatalf("follow: exit %d %s", res.code, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	if evs[0].Seq != 1 || evs[len(evs)-1].Type != event.RunCompleted {
		t.Errorf("follow printed seq %d..%s", evs[0].Seq, evs[len(evs)-1].Type)
	}
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.events) != len(evs) {
		t.Errorf("follow printed %d events, the run printed %d", len(evs), len(b.events))
	}
}

// TestKill9KeepsWhatWasPrinted: kill -9 while the model thinks, after
// --json printed the write's artifact.created and the streamed start of
// the reply. Every event printed but a delta is in the store with the same
// seq, and no seq printed (a delta's included) is given to another event
// after resume.
func TestKill9KeepsWhatWasPrinted(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{Text: "Writing.", ToolCalls: []llmtest.Call{call("write_file", `{"path":"a.txt","content":"a"}`)}},
		llmtest.Turn{Text: "I am thinking about", Hang: true},
		llmtest.Turn{Text: "Done."},
	)
	b := e.start("run", "--json", "write a")
	runID := b.waitEvent(t, event.RunStarted).RunID
	waitFor(t, "a streamed delta of the second reply", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		last := b.events[len(b.events)-1]
		return e.srv.RequestCount() == 2 && last.Type == event.MessageDelta
	})
	b.kill9(t)
	b.mu.Lock()
	printed := append([]event.Event(nil), b.events...)
	b.mu.Unlock()

	db := e.openStore(t)
	stored, err := db.ListEvents(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[int64]string{}
	for _, s := range stored {
		bySeq[s.Seq] = s.Type
	}
	for _, p := range printed {
		if p.Type != event.MessageDelta && bySeq[p.Seq] != p.Type {
			t.Errorf("printed %s as seq %d, but the store has %q there", p.Type, p.Seq, bySeq[p.Seq])
		}
	}
	db.Close()
	if res := e.run("resume", runID, "--json"); res.code != 0 {
		t.Fatalf("resume exit %d: %s", res.code, res.stderr)
	}
	db = e.openStore(t)
	defer db.Close()
	stored, _ = db.ListEvents(context.Background(), runID, 0, 0)
	for _, s := range stored {
		bySeq[s.Seq] = s.Type
	}
	for _, p := range printed {
		if got, ok := bySeq[p.Seq]; ok && got != p.Type {
			t.Errorf("seq %d was printed as %s, then given to %s", p.Seq, p.Type, got)
		}
	}
}

// openStore opens the store the test's agent processes use.
func (e *e2e) openStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(e.home, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestDiskFull: the store's disk fills up mid-run. The run stops with exit
// 5 and one line that says so and that it can be resumed, before the write
// whose call could not be recorded runs; once space is freed, resume asks
// the model again (its lost reply was in flight) and finishes, and the
// run's stored seqs have no gap where the failed write was.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs for AGENT_HOME")
	}
	content := strings.Repeat("a line of the big file\n", (400<<10)/23)
	e := newE2E(t, writeTurn("big.txt", content), writeTurn("big.txt", content), llmtest.Turn{Text: "Wrote it."})
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", e.home).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", e.home).Run() })
	if res := e.run("runs", "list"); res.code != 0 {
		t.Fatalf("create the store: %d %s", res.code, res.stderr)
	}
	// Leave about 150 KB: the write's tool.started alone is 400 KB.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(e.home, &fs); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(e.home, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(fs.Bavail)*fs.Bsize-150<<10), 0o600); err != nil {
		t.Fatal(err)
	}

	res := e.run("run", "--json", "write a big file")
	if res.code != 5 || !strings.Contains(res.stderr, "the disk is full") || !strings.Contains(res.stderr, "'agent resume ") ||
		strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
		t.Fatalf("disk full: exit %d %q, want 5 and one line saying so and how to resume", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "big.txt")); err == nil {
		t.Error("the write ran though its tool.started was never recorded")
	}
	runID := decodeRunID(t, res.stdout)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if res := e.run("resume", runID); res.code != 0 {
		t.Fatalf("resume after freeing space: exit %d %s", res.code, res.stderr)
	}
	if data, err := os.ReadFile(filepath.Join(e.workspace, "big.txt")); err != nil || len(data) != len(content) {
		t.Errorf("big.txt after resume: %d bytes, %v", len(data), err)
	}
	stored := gaplessEvents(t, e, runID)
	if last := stored[len(stored)-1]; last.Type != event.RunCompleted {
		t.Errorf("the run ended %s %s, want run.completed", last.Type, last.Data)
	}
}

// decodeRunID reads the run id from the first event of a --json stream.
func decodeRunID(t *testing.T, stdout string) string {
	t.Helper()
	line, _, _ := strings.Cut(stdout, "\n")
	var e event.Event
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.RunID == "" {
		t.Fatalf("no run id in %q: %v", line, err)
	}
	return e.RunID
}
