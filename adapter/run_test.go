package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"agent/event"
)

// outcome is everything a caller of Run can observe.
type outcome struct {
	res     *Result
	err     error
	events  []event.Event
	intents []event.EffectIntentData
	elapsed time.Duration
	// stopping is how long Run took to return after the first event the
	// test saw, which is when the cases that stop a child stop it.
	stopping time.Duration
	ctx      context.Context
	dir      string // the fake child's scratch dir
	ws       string // the workspace
	log      string // the stderr log's contents
}

type runCase struct {
	name      string
	behaviour string
	config    func(*Config)                                        // optional tweaks on top of the test defaults
	onEvent   func(e event.Event, cancel context.CancelFunc) error // optional, after the event is recorded
	check     func(t *testing.T, o outcome)
}

var errBoom = errors.New("store is gone")

func TestRun(t *testing.T) {
	t.Parallel()
	cases := []runCase{
		{name: "normal", behaviour: "normal", check: checkNormal},
		{
			name: "reports failure", behaviour: "fail",
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusFailed, 0)
				if o.res.Reason != "max turns reached" || o.res.Output != "gave up" {
					t.Errorf("reason %q, output %q: want the child's", o.res.Reason, o.res.Output)
				}
			},
		},
		{
			// A parked attempt is not a failed one: it goes on later.
			name: "parks", behaviour: "park",
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusWaiting, 0)
				if o.res.Reason != "the run waits" || o.res.Usage.PromptTokens != 10 || len(o.events) != 1 || o.events[0].Type != event.RunWaiting {
					t.Errorf("parked attempt = %+v with events %v", o.res, types(o.events))
				}
			},
		},
		{name: "malformed output", behaviour: "malformed", check: checkMalformed},
		{name: "forged events", behaviour: "forger", check: checkForger},
		{
			// An effect asked for once the attempt is stopping is refused.
			name: "intent while stopping", behaviour: "late-intent",
			config: func(c *Config) {
				c.OnIntent = func(event.EffectIntentData) Control { return Control{Proceed: true} }
			},
			onEvent: func(e event.Event, cancel context.CancelFunc) error {
				if e.Type == event.ToolStarted {
					cancel()
				}
				return nil
			},
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCancelled, 0)
				ack, _ := os.ReadFile(filepath.Join(o.dir, "ack"))
				if string(ack) != "proceed=false reason=the attempt is stopping err=<nil>" {
					t.Errorf("the child's late intent was answered %q, want a refusal", ack)
				}
			},
		},
		{name: "crash", behaviour: "crash", check: checkCrash},
		{
			name: "killed by a signal", behaviour: "sigkill",
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCrashed, -1)
				if !strings.Contains(o.res.Reason, "signal: killed") {
					t.Errorf("reason %q does not say signal: killed", o.res.Reason)
				}
			},
		},
		{
			// Silence is a hang, whether the child is still starting or
			// went quiet: the verdict does not depend on how far it got.
			name: "silence is a hang", behaviour: "silent",
			config: func(c *Config) { c.HeartbeatTimeout, c.Grace = 300*time.Millisecond, 300*time.Millisecond },
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCrashed, -1)
				if !strings.HasPrefix(o.res.Reason, "no output or heartbeat from the runner for 300ms") {
					t.Errorf("reason %q", o.res.Reason)
				}
			},
		},
		{
			// Stopped once it said its grandchildren run, never before.
			name: "a stop kills the whole tree", behaviour: "tree",
			onEvent: cancelAtFirst,
			check:   checkTree,
		},
		{
			// Only heartbeats, for longer than the heartbeat timeout. The
			// timeout is generous: a loaded machine may take seconds to
			// start the child or wake it between beats.
			name: "heartbeats keep a slow child alive", behaviour: "heartbeats",
			config: func(c *Config) { c.HeartbeatTimeout = 3 * time.Second },
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				if o.elapsed < 3*time.Second {
					t.Errorf("took %v: shorter than the heartbeat timeout, proves nothing", o.elapsed)
				}
				if len(o.events) != 0 {
					t.Errorf("heartbeats were forwarded: %v", types(o.events))
				}
			},
		},
		{
			// The verdict only: the child may still be starting when the
			// timeout fires (the next case times the grace period).
			name: "timeout", behaviour: "ignore-term",
			config: func(c *Config) { c.Timeout, c.Grace = 500*time.Millisecond, 300*time.Millisecond },
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusTimeout, -1)
				if o.res.Reason != "phase timed out after 500ms" {
					t.Errorf("reason %q", o.res.Reason)
				}
			},
		},
		{
			// A child that said it ignores SIGTERM is stopped: SIGKILL
			// comes once the grace period is over, not before.
			name: "SIGKILL after the grace period", behaviour: "ignore-term",
			config:  func(c *Config) { c.Grace = 300 * time.Millisecond },
			onEvent: cancelAtFirst,
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCancelled, -1)
				if o.stopping < 300*time.Millisecond {
					t.Errorf("Run returned %v after the stop: SIGKILL came before the grace period", o.stopping)
				}
			},
		},
		{
			name: "ctx cancelled", behaviour: "cancel",
			onEvent: func(e event.Event, cancel context.CancelFunc) error {
				if e.Type == event.ToolStarted {
					cancel() // Ctrl-C once the child is under way
				}
				return nil
			},
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCancelled, 0)
				if o.ctx.Err() == nil {
					t.Error("ctx not cancelled")
				}
				line, _ := os.ReadFile(filepath.Join(o.dir, "control"))
				if !strings.Contains(string(line), `"type":"cancel"`) {
					t.Errorf("child read %q, want a cancel line", line)
				}
			},
		},
		{
			name: "effect intent", behaviour: "intent",
			config: func(c *Config) {
				c.OnIntent = func(in event.EffectIntentData) Control {
					if in.ID == "i2" { // already done in an earlier attempt
						return Control{Receipt: &event.ReceiptData{Type: "email_sent", Key: in.Key}}
					}
					return Control{Proceed: true}
				}
			},
			check: checkIntent,
		},
		{
			// The ack comes only after OnEvent persisted tool.started, and
			// the sync request itself is not forwarded.
			name: "sync", behaviour: "sync",
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				var types, said []string
				for _, e := range o.events {
					types = append(types, e.Type)
					var m event.MessageData
					if e.Type == event.MessageCompleted && e.Decode(&m) == nil {
						said = append(said, m.Text)
					}
				}
				if strings.Join(types, ",") != "tool.started,message.completed" {
					t.Errorf("forwarded %v, want tool.started then the child's report", types)
				}
				if len(said) != 1 || said[0] != "sync type=ack proceed=true err=<nil>" {
					t.Errorf("child got %q", said)
				}
			},
		},
		{
			// A hold is answered on the child's stdin once OnHold has the
			// answer, and only for the open call: one outside a call is
			// refused with a warning. The hold lines are not forwarded.
			name: "hold", behaviour: "hold",
			config: func(c *Config) {
				c.OnHold = func(_ context.Context, waitID string) (event.WaitResolvedData, error) {
					return event.WaitResolvedData{WaitID: waitID, Outcome: event.WaitAnswered, Answer: "yes for " + waitID}, nil
				}
			},
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				var said []string
				for _, e := range o.events {
					var m event.MessageData
					var w event.WarningData
					switch {
					case e.Type == event.Hold:
						t.Error("a hold line was forwarded")
					case e.Type == event.MessageCompleted && e.Decode(&m) == nil:
						said = append(said, m.Text)
					case e.Type == event.Warning && e.Decode(&w) == nil:
						said = append(said, "warning: "+w.Message)
					}
				}
				want := []string{
					"warning: ignored a hold from the runner for wait w-outside: no open tool call of this runner asked for it",
					`outside proceed=false answer="" reason="no open tool call of this runner asked for it" err=<nil>`,
					`inside proceed=true answer="yes for w-inside" reason="" err=<nil>`,
				}
				if strings.Join(said, "\n") != strings.Join(want, "\n") {
					t.Errorf("the child said:\n%s\nwant:\n%s", strings.Join(said, "\n"), strings.Join(want, "\n"))
				}
			},
		},
		{
			name: "OnEvent error stops the child", behaviour: "chatty",
			onEvent: func(event.Event, context.CancelFunc) error { return errBoom },
			check: func(t *testing.T, o outcome) {
				if !errors.Is(o.err, errBoom) {
					t.Fatalf("Run error = %v, want %v", o.err, errBoom)
				}
				if o.res == nil || o.res.Status != event.StatusCancelled || o.res.ExitCode != -1 {
					t.Fatalf("result %+v, want cancelled and killed", o.res)
				}
				if len(o.events) != 1 {
					t.Errorf("OnEvent called %d times after failing", len(o.events)-1)
				}
				// SIGTERM at once: not after the grace period (a minute
				// here), nor the timeout.
				if o.stopping > patience/2 {
					t.Errorf("took %v to stop", o.stopping)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, runFake(t, tc))
		})
	}
}

