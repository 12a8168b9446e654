package adapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"agent/event"
)

// FuzzReadSpec is a child's stdin: ReadSpec, then WatchControls on the
// same reader. Invariants:
//   - neither panics;
//   - an accepted spec passes Validate, and survives a JSON round trip
//     through ReadSpec again;
//   - a rejected spec is an error, a *SpecError when the line was JSON;
//   - WatchControls returns nil at EOF and calls onStop exactly once,
//     with ErrCancelled or ErrParentGone; acks it delivers have type ack;
//   - when reading fails midway (not EOF), WatchControls returns the read
//     error and still calls onStop exactly once.
func FuzzReadSpec(f *testing.F) {
	const spec = `{"run_id":"r","phase_id":"p","attempt":1,"workspace":"/ws","mode":"phase","prompt":"go"}`
	for _, s := range []string{
		spec + "\n",
		spec,
		spec + "\n" + `{"type":"ack","id":"i1","proceed":true}` + "\n" + `{"type":"cancel","reason":"user"}` + "\n",
		spec + "\n" + `{"type":"ack","id":"i2","receipt":{"type":"email","key":"k","details":{"id":1}}}` + "\n\n" + "garbage\n" + `{"type":"ack","id":"i3","unknown":true}`,
		`{"run_id":"r","workspace":"/w","mode":"run","model":{"name":"m","base_url":"http://x","replay":"c.jsonl","scope":"s"},"tools":["bash"],"prior":[{"role":"user","content":"hi"}],"usage":{"prompt_tokens":3},"continue":true}` + "\n" + `{"type":"cancel"}`,
		`{"run_id":"r","phase_id":"p","attempt":0,"workspace":"/ws","mode":"phase"}` + "\n",
		`{"run_id":"r","phase_id":"p","attempt":1,"workspace":"rel","mode":"plan"}` + "\n",
		`{"run_id":"r","phase_id":"p","attempt":1,"workspace":"/ws","mode":"loop"}` + "\n",
		`{"run_id":"r","attempt":"1"}` + "\n",
		"\n" + spec,
		"",
		"not json\n{\"type\":\"cancel\"}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		spec, err := ReadSpec(r)
		if err == nil {
			if verr := spec.Validate(); verr != nil {
				t.Fatalf("ReadSpec accepted a spec that does not validate: %v", verr)
			}
			line, merr := json.Marshal(spec)
			if merr != nil {
				t.Fatalf("accepted spec does not marshal: %v", merr)
			}
			if _, rerr := ReadSpec(bufio.NewReader(bytes.NewReader(append(line, '\n')))); rerr != nil {
				t.Fatalf("accepted spec does not read back: %v\n%s", rerr, line)
			}
		} else {
			first, _, _ := bytes.Cut(data, []byte("\n"))
			var se *SpecError
			if json.Valid(first) && bytes.HasPrefix(bytes.TrimSpace(first), []byte("{")) && !errors.As(err, &se) && !strings.Contains(err.Error(), "decode phase spec") {
				t.Fatalf("a JSON object spec was rejected without a *SpecError or decode error: %v", err)
			}
		}

		// The rest of stdin: control lines until EOF.
		stops, err := fuzzWatch(t, r)
		if err != nil {
			t.Fatalf("WatchControls at EOF returned %v", err)
		}
		if len(stops) != 1 {
			t.Fatalf("onStop called %d times: %v", len(stops), stops)
		}
		if !errors.Is(stops[0], ErrCancelled) && !errors.Is(stops[0], ErrParentGone) {
			t.Fatalf("onStop called with %v", stops[0])
		}

		// The whole input as control lines, then a failing read.
		boom := errors.New("boom")
		stops, err = fuzzWatch(t, bufio.NewReader(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(boom))))
		if !errors.Is(err, boom) {
			t.Fatalf("WatchControls over a failing reader returned %v, want the read error", err)
		}
		if len(stops) != 1 {
			t.Fatalf("onStop called %d times: %v", len(stops), stops)
		}
		if !errors.Is(stops[0], ErrCancelled) && !(errors.Is(stops[0], ErrParentGone) && errors.Is(stops[0], boom)) {
			t.Fatalf("onStop called with %v", stops[0])
		}
	})
}

