package console_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/console"
	"agent/event"
)

func ev(typ string, data any) event.Event {
	e := event.New(typ, data)
	e.RunID = "run-42"
	return e
}

func delta(text string) event.Event {
	return ev(event.MessageDelta, event.MessageDeltaData{Text: text})
}

func assistant(text string, calls ...event.ToolCall) event.Event {
	return ev(event.MessageCompleted, event.MessageData{Role: "assistant", Text: text, ToolCalls: calls})
}

func started(id, name, args string) event.Event {
	return ev(event.ToolStarted, event.ToolStartedData{CallID: id, Name: name, Args: json.RawMessage(args)})
}

func completed(id, name string, ok bool, errText string) event.Event {
	return ev(event.ToolCompleted, event.ToolCompletedData{CallID: id, Name: name, OK: ok, Output: errText, Error: errText})
}

// render prints events on a Printer without a spinner and returns what
// went to stdout and stderr.
func render(events ...event.Event) (string, string) {
	var out, errOut bytes.Buffer
	p := console.NewPrinter(&out, &errOut, false)
	for _, e := range events {
		p.Print(e)
	}
	p.Close()
	return out.String(), errOut.String()
}

func TestPrinterTranscript(t *testing.T) {
	t.Parallel()
	out, errOut := render(
		ev(event.RunStarted, event.RunStartedData{Prompt: "write hello.txt", Model: "m"}),
		ev(event.MessageCompleted, event.MessageData{Role: "user", Text: "write hello.txt"}),
		delta("Let me "),
		delta("write it."),
		assistant("Let me write it.", event.ToolCall{ID: "c1", Name: "write_file"}, event.ToolCall{ID: "c2", Name: "bash"}),
		started("c1", "write_file", `{"path":"hello.txt","content":"x"}`),
		completed("c1", "write_file", true, ""),
		ev(event.ArtifactCreated, event.ArtifactData{Path: "hello.txt", SHA256: "ab", Bytes: 1}),
		started("c2", "bash", `{"command":"make test"}`),
		completed("c2", "bash", false, "exit status 1"),
		delta("All "),
		delta("done."),
		assistant("All done."),
		ev(event.RunCompleted, event.RunFinishedData{Status: "completed", Result: "All done.", Turns: 2,
			Usage: event.Usage{PromptTokens: 25, CompletionTokens: 5}, DurationMS: 1500}),
	)
	wantOut := "Let me write it.\n" +
		"✓ write_file hello.txt\n" +
		"✗ bash make test: exit status 1\n" +
		"All done.\n"
	if out != wantOut {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, wantOut)
	}
	wantErr := "  wrote hello.txt (1 bytes)\n" +
		"done in 1.5s · 2 turns · 30 tokens · run run-42\n"
	if errOut != wantErr {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut, wantErr)
	}
}

func TestPrinterToolLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 150)
	tests := []struct {
		name   string
		events []event.Event
		want   string
	}{
		{
			name:   "ok",
			events: []event.Event{started("c", "read_file", `{"path":"src/main.go"}`), completed("c", "read_file", true, "")},
			want:   "✓ read_file src/main.go\n",
		},
		{
			name:   "no summary",
			events: []event.Event{started("c", "list_files", `{}`), completed("c", "list_files", true, "")},
			want:   "✓ list_files\n",
		},
		{
			name:   "error without a started event (interrupted on resume)",
			events: []event.Event{completed("c", "bash", false, "interrupted: this bash call started but…")},
			want:   "✗ bash: interrupted: this bash call started but…\n",
		},
		{
			name:   "long error is clipped",
			events: []event.Event{started("c", "grep", `{"pattern":"x"}`), completed("c", "grep", false, long)},
			want:   "✗ grep x: " + strings.Repeat("é", 100) + "…\n",
		},
		{
			name: "interleaved calls keep their own summaries",
			events: []event.Event{
				started("a", "read_file", `{"path":"a.txt"}`),
				started("b", "read_file", `{"path":"b.txt"}`),
				completed("b", "read_file", true, ""),
				completed("a", "read_file", false, "file \"a.txt\" does not exist"),
			},
			want: "✓ read_file b.txt\n✗ read_file a.txt: file \"a.txt\" does not exist\n",
		},
		{
			name:   "text without a newline is ended before the tool line",
			events: []event.Event{delta("Checking"), started("c", "bash", `{"command":"ls"}`), completed("c", "bash", true, "")},
			want:   "Checking\n✓ bash ls\n",
		},
		{
			name:   "text ending in a newline gets no blank line",
			events: []event.Event{delta("Line one\n"), assistant("Line one\n"), delta("Next")},
			want:   "Line one\nNext",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut := render(tt.events...)
			if out != tt.want {
				t.Errorf("stdout = %q, want %q", out, tt.want)
			}
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
		})
	}
}

