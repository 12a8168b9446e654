package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

const (
	grepMaxMatches = 500 // matches shown before the search stops
	grepMaxLine    = 400 // bytes of a matching line shown; minified files have huge lines
)

var grepDef = Definition{
	Name: "grep",
	Description: `Search file contents with a regular expression.

pattern uses Go RE2 syntax: "func \w+\(", "TODO|FIXME", "(?i)error" for case-insensitive. Lookarounds and backreferences are not supported. Each line is matched separately.

path is a file or a directory relative to the workspace root (default the whole workspace); directories are searched recursively, skipping .git, .agent and binary files. Each match is printed as "path:line: text", with the path relative to the workspace root and the 1-based line number, ready for read_file's offset. At most 500 matches are shown; narrow the pattern or path if the search is cut.`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Go RE2 regular expression to search for."},
    "path": {"type": "string", "description": "File or directory to search, relative to the workspace root. Default \".\"."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`),
}

type grepTool struct{}

func (t *grepTool) Definition() Definition { return grepDef }
func (t *grepTool) ReadOnly() bool         { return true }

func (t *grepTool) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	var a struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
	}
	if err := decodeArgs(grepDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if a.Pattern == "" {
		return errorf("pattern is empty")
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return errorf("invalid regular expression %q: %v (Go RE2 syntax: no lookarounds or backreferences)", a.Pattern, err)
	}
	if a.Path == "" {
		a.Path = "."
	}
	_, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	root, err := ws.OpenRoot()
	if err != nil {
		return errorf("grep %s: %v", rel, err)
	}
	defer root.Close()
	fsys := walkFS{root, ws}
	fi, err := fsys.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return errorf("path %q does not exist", rel)
	}
	if err != nil {
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("grep %s: %v", rel, err)
	}

	// Files are opened through the root and never blockingly (see
	// openRegular): a FIFO, socket or device is skipped, and a directory
	// swapped for a symlink leading out is refused by the root.
	s := &search{ctx: ctx, re: re, root: root, ws: ws}
	if !fi.IsDir() {
		s.file(rel, rel)
	} else {
		err = fs.WalkDir(fsys, rel, func(p string, d fs.DirEntry, err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				if p == rel {
					return err
				}
				return nil
			}
			if d.IsDir() {
				if p != rel && skipDir(d.Name()) {
					return fs.SkipDir
				}
				return nil
			}
			target := p
			switch {
			case d.Type().IsRegular():
			case d.Type()&fs.ModeSymlink != 0:
				// Search a linked file only if it stays inside the workspace.
				_, linked, rerr := ws.Resolve(p)
				if rerr != nil {
					return nil
				}
				target = linked
			default:
				return nil // FIFOs, sockets, devices: never opened
			}
			if s.file(target, p) {
				return errStopWalk
			}
			return nil
		})
		if err != nil && err != errStopWalk {
			if e := ws.escapeErr(a.Path, err); e != err {
				return errorf("%v", e)
			}
			return errorf("grep %s: %v", rel, err)
		}
	}

	if ctx.Err() != nil {
		return errorf("grep %s: %v", rel, ctx.Err())
	}
	if len(s.lines) == 0 {
		return Result{Output: "no matches"}
	}
	out := strings.Join(s.lines, "\n")
	if s.capped {
		out += fmt.Sprintf("\n[stopped after %d matches; narrow the pattern or path]", grepMaxMatches)
	}
	return Result{Output: out}
}

// search collects matching lines across files.
type search struct {
	ctx    context.Context
	re     *regexp.Regexp
	root   *os.Root
	ws     *Workspace
	lines  []string
	capped bool
}

// file searches the file at the slash path rel in the root and reports
// whether to stop: the match cap was reached or ctx was cancelled.
// Unreadable, binary and non-regular files are skipped silently: they are
// not what the model is looking for.
func (s *search) file(rel, display string) bool {
	f, _, err := openRegular(s.ws, s.root, filepath.FromSlash(rel))
	if err != nil {
		return false
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64*1024)
	if head, _ := br.Peek(binarySniffLen); bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\r\n")
			if s.re.Match(line) {
				if len(s.lines) == grepMaxMatches {
					s.capped = true
					return true
				}
				s.lines = append(s.lines, fmt.Sprintf("%s:%d: %s", display, n, clipLine(line)))
			}
		}
		if err != nil { // io.EOF or a read error: either way this file is done
			return false
		}
		if n%4096 == 0 && s.ctx.Err() != nil {
			return true
		}
	}
}

// clipLine shortens a long line on a rune boundary.
func clipLine(b []byte) string {
	if len(b) <= grepMaxLine {
		return string(b)
	}
	n := grepMaxLine
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + " …"
}
