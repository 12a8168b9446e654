package api

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"agent/event"
)

// The client's flows: start or resume a run and follow it to its end, or
// attach to a session and follow it. Presentation is the caller's: it is
// handed each event as the gateway sent it, in order.

// RunEvent is the frame as a run event, as a local run would have shown it.
func (f EventFrame) RunEvent() event.Event {
	return event.Event{V: event.Version, Seq: f.Seq, TS: f.TS, RunID: f.RunID, SessionID: f.SessionID,
		PhaseID: f.PhaseID, Attempt: f.Attempt, Type: f.Event, Data: f.Data, Subagent: f.Subagent}
}

// Stream is a connection whose event and error frames are queued in
// arrival order, for one goroutine to take them: the client side of a run
// or a session being followed.
type Stream struct {
	*Client
	frames   chan EventFrame
	problems chan ErrorFrame
	stopped  chan struct{}
}

// DialStream dials addr as Dial does, queueing the frames that answer no
// request. Close it when done.
func DialStream(ctx context.Context, addr string, opts ClientOptions) (*Stream, error) {
	s := &Stream{frames: make(chan EventFrame, 1024), problems: make(chan ErrorFrame, 4), stopped: make(chan struct{})}
	opts.OnEvent = func(f EventFrame) {
		select {
		case s.frames <- f:
		case <-s.stopped: // nobody takes them any more
		}
	}
	opts.OnError = func(f ErrorFrame) {
		select {
		case s.problems <- f:
		default:
		}
	}
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	s.Client = c
	return s, nil
}

// Close stops taking frames and closes the connection.
func (s *Stream) Close() {
	close(s.stopped) // first: the reader must not wait on a full queue
	s.Client.Close()
}

// StartRun starts a run of p; with no session the gateway creates one,
// titled title, once it has accepted the run, and attaches this
// connection to it from the start.
func (s *Stream) StartRun(ctx context.Context, p RunStartParams, title string) (RunStartResult, error) {
	if p.SessionID == "" {
		p.Title = title
	}
	// Starting a run in a session attaches to it from before the run.
	var started RunStartResult
	err := s.Call(ctx, MethodRunStart, p, &started)
	return started, err
}

// ResumeRun asks the gateway to resume one of its sessions' runs.
func (s *Stream) ResumeRun(ctx context.Context, p RunResumeParams) (RunStartResult, error) {
	var started RunStartResult
	err := s.Call(ctx, MethodRunResume, p, &started)
	return started, err
}

// ErrStoppedWaiting: the caller asked twice to stop; the run may still be
// ending in the gateway.
var ErrStoppedWaiting = errors.New("stopped waiting; the run may still be ending in the gateway")

// LostError is a connection that ended before the run did: where to
// follow it from again.
type LostError struct {
	RunID, SessionID string
	LastSeq          int64 // the session's last seq shown
	Err              error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("connection lost before run %s ended: %v; follow it with: agent attach %s --after-seq %d",
		e.RunID, e.Err, e.SessionID, e.LastSeq)
}

func (e *LostError) Unwrap() error { return e.Err }

// ProblemError is an error frame the gateway sent on the stream (a slow
// consumer cut off): where to attach again from.
type ProblemError struct{ Frame ErrorFrame }

func (e *ProblemError) Error() string { return e.Frame.Error.Error() }

// Follow hands show every event of the started run, and what the session
// sent before it, until the run's terminal event, whose data it returns.
// A signal from interrupt (signal.Notify's) asks the gateway to interrupt
// the run resumably (run.cancel, mode interrupt), as Ctrl-C does locally;
// a second one stops waiting (ErrStoppedWaiting). When the run parks
// (run.waiting, docs/PROTOCOL.md#waits), parked says whether to stop
// following: then Follow returns the wait as the run's end for now
// (status waiting, exit code 6); nil follows on until the run ends.
func (s *Stream) Follow(started RunStartResult, show func(event.Event), interrupt <-chan os.Signal, parked func(event.RunWaitingData) bool) (event.RunFinishedData, error) {
	interrupted := false
	var lastSeq int64
	// handle shows one frame; done says the run has ended.
	handle := func(fr EventFrame) (fin event.RunFinishedData, done bool) {
		if fr.SessionID == started.SessionID {
			lastSeq = fr.Seq
		}
		if fr.RunID != started.RunID {
			return fin, false
		}
		e := fr.RunEvent()
		show(e)
		var w event.RunWaitingData
		if e.Type == event.RunWaiting && parked != nil && e.Decode(&w) == nil && parked(w) {
			return event.RunFinishedData{Status: event.StatusWaiting, Reason: event.ReasonWaiting, ExitCode: 6,
				Detail: fmt.Sprintf("run %s waits: answer with agent approve, deny or answer %s, or from the web view", started.RunID, started.RunID)}, true
		}
		if !event.IsTerminal(e.Type) {
			return fin, false
		}
		_ = e.Decode(&fin)
		return fin, true
	}
	for {
		select {
		case fr := <-s.frames:
			if fin, done := handle(fr); done {
				return fin, nil
			}
		case p := <-s.problems:
			return event.RunFinishedData{}, &ProblemError{Frame: p}
		case <-interrupt:
			if interrupted {
				return event.RunFinishedData{}, ErrStoppedWaiting
			}
			interrupted = true
			ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
			err := s.Call(ctx, MethodRunCancel, RunCancelParams{RunID: started.RunID, Mode: CancelModeInterrupt}, nil)
			stop()
			if err != nil {
				return event.RunFinishedData{}, fmt.Errorf("interrupt: %w", err)
			}
		case <-s.Done():
			// Every frame that came before the close is queued: a draining
			// gateway sends the run's end, then closes. Show them first.
			for len(s.frames) > 0 {
				if fin, done := handle(<-s.frames); done {
					return fin, nil
				}
			}
			return event.RunFinishedData{}, &LostError{RunID: started.RunID, SessionID: started.SessionID, LastSeq: lastSeq, Err: s.Err()}
		}
	}
}

// Attach replays the session's events after afterSeq and then follows it
// live, handing show each event, until ctx ends (nil), the gateway sends
// an error frame (*ProblemError) or the connection ends (nil if the
// gateway closed it cleanly). begin is called with the replay's answer
// before any event is shown.
func (s *Stream) Attach(ctx context.Context, sessionID string, afterSeq int64, begin func(SessionResumeResult), show func(event.Event)) error {
	var res SessionResumeResult
	if err := s.Call(ctx, MethodSessionResume, SessionResumeParams{SessionID: sessionID, AfterSeq: afterSeq}, &res); err != nil {
		return err
	}
	begin(res)
	drain := func() { // what came before the problem or the close
		for len(s.frames) > 0 {
			show((<-s.frames).RunEvent())
		}
	}
	for {
		select {
		case f := <-s.frames:
			show(f.RunEvent())
		case <-ctx.Done():
			return nil
		case p := <-s.problems:
			drain()
			return &ProblemError{Frame: p}
		case <-s.Done():
			drain()
			if err := s.Err(); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("connection lost: %w", err)
			}
			return nil
		}
	}
}