func runFake(t *testing.T, tc runCase) outcome {
	t.Helper()
	o := outcome{dir: t.TempDir(), ws: t.TempDir()}
	logPath := filepath.Join(o.ws, ".agent", "runs", "run-1", "logs", "gather-2.log")
	spec := PhaseSpec{RunID: "run-1", SessionID: "sess-1", PhaseID: "gather", Attempt: 2,
		Workspace: o.ws, Mode: ModePhase, Prompt: "find the sources"}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o.ctx = ctx
	var first time.Time
	// Generous bounds: a case that is about one of them sets it, and
	// waits for the child's word before it relies on it.
	cfg := Config{
		Env:              childEnv(envBehaviour+"="+tc.behaviour, envDir+"="+o.dir),
		LogPath:          logPath,
		Timeout:          5 * patience,
		Grace:            patience,
		HeartbeatTimeout: patience,
		OnEvent: func(e event.Event) error {
			if first.IsZero() {
				first = time.Now()
			}
			o.events = append(o.events, e)
			if tc.onEvent != nil {
				return tc.onEvent(e, cancel)
			}
			return nil
		},
	}
	if tc.config != nil {
		tc.config(&cfg)
	}
	if onIntent := cfg.OnIntent; onIntent != nil {
		cfg.OnIntent = func(in event.EffectIntentData) Control {
			o.intents = append(o.intents, in)
			return onIntent(in)
		}
	}
	start := time.Now()
	o.res, o.err = Run(ctx, cfg, spec)
	o.elapsed = time.Since(start)
	if !first.IsZero() {
		o.stopping = time.Since(first)
	}
	if o.err != nil && !errors.Is(o.err, errBoom) {
		t.Fatalf("Run: %v", o.err)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("stderr log: %v", err)
	}
	o.log = string(log)
	return o
}

