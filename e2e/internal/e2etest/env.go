package e2etest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/store"
)

// Env runs the real agent binary (built by Main and first in PATH) as
// separate processes against a scripted fake model.
type Env struct {
	T         *testing.T
	Home      string // AGENT_HOME
	Workspace string // the commands' working directory
	Srv       *llmtest.Server
}

// New makes a fresh AGENT_HOME and workspace in the test's temp dir and
// starts a fake model serving turns.
func New(t *testing.T, turns ...llmtest.Turn) *Env {
	t.Helper()
	dir := t.TempDir()
	e := &Env{
		T:         t,
		Home:      filepath.Join(dir, "home"),
		Workspace: filepath.Join(dir, "ws"),
		Srv:       llmtest.NewServer(t, llmtest.Script{Turns: turns}),
	}
	if err := os.MkdirAll(e.Workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// Command is `agent ARGS` in the workspace, against the fake model.
func (e *Env) Command(args ...string) *exec.Cmd {
	cmd := exec.Command("agent", args...)
	cmd.Dir = e.Workspace
	cmd.Env = append(os.Environ(),
		"AGENT_HOME="+e.Home,
		"OPENAI_BASE_URL="+e.Srv.URL(),
		"OPENAI_API_KEY=",
		"AGENT_MODEL=test-model",
	)
	return cmd
}

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// RunWith runs agent with extra environment variables and times it.
func (e *Env) RunWith(extra []string, args ...string) (Result, time.Duration) {
	e.T.Helper()
	cmd := e.Command(args...)
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
		e.T.Fatalf("agent %v: %v", args, err)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}, took
}

// Run runs agent and waits for it.
func (e *Env) Run(args ...string) Result {
	e.T.Helper()
	r, _ := e.RunWith(nil, args...)
	return r
}

// Background is an agent process whose --json events are read as they come.
type Background struct {
	Cmd    *exec.Cmd
	Mu     sync.Mutex
	Events []event.Event
	Stderr bytes.Buffer
	Done   chan struct{}
}

// Start starts agent in the background.
func (e *Env) Start(args ...string) *Background {
	e.T.Helper()
	return e.StartWith(nil, args...)
}

// StartWith is Start with the environment adjusted by env.
func (e *Env) StartWith(env func([]string) []string, args ...string) *Background {
	e.T.Helper()
	cmd := e.Command(args...)
	if env != nil {
		cmd.Env = env(cmd.Env)
	}
	b := &Background{Cmd: cmd, Done: make(chan struct{})}
	cmd.Stderr = &b.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.T.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	go func() {
		defer close(b.Done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, event.MaxLine)
		for sc.Scan() {
			var ev event.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				b.Mu.Lock()
				b.Events = append(b.Events, ev)
				b.Mu.Unlock()
			}
		}
	}()
	e.T.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-b.Done
		_ = cmd.Wait()
	})
	return b
}

// Patience bounds a wait for what should happen: long, as a loaded
// machine may take many times longer than a quiet one to start a process
// or answer, and only a failing test waits it out.
const Patience = gatewaytest.Patience

// WaitEvent waits until an event of type typ has been printed.
func (b *Background) WaitEvent(t *testing.T, typ string) event.Event {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for time.Now().Before(deadline) {
		b.Mu.Lock()
		for _, ev := range b.Events {
			if ev.Type == typ {
				b.Mu.Unlock()
				return ev
			}
		}
		b.Mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s event within %s; stderr: %s", typ, Patience, b.Stderr.String())
	return event.Event{}
}

// Kill9 kills the process the hard way and waits for it to be gone.
func (b *Background) Kill9(t *testing.T) {
	t.Helper()
	if err := b.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.Done
	_ = b.Cmd.Wait()
}

// WaitFor waits up to Patience for cond to hold, checking every 10 ms.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ToolCall is a tool call of the fake model, its arguments as JSON.
func ToolCall(name, args string) llmtest.Call {
	return llmtest.Call{Name: name, Arguments: json.RawMessage(args)}
}

// DecodeEvents parses a --json stdout and checks the stream contract: only
// JSON lines, v 1, one run id, seq strictly increasing, a terminal last line.
func DecodeEvents(t *testing.T, stdout string) []event.Event {
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
	// A drive that parks ends with the run's run.waiting instead.
	if len(evs) == 0 || !event.IsTerminal(evs[len(evs)-1].Type) && evs[len(evs)-1].Type != event.RunWaiting {
		t.Fatalf("stream does not end with a terminal event:\n%s", stdout)
	}
	return evs
}

// LastFinished is the data of a stream's terminal event.
func LastFinished(t *testing.T, evs []event.Event) event.RunFinishedData {
	t.Helper()
	var d event.RunFinishedData
	if err := evs[len(evs)-1].Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// CountLines counts the lines of a file.
func CountLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// EqualJSON reports whether a and b marshal to the same JSON.
func EqualJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return bytes.Equal(x, y)
}

// OpenStore opens the store the test's agent processes use.
func (e *Env) OpenStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(e.Home, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// DecodeRunID reads the run id from the first event of a --json stream.
func DecodeRunID(t *testing.T, stdout string) string {
	t.Helper()
	line, _, _ := strings.Cut(stdout, "\n")
	var e event.Event
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.RunID == "" {
		t.Fatalf("no run id in %q: %v", line, err)
	}
	return e.RunID
}
