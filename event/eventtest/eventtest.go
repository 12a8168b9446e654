// Package eventtest finds, for the tests of each consumer of the event
// stream (the store's projector, the console's printer and board, the
// trace, the web view), which event types its switches name, so that a
// new type in event.Types fails every consumer that neither handles it nor
// says why it need not.
package eventtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"agent/event"
)

// GoCases returns the event types named by the case labels of the switch
// statements in function fn ("Name", or "Type.Method" for a method) of the
// Go source file path, as event.X selectors or string literals.
func GoCases(t testing.TB, path, fn string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := constants(t)
	var decl *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && funcName(fd) == fn {
			decl = fd
		}
	}
	if decl == nil {
		t.Fatalf("%s has no function %s", path, fn)
	}
	var out []string
	ast.Inspect(decl, func(n ast.Node) bool {
		cc, ok := n.(*ast.CaseClause)
		if !ok {
			return true
		}
		for _, e := range cc.List {
			switch x := e.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "event" {
					if v, ok := consts[x.Sel.Name]; ok {
						out = append(out, v)
					}
				}
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); err == nil && strings.Contains(s, ".") {
					out = append(out, s)
				}
			}
		}
		return true
	})
	return out
}

// JSCases returns the string labels of the case clauses (case
// 'tool.started':) in the body of the JavaScript function or method fn of
// the file path.
func JSCases(t testing.TB, path, fn string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	loc := regexp.MustCompile(`(?m)^\s*(?:function\s+)?` + regexp.QuoteMeta(fn) + `\([^)]*\)\s*\{`).FindIndex(src)
	if loc == nil {
		t.Fatalf("%s has no function %s", path, fn)
	}
	depth, end := 0, len(src)
	for i := loc[1] - 1; i < len(src) && end == len(src); i++ {
		switch src[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				end = i
			}
		}
	}
	var out []string
	for _, m := range regexp.MustCompile(`case '([a-z_.]+)'`).FindAllSubmatch(src[loc[1]:end], -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// Covers fails t unless every run event type is handled (named in
// handled) or deliberately ignored (named in ignored, which says why in
// the test), none is both, and nothing else is named.
func Covers(t testing.TB, consumer string, handled, ignored []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, typ := range handled {
		seen[typ] = true
	}
	for _, typ := range ignored {
		if seen[typ] {
			t.Errorf("%s handles %s, which its test lists as ignored", consumer, typ)
		}
		seen[typ] = true
	}
	var missing, extra []string
	for _, typ := range event.Types {
		if !seen[typ] {
			missing = append(missing, typ)
		}
	}
	for typ := range seen {
		if !slices.Contains(event.Types, typ) && !slices.Contains(event.ProtocolTypes, typ) {
			extra = append(extra, typ)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("%s neither handles nor ignores %s: handle it, or list it as ignored in this test with why", consumer, strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		t.Errorf("%s names %s, which are no event types", consumer, strings.Join(extra, ", "))
	}
}

// TypeConstants are the values of the event type constants: the const
// block of event.go that starts with RunStarted.
func TypeConstants(t testing.TB) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(eventDir(), "event.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST || len(gd.Specs) == 0 || gd.Specs[0].(*ast.ValueSpec).Names[0].Name != "RunStarted" {
			continue
		}
		var out []string
		for _, spec := range gd.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, s)
				}
			}
		}
		return out
	}
	t.Fatal("event.go has no const block starting with RunStarted")
	return nil
}

// eventDir is package event's source directory.
func eventDir() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(here))
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// constants are package event's string constants, by name, read from its
// source.
func constants(t testing.TB) map[string]string {
	t.Helper()
	dir := eventDir()
	fset := token.NewFileSet()
	out := map[string]string{}
	for _, name := range []string{"event.go", "outcome.go"} {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							out[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return out
}
