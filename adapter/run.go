package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"agent/event"
)

// Defaults of Config.
const (
	DefaultTimeout          = 30 * time.Minute
	DefaultGrace            = 10 * time.Second
	DefaultHeartbeatTimeout = 2 * time.Minute
)

// stderrTail is how much of the child's stderr a crash Reason quotes.
const stderrTail = 2 << 10

// maxWaitDelay bounds how long Run waits, after the child exits, for a
// grandchild that still holds the child's stdout or stderr.
const maxWaitDelay = 2 * time.Second

// Config says how to run one child. The zero value runs this binary as
// `agent runner` in spec.Workspace with the defaults above.
type Config struct {
	Exe  string   // default: os.Executable()
	Args []string // default: []string{"runner"}; argv[0] is always "agent"
	Env  []string // default: os.Environ(); secrets travel here, never in the spec
	Dir  string   // working directory; default: spec.Workspace

	// LogPath receives the child's stderr, appended; parent directories
	// are created. Empty: stderr is kept only for the crash Reason.
	LogPath string

	Timeout time.Duration // the whole attempt; default 30m
	Grace   time.Duration // SIGTERM to SIGKILL; default 10s
	// HeartbeatTimeout: no line at all from the child for this long means
	// it hung; default 2m. When spec.HeartbeatMS is 0, Run asks the child
	// to beat four times per HeartbeatTimeout.
	HeartbeatTimeout time.Duration

	// OnEvent receives every event worth keeping, in arrival order, from
	// one goroutine. An error stops the attempt: the child is killed and
	// Run returns the error.
	OnEvent func(event.Event) error
	// OnIntent answers an effect.intent; the caller persists the intent
	// before returning. Its Type and ID are filled in by Run. Nil means
	// always proceed.
	OnIntent func(event.EffectIntentData) Control
	// Blobs holds the data of events too large for a line (Event.Blob);
	// nil drops such events with a warning.
	Blobs BlobReader
	// OnTask runs the sub-run of a task call the child asks for
	// (docs/PROTOCOL.md#subagents), on a goroutine of its own: several may
	// run at once, and the child goes on beating meanwhile. Its context ends
	// when the attempt stops. Nil refuses task calls.
	OnTask func(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error)
	// OnHold waits for the answer to the child's wait waitID (a hold
	// line, docs/PROTOCOL.md#runner-protocol), on a goroutine of its own,
	// until ctx ends with the attempt; nil refuses holds.
	OnHold func(ctx context.Context, waitID string) (event.WaitResolvedData, error)
}

// BlobReader reads a blob by its sha256, checking the content matches;
// checkpoint.Blobs implements it.
type BlobReader interface {
	Get(sha string) ([]byte, error)
}

// Result is what one attempt produced. What the attempt did to the
// workspace and the world is in its events, which the caller persisted.
type Result struct {
	// Status is how the attempt ended, one of event's words:
	// StatusCompleted (the runner reported success, then exited 0),
	// StatusFailed (it reported failure), StatusWaiting (it parked on a
	// wait, docs/PROTOCOL.md#waits: the attempt goes on, where it stopped,
	// once the wait is resolved), StatusCrashed (no result: the
	// child died, went silent and was killed, or printed a result and then
	// did not exit 0), StatusTimeout (Config.Timeout elapsed first) or
	// StatusCancelled (ctx was cancelled, or OnEvent failed, first).
	// StatusLost (the process running the child went away: a worker
	// stopped or died) is a caller's, never returned by Run.
	Status string `json:"status"`
	Output string `json:"output,omitempty"`
	// Reason says why, for anything but completed. For crashed it ends
	// with the tail of the child's stderr.
	Reason string      `json:"reason,omitempty"`
	Turns  int         `json:"turns,omitempty"`
	Usage  event.Usage `json:"usage"`
	// Report is the runner.result as the child sent it; nil without one.
	// Its Reason word says, for instance, that the model provider failed.
	Report *event.RunnerResultData `json:"report,omitempty"`

	ExitCode int `json:"exit_code"` // the child's exit code; -1 if a signal killed it
	Warnings int `json:"warnings,omitempty"`
}

