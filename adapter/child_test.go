package adapter

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"agent/event"
)

func TestReadSpec(t *testing.T) {
	t.Parallel()
	const good = `{"run_id":"r","phase_id":"p","attempt":1,"workspace":"/ws","mode":"phase","prompt":"go"}`
	cases := []struct {
		name      string
		input     string
		wantField string // a *SpecError on this field
		wantErr   string // or an error containing this
	}{
		{name: "valid", input: good + "\n"},
		{name: "valid without a newline", input: good},
		{name: "no run_id", input: `{"phase_id":"p","attempt":1,"workspace":"/ws","mode":"phase"}`, wantField: "run_id"},
		{name: "no phase_id", input: `{"run_id":"r","attempt":1,"workspace":"/ws","mode":"phase"}`, wantField: "phase_id"},
		{name: "attempt 0", input: `{"run_id":"r","phase_id":"p","workspace":"/ws","mode":"phase"}`, wantField: "attempt"},
		{name: "no workspace", input: `{"run_id":"r","phase_id":"p","attempt":1,"mode":"phase"}`, wantField: "workspace"},
		{name: "relative workspace", input: `{"run_id":"r","phase_id":"p","attempt":1,"workspace":"ws","mode":"phase"}`, wantField: "workspace"},
		{name: "no mode", input: `{"run_id":"r","phase_id":"p","attempt":1,"workspace":"/ws"}`, wantField: "mode"},
		{name: "unknown mode", input: `{"run_id":"r","phase_id":"p","attempt":1,"workspace":"/ws","mode":"yolo"}`, wantField: "mode"},
		{name: "not json", input: "hello\n", wantErr: "decode phase spec"},
		{name: "empty stdin", input: "", wantErr: "stdin closed before the spec"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec, err := ReadSpec(bufio.NewReader(strings.NewReader(tc.input)))
			var se *SpecError
			switch {
			case tc.wantField != "":
				if !errors.As(err, &se) || se.Field != tc.wantField || !strings.Contains(err.Error(), tc.wantField) {
					t.Errorf("error %v, want one naming %s", err, tc.wantField)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("unexpected error: %v", err)
			case spec.Prompt != "go":
				t.Errorf("spec %+v", spec)
			}
		})
	}
}

func TestWatchControlsAfterTheSpec(t *testing.T) {
	t.Parallel()
	// What a parent writes: spec, an ack, a cancel; the child keeps one reader.
	in := bufio.NewReader(strings.NewReader(
		`{"run_id":"r","phase_id":"p","attempt":1,"workspace":"/ws","mode":"phase"}` + "\n" +
			`{"type":"ack","id":"i1","proceed":true}` + "\n" +
			"not a control line\n" +
			`{"type":"cancel","reason":"Ctrl-C"}` + "\n"))
	if _, err := ReadSpec(in); err != nil {
		t.Fatal(err)
	}
	var acks []Control
	var stops []error
	err := WatchControls(in, func(c Control) { acks = append(acks, c) }, func(err error) { stops = append(stops, err) })
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != 1 || acks[0].ID != "i1" || !acks[0].Proceed {
		t.Errorf("acks %+v", acks)
	}
	if len(stops) != 1 || !errors.Is(stops[0], ErrCancelled) {
		t.Errorf("onStop calls %v, want one ErrCancelled (and none for the EOF after it)", stops)
	}
}

func TestWatchControlsStopsWhenTheParentDies(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	acked := make(chan Control, 1)
	stopped := make(chan error, 1)
	returned := make(chan error, 1)
	go func() {
		returned <- WatchControls(bufio.NewReader(pr), func(c Control) { acked <- c }, func(err error) { stopped <- err })
	}()

	if _, err := io.WriteString(pw, `{"type":"ack","id":"i1","proceed":true}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if c := <-acked; c.ID != "i1" {
		t.Errorf("ack %+v", c)
	}
	select {
	case err := <-stopped:
		t.Fatalf("stopped while stdin was open: %v", err)
	default:
	}

	pw.Close() // the parent died
	select {
	case err := <-stopped:
		if !errors.Is(err, ErrParentGone) {
			t.Errorf("onStop(%v), want ErrParentGone", err)
		}
	case <-time.After(patience):
		t.Fatal("onStop not called at EOF")
	}
	if err := <-returned; err != nil {
		t.Errorf("WatchControls = %v at EOF", err)
	}
}

func TestIntents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ack before and after Wait", func(t *testing.T) {
		t.Parallel()
		var in Intents
		in.Ack(Control{Type: ControlAck, ID: "early", Proceed: true})
		if c, err := in.Wait(ctx, "early"); err != nil || !c.Proceed {
			t.Errorf("early ack: %+v, %v", c, err)
		}
		go func() {
			waitPending(t, &in, "late")
			in.Ack(Control{Type: ControlAck, ID: "late", Receipt: &event.ReceiptData{Type: "email_sent", Key: "k"}})
		}()
		if c, err := in.Wait(ctx, "late"); err != nil || c.Proceed || c.Receipt == nil || c.Receipt.Key != "k" {
			t.Errorf("late ack: %+v, %v", c, err)
		}
	})

	t.Run("stop fails pending and later waits", func(t *testing.T) {
		t.Parallel()
		var in Intents
		go func() {
			waitPending(t, &in, "x")
			in.Stop(ErrParentGone)
			in.Ack(Control{Type: ControlAck, ID: "x", Proceed: true}) // too late: ignored
		}()
		if _, err := in.Wait(ctx, "x"); !errors.Is(err, ErrParentGone) {
			t.Errorf("pending Wait = %v, want ErrParentGone", err)
		}
		if _, err := in.Wait(ctx, "y"); !errors.Is(err, ErrParentGone) {
			t.Errorf("Wait after Stop = %v", err)
		}
	})

	t.Run("ctx ends the wait", func(t *testing.T) {
		t.Parallel()
		var in Intents
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := in.Wait(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait = %v, want the deadline", err)
		}
	})
}

// waitPending returns once a Wait for id is under way, so what the test
// does next reaches a pending Wait, not an early one.
func waitPending(t *testing.T, in *Intents, id string) {
	for deadline := time.Now().Add(patience); ; time.Sleep(time.Millisecond) {
		in.mu.Lock()
		_, ok := in.waiting[id]
		in.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no Wait for %s began", id)
			return
		}
	}
}
