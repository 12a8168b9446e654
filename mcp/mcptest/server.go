// Package mcptest is a real MCP tool server for tests, built with the
// official SDK: over stdio (a test binary runs it when MCPTEST_SERVER is
// set; see MaybeServe) or over Streamable HTTP (Handler). Every call is
// appended to a log file, so tests can count what actually ran.
//
// Tools: echo (readOnlyHint), add (structured result), picture (an image),
// slow (sleeps ms milliseconds), wait (the same, readOnlyHint), fail (an error result), create_issue (a
// side effect: numbered, logged), crash (the server exits mid-call),
// big (n bytes of text), ping (a side effect with no arguments),
// read_text_file and read_media_file (a file, as the reference filesystem
// server returns it: content and the same again as structured content)
// and file_json (a file as base64 in structured content only); what a
// server asks of its client: swap_tools (removes echo and adds shout:
// notifications/tools/list_changed), steps (n progress notifications, ms
// apart, then it waits for a gate file if named), ask (an elicitation of one field, answer, as the 2026 protocol's
// input request) and sample (a sampling request the same way). Resources:
// notes://readme (text) and notes://logo (a blob).
package mcptest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Environment of a stdio test server.
const (
	EnvServe = "MCPTEST_SERVER" // set: the test binary serves MCP on stdio and exits
	EnvLog   = "MCPTEST_LOG"    // file every call is appended to, one JSON line each
	// EnvMode changes how the server misbehaves: "fail" (say why on
	// stderr and exit 1 before initialize), "hang" (never answer
	// initialize), "garbage" (write a line that is no JSON-RPC to
	// stdout first) or "flood" (offer 300 more tools, one with a 100 KB
	// schema, one with a 10 KB description).
	EnvMode = "MCPTEST_MODE"
	// EnvCrashOnce names a file: crash exits only while it does not exist,
	// and creates it; so a restarted server answers.
	EnvCrashOnce = "MCPTEST_CRASH_ONCE"
	// EnvEffectDelay makes create_issue wait this many milliseconds after
	// it has acted (logged) and before it answers: a window to kill in.
	EnvEffectDelay = "MCPTEST_EFFECT_DELAY_MS"
)

// MaybeServe serves MCP on stdio and exits when EnvServe is set; call it
// first thing in TestMain.
func MaybeServe() {
	if os.Getenv(EnvServe) != "" {
		Serve()
	}
}

// Serve serves MCP on stdio, as EnvMode says, and exits.
func Serve() {
	switch os.Getenv(EnvMode) {
	case "fail":
		fmt.Fprintln(os.Stderr, "mcptest: cannot reach the issue tracker: token rejected")
		os.Exit(1)
	case "hang":
		time.Sleep(time.Hour)
	case "garbage":
		fmt.Println("Server starting on stdio... (a log line where the protocol should be)")
	}
	s := NewServer(os.Getenv(EnvLog))
	if os.Getenv(EnvMode) == "flood" {
		flood(s)
	}
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Handler serves the same tools over Streamable HTTP, requiring the
// bearer token when it is not empty.
func Handler(logPath, token string) http.Handler {
	s := NewServer(logPath)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Call is one logged call.
type Call struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	Key  string          `json:"key,omitempty"` // the _meta idempotency key, if sent
	PID  int             `json:"pid"`
}

// Calls reads the calls logged at path.
func Calls(path string) ([]Call, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []Call
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, c)
	}
	return out, nil
}

type logger struct {
	mu   sync.Mutex
	path string
}

func (l *logger) log(req *sdk.CallToolRequest) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Call{Tool: req.Params.Name, Args: req.Params.Arguments, PID: os.Getpid()}
	if k, ok := req.Params.Meta["idempotency_key"].(string); ok {
		c.Key = k
	}
	if l.path == "" {
		return 0
	}
	calls, _ := Calls(l.path)
	line, _ := json.Marshal(c)
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = f.Write(append(line, '\n'))
		_ = f.Sync()
		_ = f.Close()
	}
	return len(calls) + 1
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

func args[T any](req *sdk.CallToolRequest) T {
	var v T
	_ = json.Unmarshal(req.Params.Arguments, &v)
	return v
}

