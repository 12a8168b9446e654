package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"agent/event"
	"agent/vision"
)

// readFileDefaultLimit is how many lines read_file shows when no limit is given.
const readFileDefaultLimit = 2000

// binarySniffLen is how much of a file is checked for NUL bytes to decide
// that it is binary, the heuristic git and grep use.
const binarySniffLen = 8192

var readFileDef = Definition{
	Name: "read_file",
	Description: `Read a text file from the workspace.

Returns the file's exact text, without line numbers, so you can copy from it verbatim into edit_file's old_string. At most 2000 lines are shown at once (fewer if the lines are long). When only part of the file is shown, a final bracketed note such as "[showing lines 1-2000 of 5120; use offset=2001 to read more]" gives the range and the total line count; page through with offset and limit.

An image (PNG, JPEG, GIF or WebP, known by its content; at most 20 MB) is given to you as an image when you can see images, and described in one line when you cannot.

path is relative to the workspace root. Directories are refused (use list_files) and so are other binary files (use bash, e.g. "file" or "xxd | head").`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File path relative to the workspace root."},
    "offset": {"type": "integer", "minimum": 1, "description": "1-based line number to start reading from. Default 1."},
    "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return. Default 2000."}
  },
  "required": ["path"],
  "additionalProperties": false
}`),
}

type readFile struct {
	maxBytes int // stop adding lines past this budget, so long files page cleanly instead of being cut in the middle
}

func (t *readFile) Definition() Definition { return readFileDef }
func (t *readFile) ReadOnly() bool         { return true }

func (t *readFile) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	var a struct {
		Path   string `json:"path"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	if err := decodeArgs(readFileDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if a.Offset < 0 {
		return errorf("offset must be 1 or more (the first line is 1), not %d", a.Offset)
	}
	if a.Offset == 0 {
		a.Offset = 1 // models often mean "from the start"
	}
	if a.Limit < 0 {
		return errorf("limit must be 1 or more, not %d", a.Limit)
	}
	if a.Limit == 0 {
		a.Limit = readFileDefaultLimit
	}
	_, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	root, err := ws.OpenRoot()
	if err != nil {
		return errorf("read %s: %v", rel, err)
	}
	defer root.Close()
	// Through the root and never blocking: a path swapped for a symlink
	// leading out is refused, and a FIFO or device is refused, not read.
	f, fi, err := openRegular(ws, root, filepath.FromSlash(rel))
	var nr *notRegularError
	switch {
	case errors.As(err, &nr) && nr.isDir():
		return errorf("%q is a directory, not a file; use list_files to see what it contains", rel)
	case errors.As(err, &nr):
		return errorf("%q is %v; read_file only reads regular files", rel, nr)
	case errors.Is(err, fs.ErrNotExist):
		return errorf("file %q does not exist", rel)
	case err != nil:
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("read %s: %v", rel, err)
	}
	defer f.Close()

	br := bufio.NewReaderSize(f, 64*1024)
	head, _ := br.Peek(binarySniffLen)
	if vision.Sniff(head) != "" {
		return readImage(br, rel, fi.Size())
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return errorf("%q is a binary file; read_file only reads text (inspect it with bash, e.g. \"file %s\" or \"xxd %s | head\")", rel, rel, rel)
	}

	budget := t.maxBytes
	if budget <= 0 {
		budget = DefaultMaxOutput
	}
	budget -= 200 // room for the note

	var out strings.Builder
	total, last := 0, 0
	full := false // the byte budget stopped us before limit
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			total++
			if total%4096 == 0 && ctx.Err() != nil {
				return errorf("read %s: %v", rel, ctx.Err())
			}
			if total >= a.Offset && total < a.Offset+a.Limit && !full {
				if last > 0 && out.Len()+len(line) > budget {
					full = true
				} else {
					out.WriteString(line)
					last = total
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return errorf("read %s: %v", rel, err)
		}
	}

	if total == 0 {
		return Result{Output: fmt.Sprintf("[%s is empty]", rel)}
	}
	if a.Offset > total {
		return errorf("offset %d is past the end of %s, which has %d lines", a.Offset, rel, total)
	}
	if a.Offset == 1 && last == total {
		return Result{Output: out.String()}
	}
	text := out.String()
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	switch {
	case last == total:
		text += fmt.Sprintf("[showing lines %d-%d of %d]", a.Offset, last, total)
	case full:
		text += fmt.Sprintf("[showing lines %d-%d of %d (output size limit); use offset=%d to read more]", a.Offset, last, total, last+1)
	default:
		text += fmt.Sprintf("[showing lines %d-%d of %d; use offset=%d to read more]", a.Offset, last, total, last+1)
	}
	return Result{Output: text}
}

// readImage gives the model an image file as an image (the loop gives a
// model that does not see images a line about it instead), never as text.
func readImage(r io.Reader, rel string, size int64) Result {
	if size > vision.MaxBytes {
		return errorf("%v; inspect it with bash instead", &vision.TooLargeError{Name: rel, Bytes: size})
	}
	data, err := io.ReadAll(io.LimitReader(r, vision.MaxBytes+1))
	if err != nil {
		return errorf("read %s: %v", rel, err)
	}
	img, err := vision.Read(path.Base(rel), data)
	if err != nil {
		return errorf("%v; inspect it with bash instead", err)
	}
	return Result{Images: []event.Image{img}}
}
