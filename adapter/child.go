package adapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The child's side of the protocol: `agent runner` reads its spec with
// ReadSpec, then hands the same reader to WatchControls for the rest of
// stdin, and waits for acks with Intents:
//
//	in := bufio.NewReader(os.Stdin)
//	spec, err := adapter.ReadSpec(in)
//	ctx, cancel := context.WithCancelCause(ctx)
//	intents := &adapter.Intents{}
//	go adapter.WatchControls(in, intents.Ack, func(err error) {
//		intents.Stop(err)
//		cancel(err)
//	})

// Why a child must stop: passed to WatchControls' onStop.
var (
	ErrCancelled  = errors.New("cancelled by the parent")
	ErrParentGone = errors.New("the parent closed stdin")
)

// ReadSpec reads line 1 of the child's stdin and validates it. Errors name
// the bad field (a *SpecError). r is left at the first control line.
func ReadSpec(r *bufio.Reader) (PhaseSpec, error) {
	line, err := r.ReadBytes('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0) {
		if errors.Is(err, io.EOF) {
			return PhaseSpec{}, errors.New("read phase spec: stdin closed before the spec arrived")
		}
		return PhaseSpec{}, fmt.Errorf("read phase spec: %w", err)
	}
	var spec PhaseSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		return PhaseSpec{}, fmt.Errorf("decode phase spec: %w", err)
	}
	if err := spec.Validate(); err != nil {
		return PhaseSpec{}, err
	}
	return spec, nil
}

// WatchControls reads control lines until stdin ends, calling onAck for
// each ack. onStop is called exactly once: with ErrCancelled on a cancel
// line, or at the end of stdin with ErrParentGone (or the read error) —
// the parent died, so the child must stop at once and start no side
// effect. Lines it does not understand are skipped. It returns nil at EOF.
//
// It blocks in Read, so run it on its own goroutine for the child's life.
func WatchControls(r *bufio.Reader, onAck func(Control), onStop func(error)) error {
	stopped := false
	stop := func(err error) {
		if !stopped {
			stopped = true
			if onStop != nil {
				onStop(err)
			}
		}
	}
	for {
		line, err := r.ReadBytes('\n')
		var c Control
		if len(bytes.TrimSpace(line)) > 0 && json.Unmarshal(line, &c) == nil {
			switch c.Type {
			case ControlAck:
				if onAck != nil {
					onAck(c)
				}
			case ControlCancel:
				stop(ErrCancelled)
			}
		}
		if errors.Is(err, io.EOF) {
			stop(ErrParentGone)
			return nil
		}
		if err != nil {
			err = fmt.Errorf("read control line: %w", err)
			stop(fmt.Errorf("%w: %w", ErrParentGone, err))
			return err
		}
	}
}

// Intents matches the parent's acks to the effect intents a child waits
// on. The zero value is ready to use; it is safe for concurrent use.
type Intents struct {
	mu      sync.Mutex
	early   map[string]Control      // acks that came before their Wait
	waiting map[string]chan Control // Waits that have no ack yet
	err     error                   // set by Stop: every Wait fails from then on
}

// Ack delivers an ack (pass it to WatchControls as onAck).
func (in *Intents) Ack(c Control) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err != nil {
		return
	}
	if ch, ok := in.waiting[c.ID]; ok {
		delete(in.waiting, c.ID)
		ch <- c // buffered: never blocks
		return
	}
	if in.early == nil {
		in.early = map[string]Control{}
	}
	in.early[c.ID] = c
}

// Stop fails every pending and future Wait with err (ErrCancelled if nil).
func (in *Intents) Stop(err error) {
	if err == nil {
		err = ErrCancelled
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err != nil {
		return
	}
	in.err = err
	for id, ch := range in.waiting {
		delete(in.waiting, id)
		close(ch)
	}
}

// Wait blocks until the parent acks intent id. The returned Control says
// whether to proceed, or carries the receipt of an effect that already
// happened. On an error — stdin closed, cancel, ctx done — the child must
// not perform the effect.
func (in *Intents) Wait(ctx context.Context, id string) (Control, error) {
	in.mu.Lock()
	if in.err != nil {
		err := in.err
		in.mu.Unlock()
		return Control{}, fmt.Errorf("intent %s: %w", id, err)
	}
	if c, ok := in.early[id]; ok {
		delete(in.early, id)
		in.mu.Unlock()
		return c, nil
	}
	ch := make(chan Control, 1)
	if in.waiting == nil {
		in.waiting = map[string]chan Control{}
	}
	in.waiting[id] = ch
	in.mu.Unlock()

	select {
	case c, ok := <-ch:
		if !ok {
			in.mu.Lock()
			err := in.err
			in.mu.Unlock()
			return Control{}, fmt.Errorf("intent %s: %w", id, err)
		}
		return c, nil
	case <-ctx.Done():
		in.mu.Lock()
		if in.waiting[id] == ch {
			delete(in.waiting, id)
		}
		in.mu.Unlock()
		return Control{}, fmt.Errorf("intent %s: %w", id, context.Cause(ctx))
	}
}
