package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
)

var editFileDef = Definition{
	Name: "edit_file",
	Description: `Replace exact text in an existing file.

old_string must match the file's text exactly, character for character, including indentation, whitespace and line breaks, and it must occur exactly once: include enough surrounding lines to make it unique. Set replace_all to true to replace every occurrence instead (useful for renames). Read the file with read_file first and copy the text from there. new_string replaces old_string; an empty new_string deletes it.

To create a file or rewrite it entirely use write_file. path is relative to the workspace root.`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File path relative to the workspace root."},
    "old_string": {"type": "string", "description": "The exact text to replace; must be unique in the file unless replace_all is true."},
    "new_string": {"type": "string", "description": "The text to put in its place."},
    "replace_all": {"type": "boolean", "description": "Replace every occurrence of old_string. Default false."}
  },
  "required": ["path", "old_string", "new_string"],
  "additionalProperties": false
}`),
}

type editFile struct{}

func (t *editFile) Definition() Definition { return editFileDef }
func (t *editFile) ReadOnly() bool         { return false }

func (t *editFile) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	var a struct {
		Path       string `json:"path"`
		OldString  string `json:"old_string"`
		NewString  string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all"`
	}
	if err := decodeArgs(editFileDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if a.OldString == "" {
		return errorf("old_string must not be empty; to create or rewrite a whole file use write_file")
	}
	if a.OldString == a.NewString {
		return errorf("old_string and new_string are identical; nothing to change")
	}
	_, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	root, err := ws.OpenRoot()
	if err != nil {
		return errorf("edit %s: %v", rel, err)
	}
	defer root.Close()
	// Read and write through the root: a directory on the way swapped for a
	// symlink leading out is refused, and a FIFO is refused without blocking.
	name := filepath.FromSlash(rel)
	f, fi, err := openRegular(ws, root, name)
	var nr *notRegularError
	switch {
	case errors.As(err, &nr) && nr.isDir():
		return errorf("%q is a directory, not a file", rel)
	case errors.As(err, &nr):
		return errorf("%q is %v; edit_file only edits regular files", rel, nr)
	case errors.Is(err, fs.ErrNotExist):
		return errorf("file %q does not exist; use write_file to create it", rel)
	case err != nil:
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("edit %s: %v", rel, err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return errorf("edit %s: %v", rel, err)
	}
	text := string(data)
	old, repl := a.OldString, a.NewString

	n := strings.Count(text, old)
	if n == 0 && strings.Contains(text, "\r\n") && strings.Contains(old, "\n") && !strings.Contains(old, "\r") {
		// Models write "\n"; a file with Windows line endings still deserves the edit.
		crlf := strings.ReplaceAll(old, "\n", "\r\n")
		if c := strings.Count(text, crlf); c > 0 {
			n, old = c, crlf
			repl = strings.ReplaceAll(strings.ReplaceAll(repl, "\r\n", "\n"), "\n", "\r\n")
		}
	}
	switch {
	case n == 0:
		return errorf("old_string not found in %s; it must match the file exactly, including whitespace and indentation (read the file again and copy the text)", rel)
	case n > 1 && !a.ReplaceAll:
		return errorf("old_string found %d times in %s; add surrounding context to make it unique, or set replace_all to replace every occurrence", n, rel)
	}

	line := strings.Count(text[:strings.Index(text, old)], "\n") + 1
	var updated string
	if a.ReplaceAll {
		updated = strings.ReplaceAll(text, old, repl)
	} else {
		updated = strings.Replace(text, old, repl, 1)
	}
	out := []byte(updated)
	if err := writeAtomic(ws, root, name, out, fi.Mode().Perm()); err != nil {
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("edit %s: %v", rel, err)
	}
	msg := fmt.Sprintf("replaced 1 occurrence in %s (line %d)", rel, line)
	if n > 1 {
		msg = fmt.Sprintf("replaced %d occurrences in %s (first at line %d)", n, rel, line)
	}
	return Result{Output: msg, Artifacts: []Artifact{newArtifact(rel, out)}}
}
