package adapter

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"agent/event"
)

// What anything that can write to a child's stdout could print, next to
// what the child itself does: the parent takes an intent only from the
// child's open tool call, an outcome only once per go-ahead while that
// call is open, and a result only from a child that then exits 0.

// steps runs the "effects" fake child through the given steps, letting
// every intent OnIntent sees go ahead.
func steps(list ...string) func(*Config) {
	return func(c *Config) {
		c.Env = append(c.Env, "ADAPTER_FAKE_STEPS="+strings.Join(list, ","))
		c.OnIntent = func(event.EffectIntentData) Control { return Control{Proceed: true} }
	}
}

// said is what the child said in message.completed events: how its
// intents were answered.
func said(o outcome) []string {
	var out []string
	for _, e := range o.events {
		var m event.MessageData
		if e.Type == event.MessageCompleted && e.Decode(&m) == nil {
			out = append(out, m.Text)
		}
	}
	return out
}

func warnings(o outcome) []string {
	var out []string
	for _, e := range o.events {
		var w event.WarningData
		if e.Type == event.Warning && e.Decode(&w) == nil {
			out = append(out, w.Message)
		}
	}
	return out
}

// outcomes are the effect outcomes forwarded, as "type key details".
func outcomes(o outcome) []string {
	var out []string
	for _, e := range o.events {
		switch e.Type {
		case event.ReceiptRecorded, event.EffectFailed, event.EffectUnknown:
			var d event.ReceiptData
			_ = e.Decode(&d)
			out = append(out, strings.TrimSpace(e.Type+" "+d.Key+" "+string(d.Details)))
		}
	}
	return out
}

func intentKeys(o outcome) []string {
	var keys []string
	for _, in := range o.intents {
		keys = append(keys, in.Key)
	}
	return keys
}