// fuzzWatch runs WatchControls over r and returns what onStop got.
func fuzzWatch(t *testing.T, r *bufio.Reader) ([]error, error) {
	var stops []error
	err := WatchControls(r, func(c Control) {
		if c.Type != ControlAck {
			t.Fatalf("onAck got a %q control", c.Type)
		}
	}, func(err error) { stops = append(stops, err) })
	return stops, err
}

// fuzzStdin is a child's stdin that keeps what the parent wrote.
type fuzzStdin struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *fuzzStdin) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *fuzzStdin) Close() error { return nil }

// FuzzReadLines is the parent reading a child's stdout: readLines (the
// event.Decoder) over arbitrary bytes, each line handled as Run handles it
// (attempt.handle), with a fake stdin for the acks and no process.
// Invariants:
//   - readLines never panics, closes its channel, and sends each line as
//     exactly one of an event (with a type) or a *LineError (increasing
//     line numbers);
//   - handle never panics; every forwarded event carries the attempt's
//     run, phase and attempt, v and ts, and no seq and no token; protocol-only events
//     (heartbeat, runner.result, effect.intent, sync) are never forwarded;
//   - a bad line is a warning; every control line written to the child is
//     an ack with an id, one per well-formed effect.intent or sync;
//   - a receipt is forwarded at most once per go-ahead OnIntent gave;
//   - a runner.result kept is in the protocol's shape.
func FuzzReadLines(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"run.started","data":{"prompt":"hi"}}` + "\n" +
			`{"type":"heartbeat"}` + "\n" +
			`{"type":"tool.started","seq":9,"phase_id":"other","data":{"call_id":"c1","name":"bash","args":{}}}` + "\n" +
			`{"type":"sync","data":{"id":"s1"}}` + "\n" +
			`{"type":"runner.result","data":{"status":"completed","output":"done","turns":2}}` + "\n",
		`{"type":"effect.intent","data":{"id":"i1","tool":"send_email","key":"k1","receipt_type":"email","args":{"to":"a@b"}}}` + "\n" +
			`{"type":"effect.intent","data":{"tool":"x"}}` + "\n" +
			`{"type":"effect.intent"}` + "\n" +
			`{"type":"runner.result","data":{"status":"failed","reason":"provider"}}`,
		"garbage\n\n{\"v\":1}\n{\"type\":\"sync\",\"data\":\"s\"}\n{\"type\":\"runner.result\",\"data\":[]}\n",
		`{"type":"warning","data":{"message":"child warns"}}` + "\r\n" + `{"type":"runner.result","data":{"status":"cancelled"}}`,
		"",
		"\xff\n{\"type\":\"message.delta\",\"ts\":\"2024-01-01T00:00:00Z\",\"run_id\":\"other\",\"data\":{\"text\":\"x\"}}",
	} {
		f.Add([]byte(s))
	}
	// The workspace artifact.created events are checked against: only
	// read, never written, by the code under test.
	ws := f.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "out.txt"), []byte("hello\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"type":"tool.started","data":{"call_id":"c1","name":"send_email"}}` + "\n" +
		`{"type":"effect.intent","data":{"id":"i1","call_id":"c1","tool":"send_email","key":"k1","receipt_type":"email"}}` + "\n" +
		`{"type":"receipt.recorded","data":{"type":"email","key":"k1"}}` + "\n" +
		`{"type":"receipt.recorded","data":{"type":"email","key":"k1"}}` + "\n" +
		`{"type":"tool.completed","token":"t","data":{"call_id":"c1","ok":true}}` + "\n" +
		`{"type":"effect.unknown","token":"t","data":{"key":"k1"}}` + "\n"))
	f.Add([]byte(`{"type":"artifact.created","data":{"path":"out.txt","sha256":"forged","bytes":1}}` + "\n" +
		`{"type":"artifact.created","data":{"path":"../etc/passwd"}}` + "\n" +
		`{"type":"receipt.recorded","data":{"type":"email","key":"k1"}}` + "\n" +
		`{"type":"effect.intent","data":{"id":"i1","tool":"send_email","key":"k1"}}` + "\n" +
		`{"type":"receipt.recorded","data":{"type":"email","key":"k1","details":{"id":"m1"}}}` + "\n" +
		`{"type":"run.completed","data":{"status":"completed"}}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := make(chan decoded, 16)
		go readLines(bytes.NewReader(data), lines)

		stdin := &fuzzStdin{}
		var forwarded []event.Event
		given := map[string]int{} // go-aheads given by key
		spec := PhaseSpec{RunID: "run-1", SessionID: "sess-1", PhaseID: "gather", Attempt: 2, Workspace: ws, Mode: ModePhase}
		a := newAttempt(context.Background(), Config{
			// Never an error: an OnEvent failure stops the attempt,
			// which signals processes, and there is none here.
			OnEvent: func(e event.Event) error { forwarded = append(forwarded, e); return nil },
			OnIntent: func(in event.EffectIntentData) Control {
				ok := in.Key != "refuse"
				if ok {
					given[in.Key]++
				}
				return Control{Proceed: ok}
			},
		}, spec)
		a.ctl = newControlWriter(stdin)

		var bad, acks, last int
		for d := range lines {
			switch {
			case d.bad != nil && d.ev.Type != "":
				t.Fatalf("line %d is both an event and an error", d.bad.Line)
			case d.bad != nil:
				if d.bad.Line <= last {
					t.Fatalf("line error on line %d after line %d", d.bad.Line, last)
				}
				last = d.bad.Line
				bad++
			case d.ev.Type == "":
				t.Fatalf("an event without a type: %+v", d.ev)
			case d.ev.Type == event.EffectIntent:
				var in event.EffectIntentData
				if d.ev.Decode(&in) == nil && in.ID != "" {
					acks++
				}
			case d.ev.Type == event.Sync:
				var s event.SyncData
				if d.ev.Decode(&s) == nil && s.ID != "" {
					acks++
				}
			}
			a.handle(d)
		}
		a.ctl.close()

		if a.res.Warnings < bad {
			t.Fatalf("%d bad lines but %d warnings", bad, a.res.Warnings)
		}
		for _, e := range forwarded {
			switch e.Type {
			case event.Heartbeat, event.RunnerResult, event.EffectIntent, event.Sync:
				t.Fatalf("forwarded a protocol event: %+v", e)
			}
			if e.Seq != 0 || e.V == 0 || e.TS.IsZero() || e.RunID == "" || e.Token != "" ||
				e.PhaseID != spec.PhaseID || e.Attempt != spec.Attempt {
				t.Fatalf("forwarded event not stamped for the attempt: %+v", e)
			}
			if e.Type == event.ReceiptRecorded {
				var r event.ReceiptData
				if err := e.Decode(&r); err != nil || given[r.Key] == 0 {
					t.Fatalf("forwarded a receipt for an effect without a go-ahead left: %s", e.Data)
				}
				given[r.Key]--
			}
		}
		if a.report != nil && !resultStatuses[a.report.Status] {
			t.Fatalf("kept a runner.result with status %q", a.report.Status)
		}

		written := stdin.buf.Bytes()
		if len(written) > 0 && !bytes.HasSuffix(written, []byte("\n")) {
			t.Fatalf("control output does not end a line: %q", written)
		}
		ctlLines := bytes.Split(bytes.TrimSuffix(written, []byte("\n")), []byte("\n"))
		if len(written) == 0 {
			ctlLines = nil
		}
		for _, line := range ctlLines {
			var c Control
			if err := json.Unmarshal(line, &c); err != nil {
				t.Fatalf("control line %q: %v", line, err)
			}
			if c.Type != ControlAck || c.ID == "" {
				t.Fatalf("control line %q is not an ack with an id", line)
			}
		}
		if len(ctlLines) != acks {
			t.Fatalf("%d acks written for %d well-formed intents and syncs", len(ctlLines), acks)
		}
	})
}
