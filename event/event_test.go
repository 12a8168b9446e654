package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"agent/event"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	started := event.New(event.ToolStarted, event.ToolStartedData{
		CallID: "c1", Name: "bash", Args: json.RawMessage(`{"command":"echo \"hi\"\nls"}`),
	})
	started.Seq, started.RunID, started.SessionID, started.PhaseID, started.Attempt = 12, "run-1", "sess-1", "gather", 2
	in := []event.Event{
		started,
		event.New(event.MessageDelta, event.MessageDeltaData{Text: "héllo ✓ \u2028 </script>"}),
		event.New(event.Heartbeat, nil),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", Result: "ok", Turns: 3,
			Usage: event.Usage{PromptTokens: 10, CompletionTokens: 2}, DurationMS: 1500}),
	}

	var buf bytes.Buffer
	enc := event.NewEncoder(&buf)
	for _, e := range in {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(buf.String(), "\n"); got != len(in) {
		t.Fatalf("%d lines for %d events:\n%s", got, len(in), buf.String())
	}
	if !strings.Contains(buf.String(), `"v":1,"seq":12,`) {
		t.Errorf("envelope fields out of the documented order:\n%s", buf.String())
	}

	dec := event.NewDecoder(&buf)
	for i, want := range in {
		got, err := dec.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !got.TS.Equal(want.TS) {
			t.Errorf("event %d ts = %v, want %v", i, got.TS, want.TS)
		}
		got.TS, want.TS = time.Time{}, time.Time{}
		gotData, wantData := got.Data, want.Data
		got.Data, want.Data = nil, nil
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("event %d = %+v, want %+v", i, got, want)
		}
		if !jsonEqual(t, gotData, wantData) {
			t.Errorf("event %d data = %s, want %s", i, gotData, wantData)
		}
	}
	if _, err := dec.Decode(); err != io.EOF {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(va) == fmt.Sprint(vb)
}

func TestEncoderConcurrentLinesStayWhole(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := event.NewEncoder(&buf)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				text := strings.Repeat(fmt.Sprint(w), 100+i)
				if err := enc.Encode(event.New(event.MessageDelta, event.MessageDeltaData{Text: text})); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	dec := event.NewDecoder(&buf)
	n := 0
	for {
		_, err := dec.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
	}
	if n != writers*each {
		t.Errorf("decoded %d events, want %d", n, writers*each)
	}
}

// step is what one Decode call should return: an event type, or an error
// (a *LineError for the given line).
type step struct {
	typ     string
	errLine int
	errIs   error // optional: errors.Is target
}