// Run starts a child, feeds it spec, forwards its events and waits for it.
//
// Run returns an error only when no attempt was made (an invalid spec or
// config, the log file or the process could not be opened or started, ctx
// already done) or when OnEvent failed; in that last case the Result is
// returned too. Everything the child does — crash, hang, timeout — is a
// Result with a nil error. So is a cancelled ctx: the child gets a cancel
// line and SIGTERM, the Result says "cancelled", and the caller checks
// ctx.Err() to tell a Ctrl-C from a failed attempt.
//
// Stopping (timeout, hang, cancel, OnEvent error) signals the child's
// process group and the groups of its descendants, so tools that run in a
// group of their own stop too. Once the child has exited, whatever is left
// in those groups is killed: nothing outlives its attempt.
func Run(ctx context.Context, cfg Config, spec PhaseSpec) (*Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(spec)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runner not started: %w", err)
	}
	if spec.HeartbeatMS == 0 {
		spec.HeartbeatMS = max(1, int(cfg.HeartbeatTimeout/4/time.Millisecond))
	}
	specLine, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode phase spec: %w", err)
	}
	stderr, err := openStderrLog(cfg.LogPath, stderrTail)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()

	a := newAttempt(ctx, cfg, spec)
	defer a.stopTasks(nil)
	return a.run(ctx, append(specLine, '\n'), stderr)
}

func (c Config) withDefaults(spec PhaseSpec) (Config, error) {
	if c.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("find the agent binary: %w", err)
		}
		c.Exe = exe
	}
	if c.Args == nil {
		c.Args = []string{"runner"}
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Dir == "" {
		c.Dir = spec.Workspace
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	return c, nil
}

// attempt is the state of one Run. Only Run's goroutine touches it.
type attempt struct {
	cfg  Config
	spec PhaseSpec
	res  Result

	// report is the child's runner.result, results how many it sent:
	// whether the report counts is settled once the child has exited.
	report  *event.RunnerResultData
	results int
	// stopping is set once Run has asked the child to stop; stopStatus
	// and stopReason are the verdict when that came before a runner.result.
	stopping               bool
	stopStatus, stopReason string
	kill                   <-chan time.Time // fires Grace after stopping
	eventErr               error            // OnEvent failed: forward nothing more

	// calls are the tool calls the child has open (one, or a reply's task
	// calls), last the one it opened last, and allowed the effects this
	// attempt gave the go-ahead for, by key: the only ones whose outcome
	// it may report (trust.go).
	calls   map[string]*openCall
	last    string
	allowed map[string]goAhead

	// tasks are the task calls' sub-runs running (OnTask) and the holds
	// waiting for their answers (OnHold), stopped by stopTasks once the
	// attempt stops.
	tasks     sync.WaitGroup
	taskCtx   context.Context
	stopTasks context.CancelCauseFunc
	// held are the answers holds were given, by wait id: the child's
	// wait.resolved of such a wait is taken as that answer (trust.go).
	heldMu sync.Mutex
	held   map[string]event.WaitResolvedData

	ctl   *controlWriter
	procs *processTree
}

func newAttempt(ctx context.Context, cfg Config, spec PhaseSpec) *attempt {
	a := &attempt{cfg: cfg, spec: spec, calls: map[string]*openCall{}, allowed: map[string]goAhead{}}
	a.taskCtx, a.stopTasks = context.WithCancelCause(ctx)
	return a
}

// decoded is one line of the child's stdout: an event or a *LineError.
type decoded struct {
	ev  event.Event
	bad *event.LineError
}

func (a *attempt) run(ctx context.Context, specLine []byte, stderr *stderrLog) (*Result, error) {
	// The child's stdout is copied by os/exec into an io.Pipe that we
	// decode. That lets cmd.WaitDelay bound the wait for a grandchild that
	// holds stdout open, and Wait returns only once every byte is read.
	pr, pw := io.Pipe()
	cmd := exec.Command(a.cfg.Exe, a.cfg.Args...)
	cmd.Args[0] = "agent"
	cmd.Env = a.cfg.Env
	cmd.Dir = a.cfg.Dir
	cmd.Stdout = pw
	cmd.Stderr = stderr
	cmd.WaitDelay = min(a.cfg.Grace, maxWaitDelay)
	// Its own process group, so stopping it stops the tools it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		pw.Close()
		pr.Close()
		return nil, fmt.Errorf("runner stdin: %w", err)
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		return nil, fmt.Errorf("start runner %s: %w", a.cfg.Exe, err)
	}
	a.procs = newProcessTree(cmd.Process.Pid)
	a.ctl = newControlWriter(stdin)
	a.ctl.send(specLine)

	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		a.procs.exited.Store(true)
		pw.Close() // the decoder sees EOF after the last line
		waited <- err
	}()

	// The reader never blocks the copy for long: this loop drains lines
	// until the channel closes, whatever else happens.
	lines := make(chan decoded, 16)
	go readLines(pr, lines)

	heartbeat := time.NewTimer(a.cfg.HeartbeatTimeout)
	defer heartbeat.Stop()
	timeout := time.NewTimer(a.cfg.Timeout)
	defer timeout.Stop()
	done := ctx.Done()
	for lines != nil {
		select {
		case d, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			heartbeat.Reset(a.cfg.HeartbeatTimeout)
			a.handle(d)
		case <-heartbeat.C:
			a.stop(event.StatusCrashed, fmt.Sprintf("no output or heartbeat from the runner for %v", a.cfg.HeartbeatTimeout))
		case <-timeout.C:
			a.stop(event.StatusTimeout, fmt.Sprintf("phase timed out after %v", a.cfg.Timeout))
		case <-done:
			done = nil
			a.stop(event.StatusCancelled, fmt.Sprintf("cancelled: %v", context.Cause(ctx)))
		case <-a.kill:
			a.kill = nil
			a.procs.signal(syscall.SIGKILL)
		}
	}
	waitErr := <-waited
	// Whatever is left in the attempt's process groups is an orphan now,
	// and no sub-run has anyone to answer.
	a.procs.signal(syscall.SIGKILL)
	a.stopTasks(errors.New("the runner exited"))
	a.tasks.Wait()
	a.ctl.close()
	a.finish(cmd.ProcessState, waitErr, stderr.Tail())
	return &a.res, a.eventErr
}

