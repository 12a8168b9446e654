package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"agent/event"
	"agent/tools"
)

// Point is one checkpoint of a run: a file as it was before the run first
// changed it.
type Point struct {
	Number  int    // 1-based within the run
	Path    string // workspace-relative, slash separated
	Existed bool   // false: the run created the file
	Blob    string // sha256 of the saved content, when Existed
	Mode    fs.FileMode
}

// Request is one rewind of a run's files.
type Request struct {
	RunID     string
	Workspace string  // the run's workspace root
	Points    []Point // the run's checkpoints, in number order
	// LastWrites maps a path to the sha256 of the run's last write of it
	// (write_file or edit_file), to tell whether it changed after the run.
	LastWrites map[string]string
	To         int  // rewind files first changed at checkpoint To or later; 0 means all
	Force      bool // put back files that changed after the run too
}

// File is the outcome for one file.
type File struct {
	Path string `json:"path"`
	// Outcome is event.StatusRestored (its content from before the run is
	// back), StatusRemoved (it did not exist before the run, and is gone
	// again), StatusSkipped (it changed after the run; Force overrides) or
	// StatusFailed (putting it back did not work; Reason says why).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// Report is what a rewind did. It is the data of rewind.completed and the
// output of `agent rewind --json`.
type Report struct {
	RunID string `json:"run_id"`
	To    int    `json:"to"`
	Force bool   `json:"force,omitempty"`
	Files []File `json:"files"`
}

// Count returns how many files had the outcome.
func (r Report) Count(outcome string) int {
	n := 0
	for _, f := range r.Files {
		if f.Outcome == outcome {
			n++
		}
	}
	return n
}

// RangeError is a --to that names no checkpoint of the run.
type RangeError struct {
	To, Max int
}

func (e *RangeError) Error() string {
	if e.Max == 0 {
		return fmt.Sprintf("checkpoint %d does not exist: the run has no checkpoints", e.To)
	}
	return fmt.Sprintf("checkpoint %d does not exist: the run has checkpoints 1 to %d", e.To, e.Max)
}

// Plan returns the checkpoints a rewind to checkpoint to puts back: for
// each file its first checkpoint, which holds the file as it was before
// the run, when that is checkpoint to or later. Files the run first
// changed before checkpoint to are left alone. to 0 means 1.
func Plan(points []Point, to int) ([]Point, error) {
	last := 0
	for _, p := range points {
		last = max(last, p.Number)
	}
	if to == 0 {
		to = 1
	}
	if to < 1 || to > last {
		return nil, &RangeError{To: to, Max: last}
	}
	seen := map[string]bool{}
	var out []Point
	for _, p := range points {
		if seen[p.Path] {
			continue // a later checkpoint of the same file: not its state before the run
		}
		seen[p.Path] = true
		if p.Number >= to {
			out = append(out, p)
		}
	}
	return out, nil
}

// Rewind puts the files of req back as they were before the run, file by
// file. It returns an error only for a bad request (a *RangeError); what
// happens to each file is in the report, and one failed file does not
// stop the others.
//
// A file is skipped, unless req.Force, when it changed after the run: its
// content is not what the run last wrote to it, it was deleted, or the
// run never wrote it (the tool call failed) yet it is no longer as before
// the run. A file already as it was before the run counts as restored or
// removed without being touched.
func Rewind(blobs Blobs, req Request) (Report, error) {
	rep := Report{RunID: req.RunID, To: max(req.To, 1), Force: req.Force, Files: []File{}}
	if len(req.Points) == 0 && req.To == 0 {
		rep.To = 0
		return rep, nil
	}
	plan, err := Plan(req.Points, req.To)
	if err != nil {
		return rep, err
	}
	root, err := filepath.EvalSymlinks(req.Workspace)
	if err != nil {
		for _, p := range plan {
			rep.Files = append(rep.Files, File{Path: p.Path, Outcome: event.StatusFailed, Reason: fmt.Sprintf("workspace: %v", err)})
		}
		return rep, nil
	}
	for _, p := range plan {
		rep.Files = append(rep.Files, rewindFile(blobs, root, p, req.LastWrites[p.Path], req.Force))
	}
	return rep, nil
}

// rewindFile decides and carries out the outcome of one file; lastWrite is
// the sha256 the run last wrote to it, "" if it never did.
func rewindFile(blobs Blobs, root string, p Point, lastWrite string, force bool) File {
	f := File{Path: p.Path}
	fail := func(err error) File {
		f.Outcome, f.Reason = event.StatusFailed, err.Error()
		return f
	}
	abs, err := confine(root, p.Path)
	if err != nil {
		return fail(err)
	}
	exists, sum, err := current(abs)
	if err != nil {
		return fail(err)
	}

	done := event.StatusRestored
	if !p.Existed {
		done = event.StatusRemoved
	}
	if exists == p.Existed && (!exists || sum == p.Blob) {
		f.Outcome, f.Reason = done, "already as before the run"
		return f
	}
	if reason := changedAfter(exists, sum, lastWrite); reason != "" && !force {
		f.Outcome, f.Reason = event.StatusSkipped, reason+" (use --force)"
		return f
	}

	if !p.Existed {
		if err := os.Remove(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("remove: %w", err))
		}
		f.Outcome = event.StatusRemoved
		return f
	}
	data, err := blobs.Get(p.Blob)
	if err != nil {
		return fail(fmt.Errorf("saved content missing: %w", err))
	}
	mode := p.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return fail(err)
	}
	if err := tools.WriteFileAtomic(abs, data, mode); err != nil {
		return fail(err)
	}
	f.Outcome = event.StatusRestored
	return f
}

// changedAfter says how a file that is not as before the run differs from
// what the run left, or "" when it is exactly what the run last wrote.
func changedAfter(exists bool, sum, lastWrite string) string {
	switch {
	case lastWrite == "":
		return "changed, but not by a file tool of this run"
	case !exists:
		return "deleted after the run"
	case sum != lastWrite:
		return "changed after the run"
	}
	return ""
}

// confine maps a checkpoint path to a path in the workspace root, refusing
// one that leads outside it: the paths come from the database, and a
// symlink may have appeared in the workspace since the run.
func confine(root, rel string) (string, error) {
	local := filepath.FromSlash(rel)
	if !filepath.IsLocal(local) {
		return "", fmt.Errorf("path is outside the workspace")
	}
	abs := filepath.Join(root, local)
	// The deepest existing directory on the way must still be inside.
	dir := filepath.Dir(abs)
	for {
		if _, err := os.Lstat(dir); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
		return "", fmt.Errorf("a symlink now leads outside the workspace (to %s)", real)
	}
	return abs, nil
}

// current reports whether abs exists and the sha256 of its content; the
// sum of anything but a regular file is "".
func current(abs string) (exists bool, sum string, err error) {
	fi, err := os.Lstat(abs)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	if !fi.Mode().IsRegular() {
		return true, "", nil
	}
	f, err := os.Open(abs)
	if err != nil {
		return true, "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return true, "", err
	}
	return true, hex.EncodeToString(h.Sum(nil)), nil
}
