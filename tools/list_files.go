package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// listFilesMax caps a listing so one call on a huge tree cannot flood the context.
const listFilesMax = 1000

var listFilesDef = Definition{
	Name: "list_files",
	Description: `List files and directories recursively.

Paths in the result are relative to the workspace root and use "/"; directories end with "/". Entries are sorted, each directory followed by its contents. .git and .agent directories are skipped and symlinked directories are listed but not entered.

pattern filters the entries with a glob: "*" matches within one path segment, "**" matches any number of directories, and "?" and "[abc]" work as usual. A pattern without "/" is matched against the base name ("*.go" finds Go files at any depth); a pattern with "/" is matched against the relative path ("src/**/*_test.go"). A pattern ending in "/" matches only directories.

At most 1000 entries are returned; if the listing is cut, narrow it with path or pattern.`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Directory to list, relative to the workspace root. Default \".\" (the whole workspace)."},
    "pattern": {"type": "string", "description": "Optional glob filter, e.g. \"*.md\" or \"cmd/**/*.go\"."}
  },
  "additionalProperties": false
}`),
}

type listFiles struct{}

func (t *listFiles) Definition() Definition { return listFilesDef }
func (t *listFiles) ReadOnly() bool         { return true }

// errStopWalk ends a directory walk early without reporting an error.
var errStopWalk = errors.New("stop walk")

func (t *listFiles) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	var a struct {
		Path    string `json:"path"`
		Pattern string `json:"pattern"`
	}
	if err := decodeArgs(listFilesDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if a.Path == "" {
		a.Path = "."
	}
	g, err := newGlob(a.Pattern)
	if err != nil {
		return errorf("%v", err)
	}
	_, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	root, err := ws.OpenRoot()
	if err != nil {
		return errorf("list %s: %v", rel, err)
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
		return errorf("list %s: %v", rel, err)
	}
	if !fi.IsDir() {
		if g.match(rel, path.Base(rel), false) {
			return Result{Output: rel}
		}
		return Result{Output: fmt.Sprintf("no files match pattern %q at %s", a.Pattern, rel)}
	}

	// The walk goes through the root: entries come from the directory
	// descriptors the root opened, so a subdirectory swapped for a symlink
	// is refused (or, if it stays inside, listed as a link and not entered).
	var entries []string
	capped := false
	err = fs.WalkDir(fsys, rel, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if p == rel {
				return err
			}
			return nil // an unreadable subdirectory is skipped, not fatal
		}
		if p == rel {
			return nil
		}
		if d.IsDir() && skipDir(d.Name()) {
			return fs.SkipDir
		}
		fromRoot := p
		fromStart := underSlash(rel, p)
		if !g.match(fromRoot, fromStart, d.IsDir()) {
			return nil
		}
		if len(entries) == listFilesMax {
			capped = true
			return errStopWalk
		}
		if d.IsDir() {
			fromRoot += "/"
		}
		entries = append(entries, fromRoot)
		return nil
	})
	if err != nil && err != errStopWalk {
		if e := ws.escapeErr(a.Path, err); e != err {
			return errorf("%v", e)
		}
		return errorf("list %s: %v", rel, err)
	}

	if len(entries) == 0 {
		if a.Pattern != "" {
			return Result{Output: fmt.Sprintf("no files match pattern %q under %s", a.Pattern, rel)}
		}
		if rel == "." {
			return Result{Output: "the workspace is empty"}
		}
		return Result{Output: fmt.Sprintf("%s is empty", rel)}
	}
	out := strings.Join(entries, "\n")
	if capped {
		out += fmt.Sprintf("\n[listing stopped at %d entries; narrow it with path or pattern]", listFilesMax)
	}
	return Result{Output: out}
}

// skipDir reports directories that tools never descend into: version
// control internals and the agent's own run state.
func skipDir(name string) bool {
	return name == ".git" || name == ".agent"
}

// glob is a compiled list_files pattern.
type glob struct {
	segs     []string // nil matches everything
	base     bool     // no "/" in the pattern: match the base name
	dirsOnly bool     // pattern ended in "/"
}

func newGlob(pattern string) (glob, error) {
	p := strings.TrimPrefix(pattern, "./")
	if p == "" {
		return glob{}, nil
	}
	g := glob{dirsOnly: strings.HasSuffix(p, "/")}
	p = strings.Trim(p, "/")
	if p == "" {
		return glob{dirsOnly: true}, nil
	}
	g.base = !strings.Contains(p, "/")
	g.segs = strings.Split(p, "/")
	for _, s := range g.segs {
		if _, err := path.Match(s, ""); err != nil {
			return glob{}, fmt.Errorf("invalid pattern %q: %v", pattern, err)
		}
	}
	return g, nil
}

// match reports whether an entry matches. A slash pattern may be written
// relative to the workspace root or to the listed directory; both are tried.
func (g glob) match(fromRoot, fromStart string, isDir bool) bool {
	if g.dirsOnly && !isDir {
		return false
	}
	if g.segs == nil {
		return true
	}
	if g.base {
		return matchSegs(g.segs, []string{path.Base(fromRoot)})
	}
	return matchSegs(g.segs, strings.Split(fromRoot, "/")) ||
		matchSegs(g.segs, strings.Split(fromStart, "/"))
}

// matchSegs matches path segments against pattern segments, where "**"
// stands for zero or more whole segments.
//
// It runs in O(len(pat)·len(segs)) steps whatever the pattern: a
// backtracking matcher takes exponential time on patterns with many "**"
// ("**/a/**/a/**/a/…" against a deep path), and the model writes patterns.
// cur[j] says whether the pattern segments seen so far match segs[:j].
func matchSegs(pat, segs []string) bool {
	cur := make([]bool, len(segs)+1)
	next := make([]bool, len(segs)+1)
	cur[0] = true
	for _, p := range pat {
		alive := false
		if p == "**" {
			// Any prefix matched so far can be extended by any number of segments.
			seen := false
			for j := range cur {
				seen = seen || cur[j]
				next[j] = seen
			}
			alive = seen
		} else {
			next[0] = false
			for j := 1; j < len(cur); j++ {
				next[j] = false
				if cur[j-1] {
					next[j], _ = path.Match(p, segs[j-1])
					alive = alive || next[j]
				}
			}
		}
		if !alive {
			return false
		}
		cur, next = next, cur
	}
	return cur[len(segs)]
}