// readLines decodes the child's stdout until EOF.
func readLines(r io.Reader, out chan<- decoded) {
	defer close(out)
	dec := event.NewDecoder(r)
	for {
		ev, err := dec.Decode()
		var bad *event.LineError
		switch {
		case err == nil:
			out <- decoded{ev: ev}
		case errors.As(err, &bad):
			out <- decoded{bad: bad}
		default:
			return // io.EOF: Wait has returned and closed the pipe
		}
	}
}

// stop asks the child to stop: a cancel line, SIGTERM to its process
// groups now and SIGKILL after Grace. A verdict only counts when no
// runner.result came first; it is then final.
func (a *attempt) stop(status, reason string) {
	if a.stopping {
		return
	}
	a.stopping = true
	if a.report == nil {
		a.stopStatus, a.stopReason = status, reason
	}
	a.stopTasks(errors.New(reason))
	a.sendControl(Control{Type: ControlCancel, Reason: reason})
	a.procs.signal(syscall.SIGTERM)
	a.kill = time.After(a.cfg.Grace)
}

func (a *attempt) handle(d decoded) {
	if d.bad != nil {
		a.warn(fmt.Sprintf("runner output line %d: %v (%q)", d.bad.Line, d.bad.Err, d.bad.Text))
		return
	}
	e, ok := a.unblob(a.fill(d.ev))
	if !ok {
		return
	}
	switch e.Type {
	case event.Heartbeat:
		// Only feeds the watchdog, which every line resets.
	case event.RunnerResult:
		a.result(e)
	case event.EffectIntent:
		a.intent(e)
	case event.Sync:
		a.sync(e)
	case event.TaskRequest:
		a.task(e)
	case event.Hold:
		a.hold(e)
	default:
		if e, ok := a.check(e); ok {
			a.forward(e)
		}
	}
}

// fill stamps an event with what the child may leave out. Seq is the
// persisting process's to assign, never the child's.
func (a *attempt) fill(e event.Event) event.Event {
	e.Seq = 0
	if e.V == 0 {
		e.V = event.Version
	}
	if e.TS.IsZero() {
		e.TS = time.Now().UTC()
	}
	if e.RunID == "" {
		e.RunID = a.spec.RunID
	}
	if e.SessionID == "" {
		e.SessionID = a.spec.SessionID
	}
	// A ModeRun child has no phase; a phase child cannot speak for another.
	e.PhaseID, e.Attempt = a.spec.PhaseID, a.spec.Attempt
	return e
}

func (a *attempt) warn(msg string) {
	a.res.Warnings++
	a.forward(a.fill(event.New(event.Warning, event.WarningData{Message: msg})))
}

func (a *attempt) forward(e event.Event) {
	if a.cfg.OnEvent == nil || a.eventErr != nil {
		return
	}
	e.Token = "" // the call's secret, never kept
	if err := a.cfg.OnEvent(e); err != nil {
		a.eventErr = err
		a.stop(event.StatusCancelled, fmt.Sprintf("stopped by the parent: %v", err))
	}
}

