package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

var writeFileDef = Definition{
	Name: "write_file",
	Description: `Create a file or replace its whole content.

Parent directories are created as needed. The write is atomic: the file ends up either fully written or unchanged. An existing file keeps its permissions. content is written exactly as given, so end it with a newline if the file should end with one.

For a small change to an existing file prefer edit_file, which does not require repeating the rest of the file. path is relative to the workspace root.`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File path relative to the workspace root."},
    "content": {"type": "string", "description": "The complete new content of the file."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`),
}

type writeFile struct{}

func (t *writeFile) Definition() Definition { return writeFileDef }
func (t *writeFile) ReadOnly() bool         { return false }

func (t *writeFile) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	var a struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	if err := decodeArgs(writeFileDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	_, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	root, err := ws.OpenRoot()
	if err != nil {
		return errorf("write %s: %v", rel, err)
	}
	defer root.Close()
	// Everything below goes through the root, so a directory on the way
	// swapped for a symlink leading out is refused rather than followed.
	name := filepath.FromSlash(rel)
	mode := fs.FileMode(0o644)
	fi, err := root.Stat(name)
	switch {
	case err == nil && fi.IsDir():
		return errorf("%q is a directory; give a file path", rel)
	case err == nil && !fi.Mode().IsRegular():
		// The rename would replace it, but a FIFO or device is not
		// something the model meant to overwrite.
		return errorf("%q is %v; write_file only replaces regular files", rel, &notRegularError{fi.Mode()})
	case err == nil:
		mode = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("write %s: %v", rel, err) // ENOTDIR is left for MkdirAll to explain
	}
	if dir := filepath.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			if e := ws.escapeErr(a.Path, err); e != err {
				return errorf("%v", e)
			}
			return errorf("write %s: create parent directories: %v", rel, err)
		}
	}
	data := []byte(a.Content)
	if err := writeAtomic(ws, root, name, data, mode); err != nil {
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("write %s: %v", rel, err)
	}
	return Result{
		Output:    fmt.Sprintf("wrote %d bytes to %s", len(data), rel),
		Artifacts: []Artifact{newArtifact(rel, data)},
	}
}

// WriteFileAtomic replaces path with data through a temporary file in the
// same directory and a rename, so a crash leaves the old file or the new
// one, never a torn one. The temporary file is fsynced before the rename
// and the directory after it, because a run resumed after a power loss
// trusts what it recorded. The tools, rewind, findings and mission.json
// all write this way.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) error {
	root, err := os.OpenRoot(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer root.Close()
	if err := writeAtomic(nil, root, filepath.Base(path), data, mode); err != nil {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

func newArtifact(rel string, data []byte) Artifact {
	sum := sha256.Sum256(data)
	return Artifact{Path: rel, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(data))}
}
