package adapter

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"

	"agent/event"
)

// What a parent takes from a child. The child runs a model and the tools
// it calls, so whatever reaches its stdout may be forged: a tool's
// subprocess, an MCP server, anything that can open /proc/CHILD/fd/1 can
// write to it. The parent trusts nothing it cannot check itself (docs/PROTOCOL.md#what-the-parent-believes):
//   - only the event types a child may report;
//   - an effect.intent only from the tool call the child has open (it runs
//     one at a time, or a reply's task calls together): the one it reported
//     started and not yet completed, of the tool the intent names, one
//     intent per call, and marked with the call's token, which the parent
//     gave the child on its stdin, so that a call made up on its stdout
//     cannot ask; a task.request likewise, from an open task call;
//   - an effect's outcome (receipt.recorded, effect.failed, effect.unknown)
//     only once per go-ahead this attempt gave, and only while the call
//     that asked is still open, marked with its token; an unknown outcome
//     uses the go-ahead up, so no later receipt makes the effect done;
//   - an artifact only as it is on disk;
//   - a wait's answer only as the spec gave it (the store's);
//   - a result only in the protocol's shape, only one, and only from a
//     child that then exits 0 (finish, in run.go).

// childEvents are the event types a child may report. The rest (run.*,
// phase.*, plan.created, verification.completed, rewind.completed…) are
// the parent's to say; one from a child is dropped.
var childEvents = map[string]bool{
	event.MessageDelta: true, event.MessageCompleted: true, event.ToolStarted: true, event.ToolCompleted: true,
	event.ArtifactCreated: true, event.ReceiptRecorded: true, event.EffectFailed: true, event.EffectUnknown: true,
	event.LearningRecorded: true, event.ApproachFailed: true, event.CheckpointCreated: true,
	event.IterationStarted: true, event.IterationCompleted: true, event.Retry: true, event.Warning: true,
	event.ContextCompacted: true, event.RunWaiting: true, event.WaitResolved: true, event.HookCompleted: true,
	event.ToolProgress: true,
}

// resultStatuses are the statuses a runner.result may carry.
var resultStatuses = map[string]bool{
	event.StatusCompleted: true, event.StatusFailed: true, event.StatusCancelled: true, event.StatusWaiting: true,
}

// check says whether a child's event may be forwarded, and in what form;
// what it drops it says why, as a warning.
func (a *attempt) check(e event.Event) (event.Event, bool) {
	if !childEvents[e.Type] {
		a.warn(fmt.Sprintf("ignored a %s event from the runner: only the parent records those", e.Type))
		return e, false
	}
	switch e.Type {
	case event.ToolStarted:
		return e, a.open(e)
	case event.ToolCompleted:
		return e, a.close(e)
	case event.ToolProgress:
		// Only of the open call: a chatty child cannot say it of others.
		var d event.ToolProgressData
		if e.Decode(&d) != nil || a.calls[d.CallID] == nil || e.Token != a.calls[d.CallID].token {
			return e, false
		}
	case event.ReceiptRecorded, event.EffectFailed, event.EffectUnknown:
		var d struct {
			Key  string `json:"key"`
			Type string `json:"type"` // a receipt's
		}
		_ = e.Decode(&d)
		g, ok := a.allowed[d.Key]
		why := ""
		switch {
		case !ok:
			why = "this attempt holds no go-ahead for that effect (never given, or used by an earlier outcome)"
		case g.closed:
			why = fmt.Sprintf("tool call %q that asked for it had completed", g.call)
		case a.calls[g.call] == nil || e.Token != a.calls[g.call].token:
			why = fmt.Sprintf("it does not carry the token of tool call %q", g.call)
		case e.Type == event.ReceiptRecorded && g.receiptType != "" && d.Type != g.receiptType:
			why = fmt.Sprintf("the effect records %s receipts, not %q", g.receiptType, d.Type)
		}
		if why != "" {
			a.warn(fmt.Sprintf("ignored a %s from the runner for %q: %s", e.Type, d.Key, why))
			return e, false
		}
		delete(a.allowed, d.Key) // one outcome per go-ahead
	case event.WaitResolved:
		// Only the parent's store answers a wait: a child records an
		// answer the spec or a hold gave it, as the parent says it.
		var d event.WaitResolvedData
		_ = e.Decode(&d)
		if res, ok := a.heldAnswer(d.WaitID); ok && d.WaitID != "" {
			// A hold's: the answer this parent gave it.
			e.Data = event.New(e.Type, res).Data
			return e, true
		}
		for _, w := range a.spec.Waits {
			if w.Waiting.WaitID == d.WaitID && w.Resolution != nil && d.WaitID != "" {
				e.Data = event.New(e.Type, *w.Resolution).Data
				return e, true
			}
		}
		a.warn(fmt.Sprintf("ignored a %s from the runner for wait %q: the spec gave it no answer", e.Type, d.WaitID))
		return e, false
	case event.ArtifactCreated:
		var d event.ArtifactData
		if err := e.Decode(&d); err != nil {
			a.warn(fmt.Sprintf("ignored a malformed %s from the runner: %v", e.Type, err))
			return e, false
		}
		found, err := onDisk(a.spec.Workspace, d.Path)
		if err != nil {
			a.warn(fmt.Sprintf("ignored the runner's %s for %q: %v", e.Type, d.Path, err))
			return e, false
		}
		e.Data = event.New(e.Type, found).Data
	}
	return e, true
}

