package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"agent/event"
)

// decodeAll decodes r to the end: events and line errors in order. Any
// other error fails the test: a bytes.Reader only ends with io.EOF.
func decodeAll(t *testing.T, r io.Reader) (evs []event.Event, bad []*event.LineError) {
	t.Helper()
	dec := event.NewDecoder(r)
	for {
		e, err := dec.Decode()
		var le *event.LineError
		switch {
		case err == nil:
			evs = append(evs, e)
		case errors.As(err, &le):
			bad = append(bad, le)
		case errors.Is(err, io.EOF):
			return evs, bad
		default:
			t.Fatalf("Decode: unexpected error %v", err)
		}
	}
}

// sameJSON reports whether a and b are the same JSON value (an empty
// RawMessage counts as null).
func sameJSON(a, b json.RawMessage) bool {
	va, erra := jsonValue(a)
	vb, errb := jsonValue(b)
	return erra == nil && errb == nil && reflect.DeepEqual(va, vb)
}

// jsonValue decodes raw keeping numbers as written (1e400 is valid JSON
// but no float64).
func jsonValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// FuzzDecode feeds arbitrary bytes to the JSON-lines Decoder. Invariants:
//   - it never panics and ends with io.EOF (no other error from a bytes.Reader);
//   - it makes progress: results ≤ lines in the input;
//   - a *LineError names a line number ≥ 1, increasing, that its message
//     quotes; its Text is a short preview;
//   - a decoded event has a type, and re-encodes (Encoder) and decodes back
//     to the same envelope and the same data;
//   - reading the input one byte at a time gives the same results.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"ts":"2024-05-01T12:00:00Z","type":"run.started","data":{"prompt":"hi","model":"m"}}` + "\n",
		`{"v":1,"seq":7,"ts":"2024-05-01T12:00:00.123456789+02:00","run_id":"r1","session_id":"s1","phase_id":"gather","attempt":2,"type":"tool.started","data":{"call_id":"c1","name":"bash","args":{"command":"ls"}}}` + "\n",
		"{\"type\":\"heartbeat\"}\n\n   \n{\"type\":\"message.delta\",\"data\":{\"text\":\"h\\u00e9llo </script> \\u2028\"}}\r\n",
		"not json\n{\"type\":\"warning\",\"data\":{\"message\":\"x\"}}\n{\"v\":1}\n",
		`{"type":"runner.result","data":{"status":"completed","output":"done","turns":3,"usage":{"prompt_tokens":1,"completion_tokens":2}}}`,
		`{"type":"effect.intent","data":{"id":"i1","tool":"send_email","key":"k","args":null}}` + "\n" + `{"type":"sync","data":{"id":"s1"}}`,
		"{\"type\":\"x\",\"data\":1e400}\n{\"type\":\"\xff\xfe\"}\n[1,2]\n\"str\"\nnull\n",
		`{"type":"retry","ts":"0000-01-01T00:00:00Z","data":{"attempt":1}}` + "\n" + `{"type":"retry","ts":"9999-12-31T23:59:59.999999999-23:59"}`,
		"",
		"\n\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, bad := decodeAll(t, bytes.NewReader(data))
		lines := bytes.Count(data, []byte("\n")) + 1
		if len(evs)+len(bad) > lines {
			t.Fatalf("%d events and %d line errors from %d lines", len(evs), len(bad), lines)
		}
		last := 0
		for _, le := range bad {
			if le.Line < 1 || le.Line > lines || le.Line <= last {
				t.Fatalf("line error names line %d (previous %d, %d lines): %v", le.Line, last, lines, le)
			}
			last = le.Line
			if !strings.Contains(le.Error(), fmt.Sprintf("line %d:", le.Line)) {
				t.Fatalf("line error %q does not name line %d", le.Error(), le.Line)
			}
			if le.Err == nil {
				t.Fatalf("line error on line %d has no cause", le.Line)
			}
			if len(le.Text) > 120+len("…") {
				t.Fatalf("line error preview is %d bytes long", len(le.Text))
			}
			if errors.Is(le, event.ErrLineTooLong) && len(data) <= event.MaxLine {
				t.Fatalf("line %d too long in a %d-byte input", le.Line, len(data))
			}
		}

		for _, e := range evs {
			if e.Type == "" {
				t.Fatalf("decoded an event without a type: %+v", e)
			}
			var buf bytes.Buffer
			if err := event.NewEncoder(&buf).Encode(e); err != nil {
				t.Fatalf("decoded event does not re-encode: %v\nevent: %+v", err, e)
			}
			if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 || !bytes.HasSuffix(buf.Bytes(), []byte("\n")) {
				t.Fatalf("encoded event is not one line: %q", buf.Bytes())
			}
			back, berr := decodeAll(t, &buf)
			if len(berr) != 0 || len(back) != 1 {
				t.Fatalf("re-encoded event does not decode: %d events, errors %v", len(back), berr)
			}
			b := back[0]
			if b.Type != e.Type || b.Seq != e.Seq || b.V != e.V || !b.TS.Equal(e.TS) ||
				b.RunID != e.RunID || b.SessionID != e.SessionID || b.PhaseID != e.PhaseID || b.Attempt != e.Attempt {
				t.Fatalf("round trip changed the envelope:\n got %+v\nwant %+v", b, e)
			}
			if !sameJSON(b.Data, e.Data) {
				t.Fatalf("round trip changed the data: got %s, want %s", b.Data, e.Data)
			}
		}

		// The reader's chunking must not matter.
		evs1, bad1 := decodeAll(t, iotest.OneByteReader(bytes.NewReader(data)))
		if len(evs1) != len(evs) || len(bad1) != len(bad) {
			t.Fatalf("one byte at a time: %d events, %d errors; at once: %d, %d", len(evs1), len(bad1), len(evs), len(bad))
		}
		for i := range bad {
			if bad1[i].Line != bad[i].Line || bad1[i].Text != bad[i].Text {
				t.Fatalf("one byte at a time: line error %d is %v, at once %v", i, bad1[i], bad[i])
			}
		}
		for i := range evs {
			if evs1[i].Type != evs[i].Type || evs1[i].Seq != evs[i].Seq || !bytes.Equal(evs1[i].Data, evs[i].Data) {
				t.Fatalf("one byte at a time: event %d is %+v, at once %+v", i, evs1[i], evs[i])
			}
		}
	})
}
