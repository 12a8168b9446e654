package console

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"agent/event"
)

func pev(typ string, data any) event.Event {
	e := event.New(typ, data)
	e.RunID, e.SessionID = "run-42", "sess-7"
	return e
}

// termPrinter is a Printer on a fake terminal with a fake clock; its
// spinner draws a frame only when spinning is called.
func termPrinter(c *clock) (*Printer, *screen) {
	scr := &screen{}
	p := NewPrinter(scr, scr, false)
	p.now = c.now
	p.spinner = &spinner{w: scr, now: c.now}
	return p, scr
}

// spinning draws one frame and returns the spinner's line without its
// frame glyph: "" when no spinner is shown.
func spinning(p *Printer, scr *screen) string {
	p.spinner.draw()
	line := scr.cursorLine()
	for _, f := range frames {
		if rest, ok := strings.CutPrefix(line, string(f)+" "); ok {
			return rest
		}
	}
	return ""
}

// TestPrinterSpinnerCoversEveryWait follows a run through the events
// that come between its waits on the model, as a terminal shows them: the
// spinner is on from run.started until the model's text streams, while
// each tool runs, and again after every tool result and the events that
// follow one (artifact.created, checkpoint.created, receipt.recorded…),
// with one count per wait; never over streamed text, and off at the end.
func TestPrinterSpinnerCoversEveryWait(t *testing.T) {
	t.Parallel()
	c := newClock()
	p, scr := termPrinter(c)
	write := event.ToolCall{ID: "c1", Name: "write_file"}
	edit := event.ToolCall{ID: "c2", Name: "edit_file"}
	steps := []struct {
		e     event.Event
		after time.Duration // time passing before the next frame
		want  string        // the spinner line, "" for none
	}{
		{pev(event.RunStarted, event.RunStartedData{Prompt: "go"}), time.Second, "waiting for the model (1s)"},
		{pev(event.MessageCompleted, event.MessageData{Role: "user", Text: "go"}), time.Second, "waiting for the model (2s)"},
		{pev(event.MessageDelta, event.MessageDeltaData{Text: "Writing"}), time.Second, ""},
		{pev(event.MessageDelta, event.MessageDeltaData{Text: " it.\n"}), 0, ""},
		{pev(event.MessageCompleted, event.MessageData{Role: "assistant", Text: "Writing it.\n", ToolCalls: []event.ToolCall{write, edit}}), 0, "running tools (0s)"},
		{pev(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "write_file", Args: json.RawMessage(`{"path":"slow.txt"}`)}), 0, "write_file slow.txt (0s)"},
		{pev(event.CheckpointCreated, event.CheckpointData{Path: "slow.txt", CallID: "c1"}), 2 * time.Second, "write_file slow.txt (2s)"},
		{pev(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", Name: "write_file", OK: true}), 0, "running tools (0s)"},
		{pev(event.ArtifactCreated, event.ArtifactData{Path: "slow.txt", Bytes: 5}), 0, "running tools (0s)"},
		{pev(event.ToolStarted, event.ToolStartedData{CallID: "c2", Name: "edit_file", Args: json.RawMessage(`{"path":"slow.txt"}`)}), 0, "edit_file slow.txt (0s)"},
		{pev(event.ToolCompleted, event.ToolCompletedData{CallID: "c2", Name: "edit_file", OK: true}), 5 * time.Second, "waiting for the model (5s)"},
		{pev(event.ArtifactCreated, event.ArtifactData{Path: "slow.txt", Bytes: 6}), 5 * time.Second, "waiting for the model (10s)"},
		{pev(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: "k"}), 5 * time.Second, "waiting for the model (15s)"},
		{pev(event.Heartbeat, nil), 0, "waiting for the model (15s)"},
		{pev(event.Retry, event.RetryData{Attempt: 1, MaxAttempts: 3, DelayMS: 500, Error: "HTTP 429"}), 0, "waiting for the model (15s)"},
		{pev(event.MessageDelta, event.MessageDeltaData{Text: "Done"}), time.Second, ""},
		{pev(event.MessageCompleted, event.MessageData{Role: "assistant", Text: "Done"}), 0, ""},
		{pev(event.RunCompleted, event.RunFinishedData{Status: "completed", Turns: 2, DurationMS: 26000}), 0, ""},
	}
	for i, s := range steps {
		p.Print(s.e)
		c.add(s.after)
		if got := spinning(p, scr); got != s.want {
			t.Fatalf("after event %d (%s): spinner %q, want %q; screen:\n%s", i, s.e.Type, got, s.want, scr.text())
		}
	}
	p.Close()
	want := "Writing it.\n" +
		"✓ write_file slow.txt\n" +
		"  wrote slow.txt (5 bytes)\n" +
		"✓ edit_file slow.txt\n" +
		"  wrote slow.txt (6 bytes)\n" +
		"model call failed (attempt 1 of 3): HTTP 429; retrying in 0.5s\n" +
		"Done\n" +
		"done in 26s · 2 turns · 0 tokens · run run-42"
	if got := scr.text(); got != want {
		t.Errorf("screen:\n%s\nwant:\n%s", got, want)
	}
}