func TestDecoder(t *testing.T) {
	t.Parallel()
	valid := func(typ string) string { return fmt.Sprintf(`{"v":1,"ts":"2026-11-22T08:00:00Z","type":%q}`, typ) }
	tests := []struct {
		name  string
		input string
		want  []step
	}{
		{
			name:  "malformed line is reported and skipped",
			input: valid("run.started") + "\n{not json\n" + valid("run.completed") + "\n",
			want:  []step{{typ: "run.started"}, {errLine: 2}, {typ: "run.completed"}},
		},
		{
			name:  "truncated JSON",
			input: `{"v":1,"type":"tool.started","data":{"call_id":` + "\n" + valid("heartbeat") + "\n",
			want:  []step{{errLine: 1}, {typ: "heartbeat"}},
		},
		{
			name:  "blank lines are skipped but counted",
			input: "\n   \n\t\n" + valid("heartbeat") + "\n\n{oops\n",
			want:  []step{{typ: "heartbeat"}, {errLine: 6}},
		},
		{
			name:  "missing type",
			input: `{"v":1,"data":{"text":"x"}}` + "\n" + `{"v":1,"type":""}` + "\n" + valid("warning") + "\n",
			want:  []step{{errLine: 1}, {errLine: 2}, {typ: "warning"}},
		},
		{
			name:  "not an object",
			input: "[1,2]\n\"x\"\n" + valid("warning") + "\n",
			want:  []step{{errLine: 1}, {errLine: 2}, {typ: "warning"}},
		},
		{
			name:  "no trailing newline",
			input: valid("heartbeat") + "\n" + valid("run.failed"),
			want:  []step{{typ: "heartbeat"}, {typ: "run.failed"}},
		},
		{
			name:  "CRLF line endings",
			input: valid("heartbeat") + "\r\n" + valid("run.failed") + "\r\n",
			want:  []step{{typ: "heartbeat"}, {typ: "run.failed"}},
		},
		{
			name:  "empty input",
			input: "",
		},
		{
			name:  "only blank lines",
			input: "\n\n  \n",
		},
		{
			name:  "line too long, then a valid one",
			input: strings.Repeat("x", event.MaxLine+10) + "\n" + valid("heartbeat") + "\n",
			want:  []step{{errLine: 1, errIs: event.ErrLineTooLong}, {typ: "heartbeat"}},
		},
		{
			name:  "line too long at the end without newline",
			input: valid("heartbeat") + "\n" + strings.Repeat("x", event.MaxLine+10),
			want:  []step{{typ: "heartbeat"}, {errLine: 2, errIs: event.ErrLineTooLong}},
		},
		{
			name:  "a line of exactly MaxLine bytes is accepted",
			input: padded(event.MaxLine) + "\n" + valid("heartbeat") + "\n",
			want:  []step{{typ: "warning"}, {typ: "heartbeat"}},
		},
		{
			name:  "one byte more is too long",
			input: padded(event.MaxLine+1) + "\n" + valid("heartbeat") + "\n",
			want:  []step{{errLine: 1, errIs: event.ErrLineTooLong}, {typ: "heartbeat"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Short reads as well, so lines are assembled across reads.
			for _, r := range []io.Reader{strings.NewReader(tt.input), iotest.HalfReader(strings.NewReader(tt.input))} {
				dec := event.NewDecoder(r)
				for i, want := range tt.want {
					e, err := dec.Decode()
					if want.typ != "" {
						if err != nil || e.Type != want.typ {
							t.Fatalf("decode %d = %q, %v; want %q", i, e.Type, err, want.typ)
						}
						continue
					}
					var le *event.LineError
					if !errors.As(err, &le) {
						t.Fatalf("decode %d = %q, %v; want a *LineError", i, e.Type, err)
					}
					if le.Line != want.errLine {
						t.Errorf("decode %d: error on line %d, want %d", i, le.Line, want.errLine)
					}
					if want.errIs != nil && !errors.Is(err, want.errIs) {
						t.Errorf("decode %d: %v, want errors.Is %v", i, err, want.errIs)
					}
					if len(le.Text) > 200 {
						t.Errorf("decode %d: error keeps %d bytes of the line, want a short preview", i, len(le.Text))
					}
					if !strings.Contains(le.Error(), fmt.Sprintf("line %d", want.errLine)) {
						t.Errorf("decode %d: message %q does not name the line", i, le.Error())
					}
				}
				if e, err := dec.Decode(); err != io.EOF {
					t.Fatalf("at the end: %q, %v; want io.EOF", e.Type, err)
				}
			}
		})
	}
}

// padded returns a valid warning event line of exactly n bytes.
func padded(n int) string {
	head, tail := `{"v":1,"type":"warning","data":{"message":"`, `"}}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

func TestDecoderReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("pipe broke")
	dec := event.NewDecoder(iotest.ErrReader(boom))
	if _, err := dec.Decode(); !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	before := time.Now()
	e := event.New(event.ArtifactCreated, event.ArtifactData{Path: "a.txt", SHA256: "ab", Bytes: 3})
	if e.V != event.Version || e.Type != event.ArtifactCreated || e.Seq != 0 {
		t.Errorf("event = %+v", e)
	}
	if e.TS.Location() != time.UTC || e.TS.Before(before.Add(-time.Second)) || e.TS.After(time.Now().Add(time.Second)) {
		t.Errorf("ts = %v, want now in UTC", e.TS)
	}
	var d event.ArtifactData
	if err := e.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d != (event.ArtifactData{Path: "a.txt", SHA256: "ab", Bytes: 3}) {
		t.Errorf("data = %+v", d)
	}

	line, err := json.Marshal(event.New(event.Heartbeat, nil))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(line), `"data"`) {
		t.Errorf("event without data has a data field: %s", line)
	}
	if err := event.New(event.Heartbeat, nil).Decode(&d); err == nil {
		t.Error("decoding an event without data: want an error")
	}
	var wrong []int
	if err := e.Decode(&wrong); err == nil || !strings.Contains(err.Error(), event.ArtifactCreated) {
		t.Errorf("decoding into the wrong type: %v, want an error naming the event type", err)
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		event.RunCompleted:   true,
		event.RunFailed:      true,
		event.RunCancelled:   true,
		event.RunInterrupted: true,
		event.RunStarted:     false,
		event.PhaseCompleted: false,
		event.PhaseFailed:    false,
		event.RunnerResult:   false,
		event.ToolCompleted:  false,
		"":                   false,
	}
	for typ, want := range tests {
		if got := event.IsTerminal(typ); got != want {
			t.Errorf("IsTerminal(%q) = %v, want %v", typ, got, want)
		}
	}
}

func TestUsageAdd(t *testing.T) {
	t.Parallel()
	got := event.Usage{PromptTokens: 1, CompletionTokens: 2}.Add(event.Usage{PromptTokens: 10, CompletionTokens: 20})
	if want := (event.Usage{PromptTokens: 11, CompletionTokens: 22}); got != want {
		t.Errorf("sum = %+v, want %+v", got, want)
	}
}
