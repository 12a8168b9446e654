package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"agent/adapter"
	"agent/event"
	"agent/runner"
)

// FuzzServe feeds arbitrary stdin to runner.Serve, the child side of the
// runner protocol. It must never reach a model: an input whose first line
// ReadSpec accepts is rewritten to run in an empty temporary workspace
// with a replay cassette that does not exist, so Execute fails in llm.Open
// (or earlier, on the tools) before any loop or tool runs. Invariants:
//   - Serve never panics and returns promptly, always with a
//     *runner.SpecError for these inputs;
//   - a spec ReadSpec rejects makes Serve write nothing at all;
//   - whatever Serve writes is whole event lines, stamped with the spec's
//     run, phase and attempt, and never a runner.result.
func FuzzServe(f *testing.F) {
	const spec = `{"run_id":"r1","phase_id":"gather","attempt":1,"workspace":"/ws","mode":"phase","prompt":"go","model":{"name":"m","base_url":"http://127.0.0.1:1"}}`
	for _, s := range []string{
		spec + "\n",
		spec + "\n" + `{"type":"ack","id":"x","proceed":true}` + "\n" + `{"type":"cancel"}` + "\n",
		`{"run_id":"r1","workspace":"/ws","mode":"run","prompt":"hi","tools":["read_file","bash"],"heartbeat_ms":1,"model":{"record":"/tmp/never-written.jsonl"}}`,
		`{"run_id":"r1","phase_id":"plan","attempt":1,"workspace":"/ws","mode":"plan","prompt":"plan it","tools":["no_such_tool"]}` + "\n",
		`{"run_id":"r1","phase_id":"p","attempt":1,"workspace":"/ws","mode":"phase","receipts":[{"type":"email","key":"k"}],"prior":[{"role":"user","content":"x"}]}` + "\n",
		`{"run_id":"r1","phase_id":"p","attempt":0,"workspace":"/ws","mode":"phase"}` + "\n",
		`{"run_id":"","workspace":"/ws","mode":"run"}` + "\n",
		`{"run_id":"r1","workspace":"relative","mode":"run"}` + "\n",
		`{"run_id":"r1","workspace":"/ws","mode":"replay"}` + "\n",
		"not json\n",
		"",
		"\n\n",
	} {
		f.Add([]byte(s))
	}
	// The workspace of accepted specs: empty, and written by nobody.
	ws := f.TempDir()
	missing := filepath.Join(ws, "no-such-cassette.jsonl")

	f.Fuzz(func(t *testing.T, data []byte) {
		in := data
		s, err := adapter.ReadSpec(bufio.NewReader(bytes.NewReader(data)))
		accepted := err == nil
		if accepted {
			var rest []byte
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				rest = data[i+1:]
			}
			s.Workspace = ws
			s.Model = adapter.Model{Name: s.Model.Name, Replay: missing}
			line, err := json.Marshal(s)
			if err != nil {
				t.Fatalf("accepted spec does not marshal: %v", err)
			}
			in = append(append(line, '\n'), rest...)
		}

		// Bounds for a failure only: Serve answers at once, but a loaded
		// machine may take seconds.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- runner.Serve(ctx, bytes.NewReader(in), &out, runner.ServeConfig{}) }()
		var serr error
		select {
		case serr = <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("Serve did not return (accepted spec: %v)\nstdin: %q", accepted, in)
		}

		var se *runner.SpecError
		if !errors.As(serr, &se) {
			t.Fatalf("Serve returned %v (%T), want a *runner.SpecError (accepted spec: %v)\nstdin: %q", serr, serr, accepted, in)
		}
		if !accepted {
			if out.Len() != 0 {
				t.Fatalf("Serve wrote %q for a spec it cannot read", out.Bytes())
			}
			return
		}
		if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
			t.Fatalf("output does not end a line: %q", out.Bytes())
		}
		dec := event.NewDecoder(&out)
		for {
			e, err := dec.Decode()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Serve wrote a bad event line: %v", err)
			}
			if e.Type == event.RunnerResult {
				t.Fatalf("runner.result for a spec that cannot run: %s", e.Data)
			}
			if e.RunID != s.RunID || e.PhaseID != s.PhaseID || e.Attempt != s.Attempt {
				t.Fatalf("event not stamped from the spec: %+v", e)
			}
		}
	})
}
