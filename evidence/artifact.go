package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"unicode/utf8"

	"agent/tools"
)

// textSniff is how much of a text artifact is checked for UTF-8.
const textSniff = 64 << 10

// textExts are artifact extensions that promise text; a file with one that
// is not UTF-8 passes with a warning (a PDF saved as report.md, say).
var textExts = map[string]bool{
	".md": true, ".markdown": true, ".txt": true, ".csv": true, ".tsv": true,
	".json": true, ".jsonl": true, ".yaml": true, ".yml": true, ".html": true,
	".htm": true, ".xml": true,
}

// Artifact checks that every file in Evidence.Artifacts exists inside the
// workspace, is a regular file and is not empty.
type Artifact struct{}

// Evaluate returns one check per listed artifact.
func (Artifact) Evaluate(ctx context.Context, in Input) []Check {
	var out []Check
	for _, p := range in.Evidence.Artifacts {
		out = append(out, checkArtifact(in.Workspace, p))
	}
	return out
}

func checkArtifact(ws *tools.Workspace, p string) Check {
	fail := func(ref, why string) Check {
		return Check{Ref: ref, Note: fmt.Sprintf("%s: %s", ref, why)}
	}
	if strings.TrimSpace(p) == "" {
		return fail(p, "empty path")
	}
	if ws == nil {
		return fail(p, "no workspace to look in")
	}
	abs, rel, err := ws.Resolve(p)
	if err != nil {
		// Confinement is decided before anything is opened: a path that
		// leads out is never read, not even stat'ed past the link.
		var out *tools.OutsideError
		if errors.As(err, &out) {
			if out.Symlink {
				return fail(p, "outside the workspace (a symlink leads out)")
			}
			return fail(p, "outside the workspace")
		}
		return fail(p, err.Error())
	}
	// abs has no symlinks; O_NOFOLLOW keeps it so if one is swapped in now,
	// and O_NONBLOCK keeps a FIFO from hanging the open.
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return fail(rel, "missing")
	case errors.Is(err, syscall.ELOOP):
		return fail(rel, "is a symlink")
	case err != nil:
		return fail(rel, fmt.Sprintf("cannot open: %v", err))
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return fail(rel, fmt.Sprintf("cannot stat: %v", err))
	case fi.IsDir():
		return fail(rel, "is a directory")
	case !fi.Mode().IsRegular():
		return fail(rel, "is not a regular file")
	case fi.Size() == 0:
		return fail(rel, "empty")
	}

	h := sha256.New()
	head := make([]byte, min(fi.Size(), textSniff))
	n, err := io.ReadFull(io.TeeReader(f, h), head)
	if err == nil {
		_, err = io.Copy(h, f)
	}
	if err != nil {
		return fail(rel, fmt.Sprintf("cannot read: %v", err))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	c := Check{Ref: rel, OK: true, Note: fmt.Sprintf("%s: %d bytes, sha256 %s", rel, fi.Size(), sum[:12])}
	if textExts[strings.ToLower(path.Ext(rel))] && !utf8Prefix(head[:n], int64(n) < fi.Size()) {
		c.Warn = true
		c.Note += "; warning: not UTF-8 text"
	}
	return c
}

// utf8Prefix reports whether b is valid UTF-8. When b is only the start of
// the file (cut), a rune split at the end does not count against it.
func utf8Prefix(b []byte, cut bool) bool {
	if utf8.Valid(b) {
		return true
	}
	if !cut {
		return false
	}
	for k := 1; k < utf8.UTFMax && k < len(b); k++ {
		if utf8.Valid(b[:len(b)-k]) {
			return true
		}
	}
	return false
}