// A spinner never draws over streamed text that has no newline yet, and
// a resumed run waits on the model from its run.started.
func TestPrinterSpinnerSparesPartialText(t *testing.T) {
	t.Parallel()
	c := newClock()
	p, scr := termPrinter(c)
	p.Print(pev(event.RunStarted, event.RunStartedData{Resumed: true}))
	if got := spinning(p, scr); got != "waiting for the model (0s)" {
		t.Errorf("resumed: spinner %q", got)
	}
	p.Print(pev(event.MessageDelta, event.MessageDeltaData{Text: "Checking"}))
	p.Print(pev(event.ToolStarted, event.ToolStartedData{CallID: "c", Name: "bash", Args: json.RawMessage(`{"command":"ls"}`)}))
	if got := spinning(p, scr); got != "" || scr.cursorLine() != "Checking" {
		t.Errorf("spinner %q over partial text; line %q", got, scr.cursorLine())
	}
	p.Close()
}

// The terminal's echo of Ctrl-C does not stay in front of the last line.
func TestPrinterCtrlCEcho(t *testing.T) {
	t.Parallel()
	c := newClock()
	p, scr := termPrinter(c)
	p.Print(pev(event.RunStarted, event.RunStartedData{}))
	scr.echo("^C") // before the spinner's first frame
	p.Print(pev(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", DurationMS: 1000, ExitCode: 130}))
	p.Close()
	if got := scr.text(); got != "interrupted after 1s; continue with: agent resume run-42" {
		t.Errorf("screen %q", got)
	}
}

// Off a terminal (and so in --json, which does not use a Printer at all)
// nothing but lines is written: no spinner, no escape sequence.
func TestPrinterNoSpinnerOffTerminal(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	p := NewPrinter(&out, &errb, false)
	for _, e := range []event.Event{
		pev(event.RunStarted, event.RunStartedData{}),
		pev(event.ToolCompleted, event.ToolCompletedData{CallID: "c", Name: "write_file", OK: true}),
		pev(event.ArtifactCreated, event.ArtifactData{Path: "a", Bytes: 1}),
	} {
		p.Print(e)
	}
	time.Sleep(3 * spinTick / 2)
	p.Close()
	if s := out.String() + errb.String(); strings.ContainsAny(s, "\r\033") {
		t.Errorf("output off a terminal: %q", s)
	}
}

// attach shows each prompt before its answer; harness phases' prompts
// (rendered instructions) are not a person's and are not shown.
func TestPrinterShowPrompts(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	p := NewPrinter(&out, &errb, false)
	p.ShowPrompts(true)
	phase := pev(event.MessageCompleted, event.MessageData{Role: "user", Text: "You are working on phase one…"})
	phase.PhaseID = "one"
	long := strings.Repeat("line\n", 12)
	for _, e := range []event.Event{
		pev(event.RunStarted, event.RunStartedData{Prompt: "write hello.txt"}),
		pev(event.MessageCompleted, event.MessageData{Role: "user", Text: "write hello.txt"}),
		pev(event.MessageDelta, event.MessageDeltaData{Text: "Done."}),
		pev(event.MessageCompleted, event.MessageData{Role: "assistant", Text: "Done."}),
		pev(event.MessageCompleted, event.MessageData{Role: "user", Text: "and now\ntwo lines  "}),
		pev(event.MessageDelta, event.MessageDeltaData{Text: "OK"}),
		phase,
		pev(event.MessageCompleted, event.MessageData{Role: "user", Text: long}),
	} {
		p.Print(e)
	}
	p.Close()
	want := "> write hello.txt\nDone.\n> and now\n> two lines\nOK\n" + strings.Repeat("> line\n", promptLines) + "> …\n"
	if got := out.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
}

// A run the gateway's drain interrupted is resumed by the gateway; any
// other interrupted run is continued with agent resume.
func TestPrinterInterruptedHints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		detail, want string
	}{
		{gatewayDrained, "interrupted after 2s: the gateway stopped; it resumes run run-42 when it starts again; follow it with: agent attach sess-7\n"},
		{"interrupted by the user", "interrupted after 2s; continue with: agent resume run-42\n"},
		{"", "interrupted after 2s; continue with: agent resume run-42\n"},
	}
	for _, tt := range tests {
		e := pev(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", Reason: "interrupted", Detail: tt.detail, DurationMS: 2000, ExitCode: 130})
		var out, errb bytes.Buffer
		p := NewPrinter(&out, &errb, false)
		p.Print(e)
		p.Close()
		if errb.String() != tt.want {
			t.Errorf("detail %q: printer said %q, want %q", tt.detail, errb.String(), tt.want)
		}
		errb.Reset()
		b := NewBoard(&out, &errb, false)
		b.Print(e)
		b.Close()
		if errb.String() != tt.want {
			t.Errorf("detail %q: board said %q, want %q", tt.detail, errb.String(), tt.want)
		}
	}
	// A gateway's run goes on in the gateway: the command names it.
	e := pev(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", Reason: "interrupted", DurationMS: 2000, ExitCode: 130})
	var out, errb bytes.Buffer
	p := NewPrinter(&out, &errb, false)
	p.ViaGateway("ws://127.0.0.1:7420")
	p.Print(e)
	p.Close()
	if want := "interrupted after 2s; continue with: agent resume run-42 --gateway ws://127.0.0.1:7420\n"; errb.String() != want {
		t.Errorf("a gateway's run: printer said %q, want %q", errb.String(), want)
	}
}

// Note writes a line between events without leaving the spinner drawn
// over it.
func TestPrinterNote(t *testing.T) {
	t.Parallel()
	c := newClock()
	p, scr := termPrinter(c)
	p.Print(pev(event.RunStarted, event.RunStartedData{}))
	spinning(p, scr)
	p.Note("following session %s; Ctrl-C stops", "s1")
	if got := spinning(p, scr); got != "waiting for the model (0s)" {
		t.Errorf("spinner after a note: %q", got)
	}
	p.Close()
	if got := scr.text(); got != "following session s1; Ctrl-C stops" {
		t.Errorf("screen %q", got)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {40 * time.Millisecond, "0s"}, {100 * time.Millisecond, "0.1s"}, {1500 * time.Millisecond, "1.5s"},
		{2 * time.Second, "2s"}, {12340 * time.Millisecond, "12.3s"}, {59960 * time.Millisecond, "1m0s"},
		{65400 * time.Millisecond, "1m5s"}, {-time.Second, "0s"},
	} {
		if got := formatDuration(tt.d); got != tt.want {
			t.Errorf("formatDuration(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
