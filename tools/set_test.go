package tools

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// fakeTool is an extra tool built from a function.
type fakeTool struct {
	name     string
	readOnly bool
	params   string
	RunFunc  func(args json.RawMessage) Result
}

func (f *fakeTool) Definition() Definition {
	p := f.params
	if p == "" {
		p = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`
	}
	return Definition{Name: f.name, Description: "fake", Parameters: json.RawMessage(p)}
}
func (f *fakeTool) ReadOnly() bool { return f.readOnly }
func (f *fakeTool) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	return f.RunFunc(args)
}

var builtinNames = []string{"read_file", "write_file", "edit_file", "list_files", "grep", "bash"}

func TestNewSet(t *testing.T) {
	t.Parallel()
	extra := &fakeTool{name: "send_email"}
	tests := []struct {
		name      string
		opts      Options
		extra     []Tool
		wantNames []string
		wantErr   string
	}{
		{name: "all builtins", wantNames: builtinNames},
		{name: "extra appended", extra: []Tool{extra}, wantNames: append(append([]string{}, builtinNames...), "send_email")},
		{name: "allow keeps definition order", opts: Options{Allow: []string{"grep", "read_file"}}, wantNames: []string{"read_file", "grep"}},
		{name: "deny removes", opts: Options{Deny: []string{"bash", "write_file"}}, wantNames: []string{"read_file", "edit_file", "list_files", "grep"}},
		{name: "allow and deny", opts: Options{Allow: []string{"grep", "bash"}, Deny: []string{"bash"}}, wantNames: []string{"grep"}},
		{name: "allow an extra", opts: Options{Allow: []string{"send_email"}}, extra: []Tool{extra}, wantNames: []string{"send_email"}},
		{name: "unknown in allow", opts: Options{Allow: []string{"read_file", "shell"}},
			wantErr: `unknown tool "shell" in allow list; valid tools: read_file, write_file, edit_file, list_files, grep, bash`},
		{name: "unknown in deny", opts: Options{Deny: []string{"rm"}}, wantErr: `unknown tool "rm" in deny list; valid tools: `},
		{name: "duplicate", extra: []Tool{&fakeTool{name: "bash"}}, wantErr: `duplicate tool "bash"`},
		{name: "bad schema", extra: []Tool{&fakeTool{name: "x", params: `{`}}, wantErr: "x: parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws, err := NewWorkspace(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSet(ws, tt.opts, tt.extra...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Names(); !reflect.DeepEqual(got, tt.wantNames) {
				t.Fatalf("Names() = %v, want %v", got, tt.wantNames)
			}
			defs := s.Definitions()
			for i, d := range defs {
				if d.Name != tt.wantNames[i] || d.Description == "" {
					t.Fatalf("definition %d = %q (description %q)", i, d.Name, d.Description)
				}
				var sc struct {
					Type       string                     `json:"type"`
					Properties map[string]json.RawMessage `json:"properties"`
				}
				if err := json.Unmarshal(d.Parameters, &sc); err != nil || sc.Type != "object" || len(sc.Properties) == 0 {
					t.Fatalf("%s parameters are not an object schema: %s (%v)", d.Name, d.Parameters, err)
				}
			}
		})
	}
	if _, err := NewSet(nil, Options{}); err == nil {
		t.Fatal("NewSet(nil) succeeded")
	}
}

func TestSetReadOnly(t *testing.T) {
	t.Parallel()
	s, _ := newTestSet(t, Options{Deny: []string{"grep"}}, nil, &fakeTool{name: "lookup", readOnly: true})
	for name, want := range map[string]bool{
		"read_file": true, "list_files": true, "lookup": true,
		"write_file": false, "edit_file": false, "bash": false,
		"grep": false, // disabled
		"nope": false,
	} {
		if got := s.ReadOnly(name); got != want {
			t.Errorf("ReadOnly(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSetRun(t *testing.T) {
	t.Parallel()
	extra := []Tool{
		&fakeTool{name: "boom", RunFunc: func(json.RawMessage) Result { panic("kaboom") }},
		&fakeTool{name: "loud", RunFunc: func(json.RawMessage) Result { return Result{Output: strings.Repeat("z", 5000)} }},
		&fakeTool{name: "echo", RunFunc: func(a json.RawMessage) Result { return Result{Output: string(a)} }},
	}
	tests := []struct {
		name, tool, args string
		want             string
		isErr, truncated bool
	}{
		{name: "unknown tool", tool: "shell", args: `{}`, isErr: true,
			want: `unknown tool "shell"; available: read_file, write_file, edit_file, list_files, grep, boom, loud, echo`},
		{name: "disabled tool", tool: "bash", args: `{"command":"true"}`, isErr: true,
			want: `tool "bash" is disabled in this run; available: read_file, write_file, edit_file, list_files, grep, boom, loud, echo`},
		{name: "invalid JSON", tool: "write_file", args: `{"path": "a.txt", "content": "x`, isErr: true,
			want: "invalid arguments for write_file: arguments are not valid JSON: unexpected end of JSON input (at byte 31)"},
		{name: "not an object", tool: "read_file", args: `["a.txt"]`, isErr: true,
			want: "invalid arguments for read_file: arguments must be a JSON object: json: cannot unmarshal array into Go value of type map[string]json.RawMessage"},
		{name: "empty string means no arguments", tool: "write_file", args: "", isErr: true,
			want: `invalid arguments for write_file: missing required argument "path"`},
		{name: "null argument is missing", tool: "read_file", args: `{"path":null}`, isErr: true,
			want: `invalid arguments for read_file: missing required argument "path"`},
		{name: "wrong type", tool: "read_file", args: `{"path":5}`, isErr: true,
			want: `invalid arguments for read_file: argument "path" must be a string, not number`},
		{name: "unknown argument", tool: "read_file", args: `{"path":"a.txt","file_path":"a.txt"}`, isErr: true,
			want: `invalid arguments for read_file: unknown argument "file_path"; valid arguments: limit, offset, path`},
		{name: "extra tool required argument", tool: "echo", args: `{}`, isErr: true,
			want: `invalid arguments for echo: missing required argument "to"`},
		{name: "extra tool gets the arguments", tool: "echo", args: `{"to":"x","cc":"y"}`, want: `{"to":"x","cc":"y"}`},
		{name: "panic becomes an error", tool: "boom", args: `{"to":"x"}`, isErr: true, want: "tool boom crashed: kaboom"},
		{name: "extra output truncated", tool: "loud", args: `{"to":"x"}`, truncated: true,
			want: strings.Repeat("z", 452) + "\n… [truncated 4096 bytes; showing first 452 and last 452 bytes] …\n" + strings.Repeat("z", 452)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestSet(t, Options{Deny: []string{"bash"}, MaxOutput: 1000}, map[string]string{"a.txt": "a\n"}, extra...)
			res := s.Run(context.Background(), tt.tool, tt.args)
			if res.IsError != tt.isErr || res.Truncated != tt.truncated || res.Output != tt.want {
				t.Fatalf("result = %+v\nwant IsError=%v Truncated=%v output:\n%s", res, tt.isErr, tt.truncated, tt.want)
			}
		})
	}
}
