package tools

import (
	"encoding/json"
	"strings"
)

// WriteTarget is a file a tool call is about to change.
type WriteTarget struct {
	Rel string // workspace-relative, slash separated
	Abs string // real absolute path inside the workspace, symlinks resolved
}

// writer is a tool that can say, without running, which files a call
// would change.
type writer interface {
	writesTo(ws *Workspace, args json.RawMessage) []WriteTarget
}

// WritesTo returns the files the named call would change if it ran, so
// the caller can save them first (checkpoints) while the tools stay pure.
// Only write_file and edit_file answer: bash can change files too, but
// which ones cannot be known before it runs. Disabled tools, arguments the
// tool would reject and paths outside the workspace give none.
func (s *Set) WritesTo(name, args string) []WriteTarget {
	e, ok := s.lookup(name)
	if !ok {
		return nil
	}
	w, ok := e.tool.(writer)
	if !ok {
		return nil
	}
	raw := json.RawMessage(args)
	if strings.TrimSpace(args) == "" {
		raw = json.RawMessage("{}")
	}
	return w.writesTo(s.ws, raw)
}

func (t *writeFile) writesTo(ws *Workspace, args json.RawMessage) []WriteTarget {
	return pathTarget(ws, writeFileDef, args)
}

func (t *editFile) writesTo(ws *Workspace, args json.RawMessage) []WriteTarget {
	return pathTarget(ws, editFileDef, args)
}

// pathTarget resolves the "path" argument the way the tool will.
func pathTarget(ws *Workspace, def Definition, args json.RawMessage) []WriteTarget {
	var a struct {
		Path string `json:"path"`
	}
	if decodeArgs(def, args, &a) != nil {
		return nil
	}
	abs, rel, err := ws.Resolve(a.Path)
	if err != nil {
		return nil
	}
	return []WriteTarget{{Rel: rel, Abs: abs}}
}
