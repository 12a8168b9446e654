package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"agent/adapter"
	"agent/checkpoint"
	"agent/event"
	"agent/tools"
)

// ServeConfig is what `agent runner` knows besides its spec.
type ServeConfig struct {
	APIKey    string // from the environment: secrets never travel in the spec
	Home      string // AGENT_HOME, for checkpoint blobs; "" turns checkpoints off
	UserAgent string
}

// ErrParentGone means the parent closed the child's stdin: it died, so
// the child stopped at once and started no further side effect.
var ErrParentGone = adapter.ErrParentGone

// defaultHeartbeat is how often a child beats when the spec does not say.
const defaultHeartbeat = 5 * time.Second

// Serve is `agent runner`: the spec is line 1 of in, control lines follow;
// events go to out, one JSON line each, ending with runner.result. It
// returns a *SpecError (or a decoding error) when the spec cannot run,
// ErrParentGone when the parent died, and nil once runner.result is out,
// whatever the run's outcome: that is in the result.
//
// The process is not dumpable (sandbox.Harden, at every agent command's
// start), so other processes of the user cannot reach its stdout through
// /proc/PID/fd.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cfg ServeConfig) error {
	r := bufio.NewReader(in)
	spec, err := adapter.ReadSpec(r)
	if err != nil {
		return &SpecError{Err: err}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	intents := &adapter.Intents{}
	go adapter.WatchControls(r, intents.Ack, func(err error) { //nolint:errcheck // its end is reported through onStop
		intents.Stop(err)
		cancel(err)
	})
	stopSignals := cancelOnSignal(ctx, cancel)
	defer stopSignals()

	sink := &childSink{enc: event.NewEncoder(out), spec: spec, intents: intents}
	if cfg.Home != "" {
		sink.blobs = checkpoint.BlobsIn(cfg.Home)
	}
	stopBeat := heartbeat(ctx, sink, time.Duration(spec.HeartbeatMS)*time.Millisecond)
	defer stopBeat()

	var outbox tools.Outbox
	if spec.Mode != adapter.ModePlan {
		outbox = &childOutbox{sink: sink, intents: intents}
	}
	env := Env{Sink: sink, Outbox: outbox, APIKey: cfg.APIKey, Home: cfg.Home, UserAgent: cfg.UserAgent,
		Tasks: &childTasks{sink: sink, intents: intents}}
	if spec.Hold {
		env.Hold = &childHold{sink: sink, intents: intents}
	}
	res, err := Execute(ctx, spec, env)
	if err != nil {
		return err
	}
	if errors.Is(context.Cause(ctx), adapter.ErrParentGone) {
		return ErrParentGone
	}
	return sink.Emit(context.WithoutCancel(ctx), event.New(event.RunnerResult, res))
}

// cancelOnSignal stops the loop on SIGTERM or SIGINT, as a cancel line
// does: the parent stops a child's whole process group that way.
func cancelOnSignal(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel(adapter.ErrCancelled)
		case <-ctx.Done():
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// childSink writes events to the parent. It stamps the envelope from the
// spec; the parent assigns seq.
type childSink struct {
	enc     *event.Encoder
	spec    adapter.PhaseSpec
	intents *adapter.Intents
	blobs   interface{ PutBytes([]byte) (string, error) } // nil: no data directory

	mu sync.Mutex
	// calls are the tool calls started and not yet completed, each with
	// the parent's token, which its later events carry: one at a time, or
	// a reply's task calls together. last is the one started last: events
	// that name no call are its.
	calls map[string]string
	last  string
}

// blobAbove is the size of event data the child sends through the blob
// store rather than on a line, far below the parent's line limit
// (event.MaxLine): a 12 MB write_file must arrive whole.
const blobAbove = 1 << 20

func (s *childSink) Emit(ctx context.Context, e event.Event) error {
	e.RunID, e.SessionID, e.PhaseID, e.Attempt = s.spec.RunID, s.spec.SessionID, s.spec.PhaseID, s.spec.Attempt
	call := callOf(e) // read before its data may go to the blob store
	e.Token = s.token(e.Type, call)
	if len(e.Data) > blobAbove && s.blobs != nil {
		sha, err := s.blobs.PutBytes(e.Data)
		if err != nil {
			return fmt.Errorf("save the data of a %s for the parent: %w", e.Type, err)
		}
		e.Data, e.Blob = nil, sha
	}
	if err := s.enc.Encode(e); err != nil {
		return fmt.Errorf("write to the parent: %w", err)
	}
	s.track(e.Type, call)
	if e.Type == event.ToolStarted || e.Type == event.CheckpointCreated {
		return s.sync(ctx, e.Type == event.ToolStarted)
	}
	return nil
}

// callOf is the tool call an event names, if it names one.
func callOf(e event.Event) string {
	var d struct {
		CallID string `json:"call_id"`
	}
	switch e.Type {
	case event.ToolStarted, event.ToolCompleted, event.ToolProgress, event.EffectIntent, event.TaskRequest:
		if e.Decode(&d) == nil {
			return d.CallID
		}
	}
	return ""
}

// token is the token an event of type typ carries: that of the call it
// names, or else of the last call.
func (s *childSink) token(typ, call string) string {
	if typ == event.ToolStarted {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if call != "" {
		return s.calls[call]
	}
	return s.calls[s.last]
}

// track notes which tool calls are open, for the intents and task
// requests their tools make.
func (s *childSink) track(typ, call string) {
	if call == "" || typ != event.ToolStarted && typ != event.ToolCompleted {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]string{}
	}
	switch {
	case typ == event.ToolStarted:
		s.calls[call], s.last = "", call
	default:
		delete(s.calls, call)
		if s.last == call {
			s.last = ""
		}
	}
}

// openCall is the tool call started last and still running, "" between
// calls.
func (s *childSink) openCall() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// sync waits until the parent has persisted everything sent so far: a
// tool call is on record before it runs, a checkpoint before the file
// changes, even if the parent dies the next moment (docs/PROTOCOL.md#sync). After a
// tool.started the ack carries the call's token.
func (s *childSink) sync(ctx context.Context, started bool) error {
	id := uuid.NewString()
	if err := s.enc.Encode(event.New(event.Sync, event.SyncData{ID: id})); err != nil {
		return fmt.Errorf("write to the parent: %w", err)
	}
	ack, err := s.intents.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("the parent did not confirm: %w", err)
	}
	if !ack.Proceed {
		return fmt.Errorf("the parent refused to go on: %s", ack.Reason)
	}
	if started {
		s.mu.Lock()
		if _, open := s.calls[s.last]; open {
			s.calls[s.last] = ack.Token
		}
		s.mu.Unlock()
	}
	return nil
}