// result keeps a runner.result until the child has exited (finish). A
// child sends one: with two, one is not its own, and neither counts.
func (a *attempt) result(e event.Event) {
	var r event.RunnerResultData
	if err := e.Decode(&r); err != nil || !resultStatuses[r.Status] {
		a.warn(fmt.Sprintf("runner sent a malformed %s: %s", event.RunnerResult, clipLine(string(e.Data))))
		return
	}
	a.results++
	if a.results == 2 {
		a.warn(fmt.Sprintf("runner sent a second %s: one of them is not its own, so neither counts", event.RunnerResult))
	}
	a.report = &r
}

// intent answers an effect.intent on the child's stdin. Once the attempt
// is stopping no new side effect may start, so the answer is no.
func (a *attempt) intent(e event.Event) {
	var in event.EffectIntentData
	if err := e.Decode(&in); err != nil || in.ID == "" {
		a.warn(fmt.Sprintf("runner sent a malformed %s: %s", event.EffectIntent, e.Data))
		return
	}
	c := Control{Proceed: true}
	why := a.askedBy(in.CallID, in.Tool, e.Token)
	switch {
	case a.stopping:
		c = Control{Reason: "the attempt is stopping"}
	case why != "":
		a.warn(fmt.Sprintf("ignored an %s from the runner for %q: %s", event.EffectIntent, in.Key, why))
		c = Control{Reason: "no open tool call of this runner asked for it"}
	case a.cfg.OnIntent != nil:
		a.calls[in.CallID].asked = true
		c = a.cfg.OnIntent(in)
	default:
		a.calls[in.CallID].asked = true
	}
	if c.Proceed {
		a.allowed[in.Key] = goAhead{call: in.CallID, receiptType: in.ReceiptType}
	}
	c.Type, c.ID = ControlAck, in.ID
	a.sendControl(c)
}

// sync acks a child's sync request. Events are handled one at a time and
// OnEvent persists before it returns, so everything the child sent before
// is durable now. A stopping attempt, or one whose events can no longer
// be persisted, gets a refusal: the child must not go on. The ack carries
// the open tool call's token (trust.go).
func (a *attempt) sync(e event.Event) {
	var d event.SyncData
	if err := e.Decode(&d); err != nil || d.ID == "" {
		a.warn(fmt.Sprintf("runner sent a malformed %s: %s", event.Sync, e.Data))
		return
	}
	c := Control{Type: ControlAck, ID: d.ID, Proceed: true}
	switch {
	case a.stopping:
		c.Proceed, c.Reason = false, "the attempt is stopping"
	case a.eventErr != nil:
		c.Proceed, c.Reason = false, "events cannot be persisted: "+a.eventErr.Error()
	default:
		// Only the child reads this line: the token proves its call's
		// later events are its own.
		if call := a.calls[a.last]; call != nil {
			c.Token = call.token
		}
	}
	a.sendControl(c)
}

// task runs the sub-run a task call asks for, on its own goroutine
// (Config.OnTask), and acks the request with how it ended. A request that
// is not the open task call's own, or comes once the attempt is stopping,
// is refused at once.
func (a *attempt) task(e event.Event) {
	var in event.TaskRequestData
	if err := e.Decode(&in); err != nil || in.ID == "" {
		a.warn(fmt.Sprintf("runner sent a malformed %s: %s", event.TaskRequest, clipLine(string(e.Data))))
		return
	}
	why := a.askedBy(in.CallID, taskTool, e.Token)
	switch {
	case a.stopping:
		why = "the attempt is stopping"
	case why != "":
		a.warn(fmt.Sprintf("ignored a %s from the runner: %s", event.TaskRequest, why))
	case a.cfg.OnTask == nil:
		why = "this parent runs no subagents"
	}
	if why != "" {
		a.sendControl(Control{Type: ControlAck, ID: in.ID, Reason: why})
		return
	}
	a.calls[in.CallID].asked = true
	a.tasks.Add(1)
	go func() {
		defer a.tasks.Done()
		res, err := a.cfg.OnTask(a.taskCtx, in)
		c := Control{Type: ControlAck, ID: in.ID, Proceed: err == nil, Task: &res}
		if err != nil {
			c.Task, c.Reason = nil, err.Error()
		}
		a.sendControl(c)
	}()
}