// patience bounds every wait for something a child or the parent does:
// long, since a loaded machine may take seconds to start or wake a
// process, and only a failing test waits it out.
const patience = time.Minute

// cancelAtFirst stops the attempt (as Ctrl-C does) once the child has
// said it is ready, with its first event.
func cancelAtFirst(_ event.Event, cancel context.CancelFunc) error {
	cancel()
	return nil
}

// childEnv is the fake child's environment. A -race binary sleeps 1s at
// exit by default, which would outlast the short heartbeat timeouts here.
func childEnv(vars ...string) []string {
	return append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), vars...)
}

func wantStatus(t *testing.T, o outcome, status string, exitCode int) {
	t.Helper()
	if o.res.Status != status || o.res.ExitCode != exitCode {
		t.Fatalf("status %q exit %d (reason %q), want %q exit %d", o.res.Status, o.res.ExitCode, o.res.Reason, status, exitCode)
	}
}

func types(events []event.Event) []string {
	var ts []string
	for _, e := range events {
		ts = append(ts, e.Type)
	}
	return ts
}

func checkNormal(t *testing.T, o outcome) {
	wantStatus(t, o, event.StatusCompleted, 0)
	r := o.res
	if r.Output != "all done" || r.Reason != "" || r.Turns != 3 || r.Usage != (event.Usage{PromptTokens: 100, CompletionTokens: 20}) || r.Warnings != 0 {
		t.Errorf("result %+v", r)
	}
	if r.Report == nil || r.Report.Status != "completed" || r.Report.Output != "all done" {
		t.Errorf("report %+v, want the runner.result as sent", r.Report)
	}
	// Artifacts are as the parent found them on disk, not as the child said.
	var arts []string
	for _, e := range o.events {
		var d event.ArtifactData
		if e.Type == event.ArtifactCreated && e.Decode(&d) == nil {
			arts = append(arts, fmt.Sprintf("%s %d %s", d.Path, d.Bytes, d.SHA256[:8]))
		}
	}
	if want := []string{"a.md 1 6b86b273", "b.md 2 3b64db95", "a.md 3 556d7dc3"}; !reflect.DeepEqual(arts, want) {
		t.Errorf("artifacts %q, want %q", arts, want)
	}

	wantTypes := []string{event.MessageCompleted, event.ToolStarted, event.ToolCompleted, event.ArtifactCreated,
		event.ToolStarted, event.ToolCompleted, event.ArtifactCreated, event.ToolStarted, event.ToolCompleted, event.ArtifactCreated,
		event.LearningRecorded, event.ApproachFailed, event.ToolStarted, event.ReceiptRecorded, event.ToolCompleted}
	if got := types(o.events); !reflect.DeepEqual(got, wantTypes) {
		t.Fatalf("forwarded %q,\nwant %q", got, wantTypes)
	}
	for _, e := range o.events {
		if e.RunID != "run-1" || e.SessionID != "sess-1" || e.PhaseID != "gather" || e.Attempt != 2 || e.Seq != 0 || e.V != 1 {
			t.Errorf("%s not stamped from the spec: %+v", e.Type, e)
		}
	}
	var first event.MessageData
	if err := o.events[0].Decode(&first); err != nil {
		t.Fatal(err)
	}
	// The spec reached the child, which ran in the workspace and was told
	// to beat four times per heartbeat timeout.
	if want := fmt.Sprintf("prompt=find the sources cwd=%s heartbeat_ms=%d", o.ws, patience/4/time.Millisecond); first.Text != want {
		t.Errorf("child echoed %q, want %q", first.Text, want)
	}
	if !strings.Contains(o.log, "runner log: starting") {
		t.Errorf("stderr log %q", o.log)
	}
}