// heartbeat tells the parent the child is alive while the model or a
// tool is busy.
func heartbeat(ctx context.Context, sink *childSink, every time.Duration) (stop func()) {
	if every <= 0 {
		every = defaultHeartbeat
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = sink.Emit(ctx, event.New(event.Heartbeat, nil))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// childOutbox is the outbox of `agent runner`: the intent goes to the
// parent as effect.intent, naming the tool call that makes it, and the
// effect starts only after the parent has persisted it and acked. If the
// parent is gone, nothing starts. The parent alone knows what already
// happened, and with which arguments. The outcome goes to the parent while
// the call is open: the parent takes it only then (adapter/trust.go).
type childOutbox struct {
	sink    *childSink
	intents *adapter.Intents
}

func (o *childOutbox) Begin(ctx context.Context, in tools.Intent) (*event.ReceiptData, error) {
	id := uuid.NewString()
	call := o.sink.openCall()
	if err := o.sink.Emit(ctx, event.New(event.EffectIntent, event.EffectIntentData{
		ID: id, CallID: call, Tool: in.Tool, Key: in.Key, ReceiptType: in.ReceiptType, Args: in.Args,
	})); err != nil {
		return nil, err
	}
	ack, err := o.intents.Wait(ctx, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("the parent did not confirm the intent: %w", err)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case ack.Receipt != nil && ack.Different:
		return nil, &tools.DifferentError{Receipt: *ack.Receipt, Args: ack.Args}
	case ack.Receipt != nil:
		return ack.Receipt, nil
	case ack.Unknown:
		return nil, tools.ErrUnknownOutcome
	case !ack.Proceed:
		return nil, fmt.Errorf("the parent refused: %s", ack.Reason)
	}
	return nil, nil
}

func (o *childOutbox) Report(ctx context.Context, e event.Event) error {
	return o.sink.Emit(ctx, e)
}

// childTasks asks the parent for the sub-run of each task call
// (task.request, docs/PROTOCOL.md#subagents): only the parent keeps the
// store. The child goes on beating meanwhile; the ack says how the
// sub-run ended.
type childTasks struct {
	sink    *childSink
	intents *adapter.Intents
}

// childHold waits for a question that cannot park through the parent,
// which waits in its own process (adapter.Config.OnHold): the child's
// run.waiting is on record before the hold line, which asks for its
// answer; the ack carries it.
type childHold struct {
	sink    *childSink
	intents *adapter.Intents
}

func (t *childTasks) Delegate(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
	req.ID = uuid.NewString()
	if err := t.sink.Emit(ctx, event.New(event.TaskRequest, req)); err != nil {
		return event.TaskResultData{}, err
	}
	ack, err := t.intents.Wait(ctx, req.ID)
	switch {
	case err != nil:
		return event.TaskResultData{}, fmt.Errorf("the parent did not answer the task: %w", err)
	case ack.Task == nil:
		return event.TaskResultData{}, fmt.Errorf("the parent did not run the task: %s", ack.Reason)
	}
	return *ack.Task, nil
}

func (h *childHold) Wait(ctx context.Context, w event.RunWaitingData) (event.WaitResolvedData, error) {
	id := uuid.NewString()
	if err := h.sink.Emit(ctx, event.New(event.Hold, event.HoldData{ID: id, WaitID: w.WaitID})); err != nil {
		return event.WaitResolvedData{}, err
	}
	ack, err := h.intents.Wait(ctx, id)
	switch {
	case err != nil:
		return event.WaitResolvedData{}, fmt.Errorf("the parent did not answer the hold: %w", err)
	case !ack.Proceed || ack.Resolution == nil:
		return event.WaitResolvedData{}, fmt.Errorf("the parent refused to wait for the answer: %s", ack.Reason)
	}
	return *ack.Resolution, nil
}