// wantWarnings checks each warning starts as the one listed.
func wantWarnings(t *testing.T, o outcome, want ...string) {
	t.Helper()
	got := warnings(o)
	if len(got) != len(want) {
		t.Fatalf("warnings %q, want %d: %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
}

func wantOutcomes(t *testing.T, o outcome, want ...string) {
	t.Helper()
	if got := outcomes(o); !reflect.DeepEqual(got, want) {
		t.Errorf("forwarded outcomes %q, want %q", got, want)
	}
}

func TestRunTrustsOnlyTheOpenCall(t *testing.T) {
	t.Parallel()
	cases := []runCase{
		{
			// A forger repeats the receipt, with its own details: the go-ahead
			// was used by the first.
			name: "a second receipt for one go-ahead", behaviour: "effects",
			config: steps("start:c1:send_email", "intent:c1:send_email:k1", "receipt:k1:email_sent", "receipt:k1:email_sent", "done:c1"),
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				wantOutcomes(t, o, `receipt.recorded k1 {"step":2}`)
				wantWarnings(t, o, `ignored a receipt.recorded from the runner for "k1": this attempt holds no go-ahead for that effect`)
			},
		},
		{
			// The send broke after it may have happened: no receipt may
			// turn that into done, in the call or after it.
			name: "an unknown outcome uses the go-ahead up", behaviour: "effects",
			config: steps("start:c1:send_email", "intent:c1:send_email:k1", "unknown:k1", "receipt:k1:email_sent", "done:c1", "receipt:k1:email_sent"),
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				wantOutcomes(t, o, "effect.unknown k1")
				wantWarnings(t, o,
					`ignored a receipt.recorded from the runner for "k1": this attempt holds no go-ahead`,
					`ignored a receipt.recorded from the runner for "k1": this attempt holds no go-ahead`)
			},
		},
		{
			// A process left behind by the call writes the outcome later.
			name: "an outcome after the call completed", behaviour: "effects",
			config: steps("start:c1:send_email", "intent:c1:send_email:k1", "done:c1",
				"receipt:k1:email_sent", "unknown:k1", "failed:k1", "start:c2:bash", "receipt:k1:email_sent", "done:c2"),
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				wantOutcomes(t, o)
				const late = `from the runner for "k1": tool call "c1" that asked for it had completed`
				wantWarnings(t, o, "ignored a receipt.recorded "+late, "ignored a effect.unknown "+late,
					"ignored a effect.failed "+late, "ignored a receipt.recorded "+late)
			},
		},
		{
			name: "a receipt of another type", behaviour: "effects",
			config: steps("start:c1:send_email", "intent:c1:send_email:k1", "receipt:k1:slack_message_sent", "receipt:k1:email_sent", "done:c1"),
			check: func(t *testing.T, o outcome) {
				wantOutcomes(t, o, `receipt.recorded k1 {"step":3}`)
				wantWarnings(t, o, `ignored a receipt.recorded from the runner for "k1": the effect records email_sent receipts, not "slack_message_sent"`)
			},
		},
		{
			// Intents around a call of another tool, made up (!: no sync,
			// so no token) or of the child: none is answered but the open
			// call's own, of its own tool, once.
			name: "intents not of the open call", behaviour: "effects",
			config: steps(
				"!intent:c0:send_email:k0",      // no call open
				"start:c1:mcp__forge__run",      // the call a forger runs in
				"intent:c1:send_email:k1",       // not the call's tool
				"!start:c2:send_email",          // a call started while c1 runs
				"!intent:c2:send_email:k2",      // of that call
				"!intent:c1:mcp__forge__run:k5", // without the call's token
				"intent:c1:mcp__forge__run:k3",  // the call's own: answered
				"intent:c1:mcp__forge__run:k4",  // a second one in the call
				"!receipt:k3:email_sent",        // without the token
				"!done:c1",                      // nor can it end the call
				"receipt:k3:email_sent", "done:c1",
				"start:c3:send_email", "done:c3"), // the next call opens
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				if keys := intentKeys(o); !reflect.DeepEqual(keys, []string{"k3"}) {
					t.Errorf("OnIntent saw %q, want only k3", keys)
				}
				want := []string{"k0 proceed=false err=<nil>", "k1 proceed=false err=<nil>", "k2 proceed=false err=<nil>",
					"k5 proceed=false err=<nil>", "k3 proceed=true err=<nil>", "k4 proceed=false err=<nil>"}
				if got := said(o); !reflect.DeepEqual(got, want) {
					t.Errorf("the child was answered %q,\nwant %q", got, want)
				}
				var started, completed []string
				for _, e := range o.events {
					var d event.ToolStartedData
					if (e.Type == event.ToolStarted || e.Type == event.ToolCompleted) && e.Decode(&d) == nil {
						if e.Type == event.ToolStarted {
							started = append(started, d.CallID)
						} else {
							completed = append(completed, d.CallID)
						}
					}
					if e.Token != "" {
						t.Errorf("a %s was forwarded with the call's token", e.Type)
					}
				}
				if !reflect.DeepEqual(started, []string{"c1", "c3"}) || !reflect.DeepEqual(completed, []string{"c1", "c3"}) {
					t.Errorf("forwarded the calls %q started and %q completed, want c1 and c3", started, completed)
				}
				wantOutcomes(t, o, `receipt.recorded k3 {"step":10}`)
				wantWarnings(t, o,
					`ignored an effect.intent from the runner for "k0": it names tool call "c0", which is not open`,
					`ignored an effect.intent from the runner for "k1": it names tool "send_email", and call "c1" is of "mcp__forge__run"`,
					`ignored a tool.started from the runner for call "c2": call "c1" is still open`,
					`ignored an effect.intent from the runner for "k2": it names tool call "c2", which is not open`,
					`ignored an effect.intent from the runner for "k5": it does not carry the token of tool call "c1"`,
					`ignored an effect.intent from the runner for "k4": call "c1" already asked for its effect`,
					`ignored a receipt.recorded from the runner for "k3": it does not carry the token of tool call "c1"`,
					`ignored a tool.completed from the runner for call "c1": it does not carry the call's token`)
			},
		},
		{
			// A whole call written between the child's calls, as a process
			// left behind could: it has no token, so it asks for nothing.
			name: "a call made up between calls", behaviour: "effects",
			config: steps("start:c1:bash", "done:c1",
				"!start:cX:send_email", "!intent:cX:send_email:k1", "!receipt:k1:email_sent", "!done:cX"),
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCompleted, 0)
				if len(o.intents) != 0 {
					t.Errorf("OnIntent saw %q, want nothing", intentKeys(o))
				}
				wantOutcomes(t, o)
				wantWarnings(t, o,
					`ignored an effect.intent from the runner for "k1": it does not carry the token of tool call "cX"`,
					`ignored a receipt.recorded from the runner for "k1": this attempt holds no go-ahead`,
					`ignored a tool.completed from the runner for call "cX": it does not carry the call's token`)
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

// A reply's task calls are open together, and only they: each asks for
// its sub-run once, with its own token, and gets it (OnTask) on a
// goroutine of its own; a request forged, of a call not open, of a call
// that is no task, or a second one, is refused at once; another call
// started while a task call is open, or a task call while another call
// is, is not the child's.
func TestRunTaskCallsOpenTogether(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked []string
	tc := runCase{
		name: "task calls", behaviour: "effects",
		config: func(c *Config) {
			steps("start:t1:task", "start:t2:task", "!start:b1:bash",
				"!task:t2", "task:t1", "task:t2", "task:t2", "task:t9",
				"done:t1", "done:t2",
				"start:b2:bash", "!start:t3:task", "task:b2", "done:b2")(c)
			c.OnTask = func(_ context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
				mu.Lock()
				asked = append(asked, req.CallID)
				mu.Unlock()
				return event.TaskResultData{RunID: "sub-" + req.CallID, Status: event.StatusCompleted, Output: "did-" + req.CallID}, nil
			}
		},
		check: func(t *testing.T, o outcome) {
			wantStatus(t, o, event.StatusCompleted, 0)
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(asked, []string{"t1", "t2"}) {
				t.Errorf("OnTask ran %q, want t1 and t2", asked)
			}
			want := []string{"task t2 answer=none err=<nil>", "task t1 answer=did-t1 err=<nil>", "task t2 answer=did-t2 err=<nil>",
				"task t2 answer=none err=<nil>", "task t9 answer=none err=<nil>", "task b2 answer=none err=<nil>"}
			if got := said(o); !reflect.DeepEqual(got, want) {
				t.Errorf("the child was answered %q,\nwant %q", got, want)
			}
			wantWarnings(t, o,
				`ignored a tool.started from the runner for call "b1": call "t`,
				`ignored a task.request from the runner: it does not carry the token of tool call "t2"`,
				`ignored a task.request from the runner: call "t2" already asked for its sub-run`,
				`ignored a task.request from the runner: it names tool call "t9", which is not open`,
				`ignored a tool.started from the runner for call "t3": call "b2" is still open`,
				`ignored a task.request from the runner: it names tool "task", and call "b2" is of "bash"`)
		},
	}
	tc.check(t, runFake(t, tc))
}