// NewServer is the test server; calls are logged to logPath ("" logs
// nothing).
func NewServer(logPath string) *sdk.Server {
	l := &logger{path: logPath}
	s := sdk.NewServer(&sdk.Implementation{Name: "mcptest", Version: "1"}, nil)
	obj := func(props string, required ...string) json.RawMessage {
		req, _ := json.Marshal(required)
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
	}
	s.AddTool(&sdk.Tool{Name: "echo", Description: "Echo the text back.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: obj(`"text":{"type":"string"}`, "text")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			return text("echo: " + args[struct{ Text string }](req).Text), nil
		})
	s.AddTool(&sdk.Tool{Name: "add", Description: "Add two numbers.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: obj(`"a":{"type":"number"},"b":{"type":"number"}`, "a", "b")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			a := args[struct{ A, B float64 }](req)
			return &sdk.CallToolResult{StructuredContent: map[string]any{"sum": a.A + a.B}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "picture", Description: "Draw a picture.", InputSchema: obj(``)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "here it is"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte("\x89PNG\r\n\x1a\nnot really")},
			}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "slow", Description: "Wait ms milliseconds.", InputSchema: obj(`"ms":{"type":"integer"}`, "ms")},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			select {
			case <-time.After(time.Duration(args[struct{ MS int }](req).MS) * time.Millisecond):
			case <-ctx.Done():
			}
			return text("done waiting"), nil
		})
	s.AddTool(&sdk.Tool{Name: "wait", Description: "Look something up slowly (ms milliseconds).", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: obj(`"ms":{"type":"integer"}`, "ms")},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			select {
			case <-time.After(time.Duration(args[struct{ MS int }](req).MS) * time.Millisecond):
			case <-ctx.Done():
			}
			return text("looked it up"), nil
		})
	s.AddTool(&sdk.Tool{Name: "fail", Description: "Report an error.", InputSchema: obj(``)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			res := text("the tracker is read-only today")
			res.IsError = true
			return res, nil
		})
	s.AddTool(&sdk.Tool{Name: "create_issue", Description: "Create an issue.",
		InputSchema: obj(`"repo":{"type":"string"},"title":{"type":"string"},"body":{"type":"string"}`, "repo", "title")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			n := l.log(req)
			if ms, _ := strconv.Atoi(os.Getenv(EnvEffectDelay)); ms > 0 {
				time.Sleep(time.Duration(ms) * time.Millisecond)
			}
			a := args[struct{ Repo, Title string }](req)
			return &sdk.CallToolResult{
				Content:           []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("created issue #%d in %s: %s", n, a.Repo, a.Title)}},
				StructuredContent: map[string]any{"number": n, "repo": a.Repo},
			}, nil
		})
	s.AddTool(&sdk.Tool{Name: "crash", Description: "Crash the server.", InputSchema: obj(``)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			if once := os.Getenv(EnvCrashOnce); once != "" {
				if _, err := os.Stat(once); err == nil {
					return text("not crashing twice"), nil
				}
				_ = os.WriteFile(once, nil, 0o644)
			}
			fmt.Fprintln(os.Stderr, "mcptest: crashing as asked")
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&sdk.Tool{Name: "big", Description: "Return n bytes of text.", InputSchema: obj(`"n":{"type":"integer"}`, "n")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			return text(strings.Repeat("x", args[struct{ N int }](req).N)), nil
		})
	s.AddTool(&sdk.Tool{Name: "ping", Description: "Ping the on-call engineer.", InputSchema: obj(``)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			n := l.log(req)
			return text(fmt.Sprintf("paged the on-call engineer (page #%d)", n)), nil
		})
	s.AddTool(&sdk.Tool{Name: "sh", Description: "Run a shell command and return its output.", InputSchema: obj(`"command":{"type":"string"}`, "command")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			out, err := exec.Command("/bin/sh", "-c", args[struct{ Command string }](req).Command).CombinedOutput()
			if err != nil {
				out = append(out, "\n"+err.Error()...)
			}
			return text(string(out)), nil
		})
	addFileTools(s, l, obj(`"path":{"type":"string"}`, "path"))
	addAsking(s, l, obj)
	return s
}

// addAsking adds the tools that ask something of the client, and the
// resources.
func addAsking(s *sdk.Server, l *logger, obj func(props string, required ...string) json.RawMessage) {
	s.AddTool(&sdk.Tool{Name: "swap_tools", Description: "Replace echo with shout.", InputSchema: obj(``)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			s.RemoveTools("echo")
			s.AddTool(&sdk.Tool{Name: "shout", Description: "Echo the text back, louder.", InputSchema: obj(`"text":{"type":"string"}`, "text")},
				func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
					l.log(req)
					return text("SHOUT: " + strings.ToUpper(args[struct{ Text string }](req).Text)), nil
				})
			return text("echo is gone; shout is here"), nil
		})
	s.AddTool(&sdk.Tool{Name: "steps", Description: "Take n steps, ms milliseconds each, saying how far it has come; then wait for the file gate, if named.",
		InputSchema: obj(`"n":{"type":"integer"},"ms":{"type":"integer"},"gate":{"type":"string"}`, "n", "ms")},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			a := args[struct {
				N, MS int
				Gate  string
			}](req)
			defer func() {
				for a.Gate != "" && ctx.Err() == nil {
					if _, err := os.Stat(a.Gate); err == nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
			for i := 1; i <= a.N; i++ {
				select {
				case <-time.After(time.Duration(a.MS) * time.Millisecond):
				case <-ctx.Done():
					return text("stopped"), nil
				}
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
						ProgressToken: tok, Progress: float64(i), Total: float64(a.N), Message: fmt.Sprintf("step %d", i)})
				}
			}
			return text(fmt.Sprintf("took %d steps", a.N)), nil
		})
	s.AddTool(&sdk.Tool{Name: "ask", Description: "Ask the person a question.", InputSchema: obj(`"question":{"type":"string"}`, "question")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			q := args[struct{ Question string }](req).Question
			resp, ok := req.Params.InputResponses["q"].(*sdk.ElicitResult)
			if !ok {
				return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"q": &sdk.ElicitParams{Message: q,
					RequestedSchema: map[string]any{"type": "object", "required": []any{"answer"},
						"properties": map[string]any{"answer": map[string]any{"type": "string", "description": "Your answer"}}}}}}, nil
			}
			l.log(req)
			if resp.Action != "accept" {
				return text("the person chose " + resp.Action), nil
			}
			return text(fmt.Sprintf("the person answered: %v", resp.Content["answer"])), nil
		})
	s.AddTool(&sdk.Tool{Name: "sample", Description: "Ask the client's model for a completion.", InputSchema: obj(``)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			l.log(req)
			if _, ok := req.Params.InputResponses["s"]; !ok {
				// Deprecated in the 2026 protocol, and still what servers send.
				//lint:ignore SA1019 a server that asks for sampling is what this tool is
				msg := []*sdk.SamplingMessageV2{{Role: "user", Content: []sdk.Content{&sdk.TextContent{Text: "hello"}}}}
				//lint:ignore SA1019 the same
				params := &sdk.CreateMessageWithToolsParams{MaxTokens: 10, Messages: msg}
				return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"s": params}}, nil
			}
			return text("the client's model answered"), nil
		})
	s.AddResource(&sdk.Resource{URI: "notes://readme", Name: "readme", MIMEType: "text/plain", Description: "What the notes are."},
		func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "notes://readme", MIMEType: "text/plain",
				Text: "The notes say: the launch code is 0000."}}}, nil
		})
	s.AddResource(&sdk.Resource{URI: "notes://logo", Name: "logo", MIMEType: "image/png"},
		func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "notes://logo", MIMEType: "image/png",
				Blob: []byte("\x89PNG\r\n\x1a\nnot really a logo")}}}, nil
		})
}

