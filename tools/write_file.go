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
	abs, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	mode := fs.FileMode(0o644)
	fi, err := os.Stat(abs)
	switch {
	case err == nil && fi.IsDir():
		return errorf("%q is a directory; give a file path", rel)
	case err == nil && !fi.Mode().IsRegular():
		return errorf("%q is not a regular file", rel)
	case err == nil:
		mode = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return errorf("write %s: %v", rel, err) // ENOTDIR is left for MkdirAll to explain
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return errorf("write %s: create parent directories: %v", rel, err)
	}
	data := []byte(a.Content)
	if err := WriteFileAtomic(abs, data, mode); err != nil {
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
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync() // best effort: not every filesystem supports it
		d.Close()
	}
	return nil
}

func newArtifact(rel string, data []byte) Artifact {
	sum := sha256.Sum256(data)
	return Artifact{Path: rel, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(data))}
}