// hold answers a child's hold once its wait has an answer, waiting on a
// goroutine of its own (OnHold) while the attempt reads the child's
// events. Only an open call may ask (its token), and only when the
// parent holds; otherwise the ack refuses.
func (a *attempt) hold(e event.Event) {
	var d event.HoldData
	if err := e.Decode(&d); err != nil || d.ID == "" || d.WaitID == "" {
		a.warn(fmt.Sprintf("runner sent a malformed %s: %s", event.Hold, clipLine(string(e.Data))))
		return
	}
	why := ""
	switch {
	case a.stopping:
		why = "the attempt is stopping"
	case !a.openToken(e.Token):
		why = "no open tool call of this runner asked for it"
		a.warn(fmt.Sprintf("ignored a %s from the runner for wait %s: %s", event.Hold, d.WaitID, why))
	case a.cfg.OnHold == nil:
		why = "this parent does not wait for answers while a call runs"
	}
	if why != "" {
		a.sendControl(Control{Type: ControlAck, ID: d.ID, Reason: why})
		return
	}
	a.tasks.Add(1)
	go func() {
		defer a.tasks.Done()
		res, err := a.cfg.OnHold(a.taskCtx, d.WaitID)
		if err != nil {
			a.sendControl(Control{Type: ControlAck, ID: d.ID, Reason: err.Error()})
			return
		}
		a.heldMu.Lock()
		if a.held == nil {
			a.held = map[string]event.WaitResolvedData{}
		}
		a.held[d.WaitID] = res
		a.heldMu.Unlock()
		a.sendControl(Control{Type: ControlAck, ID: d.ID, Proceed: true, Resolution: &res})
	}()
}

// heldAnswer is the answer a hold for waitID was given, if one was.
func (a *attempt) heldAnswer(waitID string) (event.WaitResolvedData, bool) {
	a.heldMu.Lock()
	defer a.heldMu.Unlock()
	res, ok := a.held[waitID]
	return res, ok
}

func (a *attempt) sendControl(c Control) {
	line, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("marshal control: %v", err)) // plain struct: cannot fail
	}
	a.ctl.send(append(line, '\n'))
}

// finish settles Status and Reason once the child is gone. Its
// runner.result counts only if it sent one and then exited 0: anything
// that can write to its stdout can print a result, and only the child
// itself can exit 0 after it.
func (a *attempt) finish(ps *os.ProcessState, waitErr error, tail string) {
	a.res.ExitCode = -1
	if ps != nil {
		a.res.ExitCode = ps.ExitCode()
	}
	r := a.report
	counts := r != nil && a.results == 1 && a.res.ExitCode == 0
	if counts {
		a.res.Report = r
		a.res.Output, a.res.Turns, a.res.Usage = r.Output, r.Turns, r.Usage
	}
	switch {
	case a.stopStatus != "":
		// The stop verdict came before any runner.result and stands.
		a.res.Status, a.res.Reason = a.stopStatus, a.stopReason
	case counts && r.Status == event.StatusCompleted:
		a.res.Status, a.res.Reason = event.StatusCompleted, ""
	case counts && r.Status == event.StatusWaiting:
		// Parked, not failed: the attempt is not over.
		a.res.Status, a.res.Reason = event.StatusWaiting, r.Detail
	case counts:
		a.res.Status, a.res.Reason = event.StatusFailed, r.Reason
		if a.res.Reason == "" {
			a.res.Reason = fmt.Sprintf("runner reported status %q", r.Status)
		}
	case a.results > 1:
		a.res.Status, a.res.Reason = event.StatusCrashed, fmt.Sprintf("runner sent %d results, one not its own, so none counts; it %s", a.results, howEnded(ps, waitErr))
	case r != nil:
		a.res.Status, a.res.Reason = event.StatusCrashed, fmt.Sprintf("runner %s after its result, which counts only from a runner that then exits 0", howEnded(ps, waitErr))
	default:
		a.res.Status, a.res.Reason = event.StatusCrashed, fmt.Sprintf("runner %s without a result", howEnded(ps, waitErr))
	}
	if a.res.Status == event.StatusCrashed && tail != "" {
		a.res.Reason += ": " + tail
	}
}

// howEnded says how the child ended: "exited with status 3".
func howEnded(ps *os.ProcessState, waitErr error) string {
	if ps == nil {
		return fmt.Sprintf("vanished (%v)", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed (signal: %v)", ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}