func checkMalformed(t *testing.T, o outcome) {
	wantStatus(t, o, event.StatusCompleted, 0)
	if o.res.Warnings != 3 {
		t.Errorf("warnings = %d, want 3", o.res.Warnings)
	}
	want := []string{event.ToolStarted, event.Warning, event.Warning, event.Warning, event.MessageCompleted}
	if got := types(o.events); !reflect.DeepEqual(got, want) {
		t.Fatalf("forwarded %q, want %q", got, want)
	}
	for i, wantMsg := range []string{"runner output line 2: invalid character", "runner output line 3: missing type", "runner output line 4: event line too long"} {
		var w event.WarningData
		if err := o.events[i+1].Decode(&w); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(w.Message, wantMsg) || len(w.Message) > 400 {
			t.Errorf("warning %q, want a short message starting %q", w.Message, wantMsg)
		}
	}
}

func checkCrash(t *testing.T, o outcome) {
	wantStatus(t, o, event.StatusCrashed, 3)
	const prefix = "runner exited with status 3 without a result: "
	reason := o.res.Reason
	if !strings.HasPrefix(reason, prefix) || !strings.HasSuffix(reason, "noise line 199\npanic: boom") {
		t.Fatalf("reason %q", reason)
	}
	tail := strings.TrimPrefix(reason, prefix)
	if len(tail) > stderrTail || len(tail) < stderrTail/2 {
		t.Errorf("stderr tail is %d bytes, want about %d", len(tail), stderrTail)
	}
	if first := strings.SplitN(tail, "\n", 2)[0]; !strings.HasPrefix(first, "noise line ") || len(first) != len("noise line 000") {
		t.Errorf("tail starts mid-line: %q", first)
	}
	if !strings.Contains(o.log, "noise line 000\n") || !strings.Contains(o.log, "panic: boom") {
		t.Errorf("the log lost stderr: %d bytes", len(o.log))
	}
}

