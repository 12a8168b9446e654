package adapter

import (
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
// subprocess can write to it. The parent trusts nothing it can check
// itself (DESIGN.md §6): only the event types a child may report, a
// receipt only for an effect this attempt was given the go-ahead for, an
// artifact only as it is on disk, a result only in the protocol's shape.

// childEvents are the event types a child may report. The rest (run.*,
// phase.*, plan.created, verification.completed, rewind.completed…) are
// the parent's to say; one from a child is dropped.
var childEvents = map[string]bool{
	event.MessageDelta: true, event.MessageCompleted: true, event.ToolStarted: true, event.ToolCompleted: true,
	event.ArtifactCreated: true, event.ReceiptRecorded: true, event.EffectFailed: true,
	event.LearningRecorded: true, event.ApproachFailed: true, event.CheckpointCreated: true,
	event.IterationStarted: true, event.IterationCompleted: true, event.Retry: true, event.Warning: true,
	event.ContextCompacted: true,
}

// resultStatuses are the statuses a runner.result may carry.
var resultStatuses = map[string]bool{
	event.StatusCompleted: true, event.StatusFailed: true, event.StatusCancelled: true,
}

// check says whether a child's event may be forwarded, and in what form;
// what it drops it says why, as a warning.
func (a *attempt) check(e event.Event) (event.Event, bool) {
	if !childEvents[e.Type] {
		a.warn(fmt.Sprintf("ignored a %s event from the runner: only the parent records those", e.Type))
		return e, false
	}
	switch e.Type {
	case event.ReceiptRecorded, event.EffectFailed:
		var d struct {
			Key string `json:"key"`
		}
		if e.Decode(&d) != nil || !a.allowed[d.Key] {
			a.warn(fmt.Sprintf("ignored a %s from the runner for %q: this attempt was never given the go-ahead for that effect", e.Type, d.Key))
			return e, false
		}
		delete(a.allowed, d.Key) // one outcome per go-ahead
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