// openCall is the tool call a child has open.
type openCall struct {
	id, name string
	token    string // given to the child on its stdin: the call's events carry it
	asked    bool   // it made its intent: one per call
}

// goAhead is an effect this attempt let a child start.
type goAhead struct {
	call        string // the tool call that asked
	receiptType string
	closed      bool // that call has completed: too late for an outcome
}

// open takes a tool.started: the child's call is open until its
// tool.completed. The child runs one call at a time, or the task calls of
// one reply together, so another call started while one is open is not
// its own.
func (a *attempt) open(e event.Event) bool {
	var d event.ToolStartedData
	if err := e.Decode(&d); err != nil || d.CallID == "" {
		a.warn(fmt.Sprintf("ignored a %s from the runner without a call id: %s", e.Type, clipLine(string(e.Data))))
		return false
	}
	for id, c := range a.calls {
		if id == d.CallID || c.name != taskTool || d.Name != taskTool {
			a.warn(fmt.Sprintf("ignored a %s from the runner for call %q: call %q is still open, and the runner runs one call at a time", e.Type, d.CallID, id))
			return false
		}
	}
	a.calls[d.CallID] = &openCall{id: d.CallID, name: d.Name, token: rand.Text()}
	a.last = d.CallID
	return true
}

// taskTool is the task tool's name (tools.TaskName): only its calls may be
// open together.
const taskTool = "task"

// close takes a tool.completed: the call's go-aheads can no longer have
// an outcome. One of a call not open (answered after a crash) changes
// nothing; one of an open call without its token is not the child's.
func (a *attempt) close(e event.Event) bool {
	var d event.ToolCompletedData
	if e.Decode(&d) != nil || d.CallID == "" || a.calls[d.CallID] == nil {
		return true
	}
	if e.Token != a.calls[d.CallID].token {
		a.warn(fmt.Sprintf("ignored a %s from the runner for call %q: it does not carry the call's token", e.Type, d.CallID))
		return false
	}
	for key, g := range a.allowed {
		if g.call == d.CallID {
			g.closed = true
			a.allowed[key] = g
		}
	}
	delete(a.calls, d.CallID)
	if a.last == d.CallID {
		a.last = ""
	}
	return true
}

// openToken reports whether token is an open call's: the child's line
// that carries it is that call's own.
func (a *attempt) openToken(token string) bool {
	for _, c := range a.calls {
		if token != "" && c.token == token {
			return true
		}
	}
	return false
}

// askedBy says why a request a child makes for one of its tool calls
// (an effect.intent for tool, a task.request for the task tool) is not
// that open call's own, or "" when it is: one request per call.
func (a *attempt) askedBy(callID, tool, token string) string {
	call := a.calls[callID]
	switch {
	case call == nil:
		return fmt.Sprintf("it names tool call %q, which is not open", callID)
	case token != call.token:
		return fmt.Sprintf("it does not carry the token of tool call %q", callID)
	case tool != call.name:
		return fmt.Sprintf("it names tool %q, and call %q is of %q", tool, callID, call.name)
	case call.asked && tool == taskTool:
		return fmt.Sprintf("call %q already asked for its sub-run", callID)
	case call.asked:
		return fmt.Sprintf("call %q already asked for its effect", callID)
	}
	return ""
}

// onDisk describes the regular file at rel in the workspace as it is now,
// never leaving the workspace and never blocking on a FIFO or a device.
func onDisk(workspace, rel string) (event.ArtifactData, error) {
	if rel == "" || filepath.IsAbs(rel) {
		return event.ArtifactData{}, fmt.Errorf("not a path in the workspace")
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return event.ArtifactData{}, err
	}
	defer root.Close()
	f, err := root.OpenFile(filepath.FromSlash(rel), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return event.ArtifactData{}, fmt.Errorf("no such file in the workspace: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return event.ArtifactData{}, err
	}
	if !fi.Mode().IsRegular() {
		return event.ArtifactData{}, fmt.Errorf("not a regular file")
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return event.ArtifactData{}, err
	}
	return event.ArtifactData{Path: filepath.ToSlash(filepath.Clean(rel)), SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: n}, nil
}

// clipLine keeps what a warning quotes of a child's output short.
func clipLine(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// unblob puts back the data of an event the child sent through the blob
// store because it was too large for a line.
func (a *attempt) unblob(e event.Event) (event.Event, bool) {
	if e.Blob == "" {
		return e, true
	}
	sha := e.Blob
	e.Blob = ""
	if a.cfg.Blobs == nil {
		a.warn(fmt.Sprintf("dropped the runner's %s: its data is in blob %s and this parent has no blob store", e.Type, sha))
		return e, false
	}
	data, err := a.cfg.Blobs.Get(sha)
	if err != nil || !json.Valid(data) {
		a.warn(fmt.Sprintf("dropped the runner's %s: its data blob cannot be read: %v", e.Type, err))
		return e, false
	}
	e.Data = data
	return e, true
}