// checkTree: the child, stopped, took both grandchildren with it, the
// one in a process group of its own too, though both ignore SIGTERM and
// hold its stdout.
func checkTree(t *testing.T, o outcome) {
	wantStatus(t, o, event.StatusCancelled, -1)
	raw, err := os.ReadFile(filepath.Join(o.dir, "pids"))
	if err != nil {
		t.Fatalf("the child never started its grandchildren: %v", err)
	}
	for _, f := range strings.Fields(string(raw)) {
		pid, _ := strconv.Atoi(f)
		deadline := time.Now().Add(patience)
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Errorf("grandchild %d still running", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// processGone reports whether pid has exited; a zombie left for init to
// reap counts as gone.
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

func checkIntent(t *testing.T, o outcome) {
	wantStatus(t, o, event.StatusCompleted, 0)
	if len(o.intents) != 2 || o.intents[0].ID != "i1" || o.intents[0].Tool != "send_email" || o.intents[1].Key != "key-i2" {
		t.Errorf("OnIntent saw %+v", o.intents)
	}
	var said []string
	for _, e := range o.events {
		if e.Type == event.EffectIntent {
			t.Errorf("effect.intent was forwarded")
		}
		var m event.MessageData
		if e.Type == event.MessageCompleted && e.Decode(&m) == nil {
			said = append(said, m.Text)
		}
	}
	want := []string{"i1 type=ack proceed=true receipt= err=<nil>", "i2 type=ack proceed=false receipt=key-i2 err=<nil>"}
	if !reflect.DeepEqual(said, want) {
		t.Errorf("child got %q,\nwant %q", said, want)
	}
}

func TestRunRefusesWhatCannotStart(t *testing.T) {
	t.Parallel()
	good := PhaseSpec{RunID: "r", PhaseID: "p", Attempt: 1, Workspace: t.TempDir(), Mode: ModePhase}

	bad := good
	bad.Attempt = 0
	var se *SpecError
	if _, err := Run(context.Background(), Config{}, bad); !errors.As(err, &se) || se.Field != "attempt" {
		t.Errorf("invalid spec: %v, want a SpecError on attempt", err)
	}

	if _, err := Run(context.Background(), Config{Exe: "/nonexistent/agent"}, good); err == nil || !strings.Contains(err.Error(), "start runner") {
		t.Errorf("missing binary: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Config{}, good); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before start: %v", err)
	}
}

func TestRunAppendsToTheLog(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	logPath := filepath.Join(ws, "logs", "p-1.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("earlier attempt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Env: childEnv(envBehaviour + "=crash"), LogPath: logPath}
	res, err := Run(context.Background(), cfg, PhaseSpec{RunID: "r", PhaseID: "p", Attempt: 1, Workspace: ws, Mode: ModePhase})
	if err != nil || res.Status != event.StatusCrashed {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.HasPrefix(string(log), "earlier attempt\nnoise line 000\n") {
		t.Errorf("log starts %q", log[:min(len(log), 60)])
	}
}

// checkForger: nothing a child cannot prove reaches the parent's journal,
// and each thing dropped is said once, as a warning.
func checkForger(t *testing.T, o outcome) {
	wantStatus(t, o, event.StatusFailed, 0)
	if o.res.Output != "honest" || o.res.Report == nil || o.res.Report.Status != event.StatusFailed {
		t.Errorf("result %+v (report %+v), want the well-formed one", o.res, o.res.Report)
	}
	var warnings []string
	for _, e := range o.events {
		if e.Type != event.Warning {
			t.Errorf("forwarded a forged %s", e.Type)
			continue
		}
		var w event.WarningData
		_ = e.Decode(&w)
		warnings = append(warnings, w.Message)
	}
	want := []string{
		"ignored a phase.completed event from the runner: only the parent records those",
		"ignored a verification.completed event from the runner: only the parent records those",
		"ignored a run.completed event from the runner: only the parent records those",
		`ignored a receipt.recorded from the runner for "never-asked": this attempt holds no go-ahead for that effect`,
		`ignored a effect.failed from the runner for "never-asked": this attempt holds no go-ahead for that effect`,
		`ignored the runner's artifact.created for "missing.md": no such file in the workspace`,
		`ignored the runner's artifact.created for "../outside.md"`,
		`ignored the runner's artifact.created for "dir": not a regular file`,
		`runner sent a malformed runner.result`,
	}
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", warnings, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(warnings[i], want[i]) {
			t.Errorf("warning %d = %q, want it to start %q", i, warnings[i], want[i])
		}
	}
}