// An attempt that stops stops its sub-runs: OnTask's context ends with
// it, and Run returns only once OnTask has.
func TestRunStopsItsTasks(t *testing.T) {
	t.Parallel()
	var stopped atomic.Bool
	var stop atomic.Pointer[context.CancelFunc]
	tc := runCase{
		name: "stopped with a task running", behaviour: "effects",
		config: func(c *Config) {
			steps("start:t1:task", "task:t1")(c)
			c.OnTask = func(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
				(*stop.Load())() // the caller stops the attempt while its sub-run runs
				<-ctx.Done()
				stopped.Store(true)
				return event.TaskResultData{}, context.Cause(ctx)
			}
		},
		onEvent: func(e event.Event, cancel context.CancelFunc) error {
			stop.Store(&cancel) // before the child asks: it waits for the sync's ack
			return nil
		},
		check: func(t *testing.T, o outcome) {
			if o.res.Status != event.StatusCancelled {
				t.Errorf("status %q, want cancelled", o.res.Status)
			}
			if !stopped.Load() {
				t.Error("Run returned before the task it ran had stopped")
			}
		},
	}
	tc.check(t, runFake(t, tc))
}

func TestRunResultCountsOnlyFromAChildThatExits0(t *testing.T) {
	t.Parallel()
	then := func(how string) func(*Config) {
		return func(c *Config) { c.Env = append(c.Env, "ADAPTER_FAKE_THEN="+how) }
	}
	// noResult: nothing of the result reached the caller.
	noResult := func(t *testing.T, o outcome) {
		t.Helper()
		if o.res.Report != nil || o.res.Output != "" || o.res.Turns != 0 {
			t.Errorf("result %+v (report %+v), want nothing of the runner.result", o.res, o.res.Report)
		}
	}
	cases := []runCase{
		{
			// The forgery of issue 24: an early result, then kill -9.
			name: "result then killed", behaviour: "result-then", config: then("sigkill"),
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCrashed, -1)
				noResult(t, o)
				if !strings.HasPrefix(o.res.Reason, "runner killed (signal: killed) after its result, which counts only from a runner that then exits 0") {
					t.Errorf("reason %q", o.res.Reason)
				}
			},
		},
		{
			name: "result then exit 1", behaviour: "result-then", config: then("exit"),
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCrashed, 1)
				noResult(t, o)
				if !strings.HasPrefix(o.res.Reason, "runner exited with status 1 after its result") {
					t.Errorf("reason %q", o.res.Reason)
				}
			},
		},
		{
			name: "two results", behaviour: "two-results",
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCrashed, 0)
				noResult(t, o)
				if !strings.HasPrefix(o.res.Reason, "runner sent 2 results, one not its own, so none counts; it exited with status 0") {
					t.Errorf("reason %q", o.res.Reason)
				}
				wantWarnings(t, o, "runner sent a second runner.result: one of them is not its own, so neither counts")
			},
		},
		{
			// The child completes once the timeout stopped it: too late.
			// It must have started by then, to ignore SIGTERM: the timeout
			// is generous, as a loaded machine may take seconds to start it.
			name: "a result after the timeout", behaviour: "late-result",
			config: func(c *Config) { c.Timeout = 3 * time.Second },
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusTimeout, 0)
				if o.res.Reason != "phase timed out after 3s" {
					t.Errorf("reason %q", o.res.Reason)
				}
			},
		},
		{
			name: "a result after a cancel", behaviour: "late-result",
			onEvent: func(e event.Event, cancel context.CancelFunc) error {
				if e.Type == event.ToolStarted {
					cancel()
				}
				return nil
			},
			check: func(t *testing.T, o outcome) {
				wantStatus(t, o, event.StatusCancelled, 0)
				if !strings.HasPrefix(o.res.Reason, "cancelled: ") {
					t.Errorf("reason %q", o.res.Reason)
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