func TestPrinterDiagnostics(t *testing.T) {
	t.Parallel()
	interrupted := ev(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", DurationMS: 2000, ExitCode: 130})
	tests := []struct {
		name    string
		events  []event.Event
		wantOut string
		wantErr string
	}{
		{
			name:    "retry",
			events:  []event.Event{ev(event.Retry, event.RetryData{Attempt: 2, MaxAttempts: 5, DelayMS: 1500, Error: "HTTP 429"})},
			wantErr: "model call failed (attempt 2 of 5): HTTP 429; retrying in 1.5s\n",
		},
		{
			name:    "retry after partial text ends the line first",
			events:  []event.Event{delta("Half a sent"), ev(event.Retry, event.RetryData{Attempt: 1, MaxAttempts: 5, DelayMS: 500, Error: "stream cut"})},
			wantOut: "Half a sent\n",
			wantErr: "model call failed (attempt 1 of 5): stream cut; retrying in 0.5s\n",
		},
		{
			name:    "warning",
			events:  []event.Event{ev(event.Warning, event.WarningData{Message: "AGENTS.md is large"})},
			wantErr: "warning: AGENTS.md is large\n",
		},
		{
			name:    "resumed run",
			events:  []event.Event{ev(event.RunStarted, event.RunStartedData{Resumed: true})},
			wantErr: "resuming run run-42\n",
		},
		{
			name:   "new run says nothing",
			events: []event.Event{ev(event.RunStarted, event.RunStartedData{Prompt: "x"})},
		},
		{
			name: "iterations",
			events: []event.Event{
				ev(event.IterationStarted, event.IterationData{Iteration: 1, MaxIterations: 5, Promise: "DONE"}),
				ev(event.IterationCompleted, event.IterationData{Iteration: 1, MaxIterations: 5, Reason: "context_budget"}),
				ev(event.IterationStarted, event.IterationData{Iteration: 2, MaxIterations: 5, Promise: "DONE"}),
				ev(event.IterationCompleted, event.IterationData{Iteration: 2, MaxIterations: 5, Completed: true}),
			},
			wantErr: "── iteration 1 of 5 ──\niteration 1 ended: context_budget\n── iteration 2 of 5 ──\n",
		},
		{
			name: "failed",
			events: []event.Event{ev(event.RunFailed, event.RunFinishedData{
				Status: "failed", Reason: "max_turns", Turns: 50, ExitCode: 1, Usage: event.Usage{PromptTokens: 1}})},
			wantErr: "failed: max_turns (run run-42, 50 turns, exit 1)\n",
		},
		{
			name:    "cancelled",
			events:  []event.Event{ev(event.RunCancelled, event.RunFinishedData{Status: "cancelled", Reason: "cancelled", Turns: 1, ExitCode: 130})},
			wantErr: "cancelled: cancelled (run run-42, 1 turn, exit 130)\n",
		},
		{
			name:    "interrupted after partial text",
			events:  []event.Event{delta("Work"), interrupted},
			wantOut: "Work\n",
			wantErr: "interrupted after 2s; continue with: agent resume run-42\n",
		},
		{
			name: "events without a rendering are quiet",
			events: []event.Event{
				ev(event.Heartbeat, nil),
				ev(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: "k"}),
				ev(event.MessageCompleted, event.MessageData{Role: "user", Text: "hello"}),
			},
		},
		{
			name: "malformed data is ignored",
			events: []event.Event{
				{V: 1, Type: event.MessageDelta, Data: json.RawMessage(`"nope"`)},
				{V: 1, Type: event.ToolCompleted, Data: json.RawMessage(`[1]`)},
				{V: 1, Type: event.RunCompleted},
				{V: 1, Type: event.Warning, Data: json.RawMessage(`{`)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut := render(tt.events...)
			if out != tt.wantOut {
				t.Errorf("stdout = %q, want %q", out, tt.wantOut)
			}
			if errOut != tt.wantErr {
				t.Errorf("stderr = %q, want %q", errOut, tt.wantErr)
			}
		})
	}
}

func TestPrinterSpinnerIsClearedOnClose(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	p := console.NewPrinter(&out, &errOut, true)
	p.Print(ev(event.RunStarted, event.RunStartedData{}))
	p.Print(delta("Hi."))
	p.Print(assistant("Hi.", event.ToolCall{ID: "c", Name: "bash"}))
	p.Close()
	if got := out.String(); got != "Hi.\n" {
		t.Errorf("stdout = %q: the spinner must never write there", got)
	}
	if got := errOut.String(); got != "" && !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("stderr = %q, want the spinner line cleared at the end", got)
	}
}