// addFileTools adds read_text_file and read_media_file, answering as the
// reference filesystem server (@modelcontextprotocol/server-filesystem)
// does, and file_json.
func addFileTools(s *sdk.Server, l *logger, schema json.RawMessage) {
	read := func(req *sdk.CallToolRequest) (string, []byte, *sdk.CallToolResult) {
		l.log(req)
		path, _ := filepath.Abs(args[struct{ Path string }](req).Path)
		b, err := os.ReadFile(path)
		if err != nil {
			res := text(err.Error())
			res.IsError = true
			return "", nil, res
		}
		return path, b, nil
	}
	s.AddTool(&sdk.Tool{Name: "read_text_file", Description: "Read a text file.", InputSchema: schema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			_, b, failed := read(req)
			if failed != nil {
				return failed, nil
			}
			return &sdk.CallToolResult{
				Content:           []sdk.Content{&sdk.TextContent{Text: string(b)}},
				StructuredContent: map[string]any{"content": string(b)},
			}, nil
		})
	s.AddTool(&sdk.Tool{Name: "read_media_file", Description: "Read a file as base64 with its MIME type.", InputSchema: schema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			path, b, failed := read(req)
			if failed != nil {
				return failed, nil
			}
			data := base64.StdEncoding.EncodeToString(b)
			mimeType := map[string]string{".png": "image/png", ".wav": "audio/wav"}[filepath.Ext(path)]
			var c sdk.Content
			item := map[string]any{"type": "image", "data": data, "mimeType": mimeType}
			switch {
			case strings.HasPrefix(mimeType, "image/"):
				c = &sdk.ImageContent{MIMEType: mimeType, Data: b}
			case strings.HasPrefix(mimeType, "audio/"):
				c, item["type"] = &sdk.AudioContent{MIMEType: mimeType, Data: b}, "audio"
			default:
				uri := "file://" + path
				c = &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: "application/octet-stream", Blob: b}}
				item = map[string]any{"type": "resource", "resource": map[string]any{"uri": uri, "mimeType": "application/octet-stream", "blob": data}}
			}
			return &sdk.CallToolResult{Content: []sdk.Content{c}, StructuredContent: map[string]any{"content": []any{item}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "file_json", Description: "A file's name, size and bytes (base64), as JSON.", InputSchema: schema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			path, b, failed := read(req)
			if failed != nil {
				return failed, nil
			}
			return &sdk.CallToolResult{StructuredContent: map[string]any{
				"name": filepath.Base(path), "size": len(b), "data": base64.StdEncoding.EncodeToString(b)}}, nil
		})
}

// flood adds more tools than a client should take, and oversized ones.
func flood(s *sdk.Server) {
	noop := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("ok"), nil }
	empty := json.RawMessage(`{"type":"object","properties":{}}`)
	s.AddTool(&sdk.Tool{Name: "huge_schema", InputSchema: json.RawMessage(`{"type":"object","description":"` + strings.Repeat("s", 100<<10) + `"}`)}, noop)
	s.AddTool(&sdk.Tool{Name: "long_description", Description: strings.Repeat("d", 10<<10), InputSchema: empty}, noop)
	for i := range 300 {
		s.AddTool(&sdk.Tool{Name: fmt.Sprintf("t%03d", i), InputSchema: empty}, noop)
	}
}