func TestPrinterConcurrentUse(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	p := console.NewPrinter(&out, &errOut, false)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				id := fmt.Sprintf("c%d-%d", i, j)
				p.Print(started(id, "read_file", fmt.Sprintf(`{"path":"%s.txt"}`, id)))
				p.Print(completed(id, "read_file", true, ""))
				p.Print(ev(event.Warning, event.WarningData{Message: id}))
			}
		})
	}
	wg.Wait()
	p.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 160 {
		t.Fatalf("%d tool lines, want 160", len(lines))
	}
	for _, l := range lines {
		var id string
		if _, err := fmt.Sscanf(l, "✓ read_file %s", &id); err != nil || !strings.HasSuffix(id, ".txt") {
			t.Errorf("mangled line %q", l)
		}
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool, args, want string
	}{
		{"read_file", `{"path":"src/main.go","offset":10}`, "src/main.go"},
		{"write_file", `{"content":"lots of text","path":"out.md"}`, "out.md"},
		{"bash", `{"command":"go test ./..."}`, "go test ./..."},
		{"bash", `{"command":"  make\n  make install"}`, "make …"},
		{"bash", `{"command":"` + strings.Repeat("a", 100) + `"}`, strings.Repeat("a", 80) + "…"},
		{"grep", `{"pattern":"func main"}`, "func main"},
		{"list_files", `{"path":"","pattern":"*.go"}`, "*.go"},
		{"send_email", `{"to":"a@example.com","subject":"hi","body":"x"}`, "a@example.com"},
		{"slack_post", `{"channel":"#ops","text":"deployed"}`, "#ops"},
		{"list_files", `{}`, ""},
		{"record_learning", `{"text":"tabs"}`, ""},
		{"mcp__github__create_issue", `{"title":"Bug","repo":"a/b","labels":["x"],"n":2}`, "n=2 repo=a/b title=Bug"},
		{"read_file", `{"path":42}`, ""},
		{"read_file", `"{\"path\": \"a.txt\""`, ""}, // invalid arguments, carried as a JSON string
		{"read_file", `not json`, ""},
		{"read_file", ``, ""},
	}
	for _, tt := range tests {
		if got := console.Summary(tt.tool, json.RawMessage(tt.args)); got != tt.want {
			t.Errorf("Summary(%s, %s) = %q, want %q", tt.tool, tt.args, got, tt.want)
		}
	}
}

func TestRateLimitedSaysWhenToGoOn(t *testing.T) {
	var out, errb strings.Builder
	p := console.NewPrinter(&out, &errb, false)
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	e := event.New(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", Reason: event.ReasonRateLimited, ExitCode: 3,
		ResumeAfter: at.Format(time.RFC3339)})
	e.RunID = "run-7"
	p.Print(e)
	want := "paused after 0s: the provider rate-limits this key until " + at.Local().Format("15:04:05") + "; continue then with: agent resume run-7"
	if !strings.HasPrefix(errb.String(), want) {
		t.Errorf("got %q\nwant %q…", errb.String(), want)
	}
}

// A sub-run's events in its parent's stream are shown under its task:
// its tool lines prefixed "↳ TASK", nothing of its own start or messages,
// and the parent's own lines as ever.
func TestPrinterShowsSubagentsUnderTheirTask(t *testing.T) {
	var out, errw strings.Builder
	p := console.NewPrinter(&out, &errw, false)
	sub := func(e event.Event) event.Event { e.Subagent = "5ce8f4a5-a0d9-4454-bc9c-4975d88e523a"; return e }
	p.Print(event.New(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "task", Args: json.RawMessage(`{"description":"count the files"}`)}))
	p.Print(sub(event.New(event.RunStarted, event.RunStartedData{Prompt: "count them", Task: "count the files", Sandbox: "off"})))
	p.Print(sub(event.New(event.MessageCompleted, event.MessageData{Role: "assistant", Text: "counting"})))
	p.Print(sub(event.New(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "bash", Args: json.RawMessage(`{"command":"ls | wc -l"}`)})))
	p.Print(sub(event.New(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", Name: "bash", OK: true})))
	p.Print(event.New(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", Name: "task", OK: true, Output: "3"}))
	if want := "  ↳ count the files ✓ bash ls | wc -l\n✓ task count the files\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	if errw.String() != "" {
		t.Errorf("diagnostics %q, want none", errw.String())
	}
}

// A question an MCP server asked says so; a call's progress shows on its
// line as a count of the total and the server's word.
func TestServerQuestionAndProgressText(t *testing.T) {
	w := event.RunWaitingData{Kind: event.WaitQuestion, Question: "Which colour?", Server: "docs", Until: "2026-11-27T08:00:00Z"}
	if got := console.WaitLine(w); got != `⏸ waiting for an answer to MCP server "docs": Which colour? until 2026-11-27T08:00:00Z` {
		t.Errorf("WaitLine = %q", got)
	}
	for _, c := range []struct {
		d    event.ToolProgressData
		want string
	}{
		{event.ToolProgressData{Progress: 3, Total: 5, Message: "indexing"}, "3/5 indexing"},
		{event.ToolProgressData{Progress: 0.25}, "0.25"},
	} {
		if got := console.ProgressText(c.d); got != c.want {
			t.Errorf("ProgressText(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}
