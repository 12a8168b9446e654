package llmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

const streamReq = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestParseScript(t *testing.T) {
	t.Parallel()
	s, err := ParseScript([]byte(`{"turns":[{"text":"hi","tool_calls":[{"name":"ls","arguments":{"dir": "."}}]},{"status":429,"headers":{"Retry-After":"1"}}],"loop":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Turns) != 2 || !s.Loop || s.Turns[0].ToolCalls[0].arguments() != `{"dir":"."}` || s.Turns[1].Headers["Retry-After"] != "1" {
		t.Errorf("script = %+v", s)
	}
	// The example in the package documentation.
	s, err = ParseScript([]byte(`{
	  "loop": false,
	  "log_path": "requests.jsonl",
	  "turns": [
	    {"status": 429, "headers": {"Retry-After": "1"}},
	    {"text": "Let me look.", "reasoning": "the user wants a file",
	     "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
	     "quirks": ["no_index", "split_args"]},
	    {"text": "It says hello.", "usage": {"prompt_tokens": 50, "completion_tokens": 4},
	     "chunk_delay_ms": 20}
	  ]
	}`))
	if err != nil || len(s.Turns) != 3 || s.LogPath != "requests.jsonl" {
		t.Errorf("documented example: %+v, %v", s, err)
	}
	s, err = ParseScript([]byte(`[{"text":"a"},{"text":"b"}]`))
	if err != nil || len(s.Turns) != 2 {
		t.Errorf("array form: %+v, %v", s, err)
	}
	for _, bad := range []string{
		`{"turns":[{"txt":"typo"}]}`,
		`{"turns":[{"quirks":["no_such_quirk"]}]}`,
		`{"turns":[{"status":42}]}`,
		`{"turns":[{"keepalive_ms":-1}]}`,
		`{"turns":[],"context_error":"no_such_server"}`,
		`{"turns":[`,
	} {
		if _, err := ParseScript([]byte(bad)); err == nil {
			t.Errorf("ParseScript(%s) succeeded, want an error", bad)
		}
	}
}

func TestCallArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		call Call
		want string
	}{
		{Call{}, "{}"},
		{Call{Arguments: json.RawMessage(` { "a" : 1 } `)}, `{"a":1}`},
		{Call{Arguments: json.RawMessage(`"{\"a\":1}"`)}, `{"a":1}`},
		{Call{Arguments: json.RawMessage(`{"a":1}`), RawArguments: `{"a":`}, `{"a":`},
	}
	for _, tt := range tests {
		if got := tt.call.arguments(); got != tt.want {
			t.Errorf("%+v: arguments = %q, want %q", tt.call, got, tt.want)
		}
	}
}

func TestTurnsInOrderThenExhausted(t *testing.T) {
	t.Parallel()
	srv := NewServer(t, Script{Turns: []Turn{{Status: 429}, {Text: "ok"}}})
	if resp, _ := post(t, srv.URL(), streamReq); resp.StatusCode != 429 {
		t.Errorf("turn 1 status %d, want 429", resp.StatusCode)
	}
	resp, body := post(t, srv.URL(), streamReq)
	if resp.StatusCode != 200 || !strings.Contains(body, `"content":"o"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("turn 2: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, srv.URL(), streamReq)
	if resp.StatusCode != 500 || !strings.Contains(body, "llmtest: script exhausted after 2 turns") {
		t.Errorf("turn 3: %d %s", resp.StatusCode, body)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[0].Turn != 0 || reqs[1].Turn != 1 || reqs[2].Turn != -1 {
		t.Errorf("requests = %+v", reqs)
	}
	if m := reqs[0].LastMessage(); m.Role != "user" || m.Content != "hi" || reqs[0].Model() != "m" || !reqs[0].Stream() {
		t.Errorf("helpers: %+v %q %v", m, reqs[0].Model(), reqs[0].Stream())
	}
}

func TestLoopIsConcurrencySafe(t *testing.T) {
	t.Parallel()
	srv := NewServer(t, Script{Loop: true, Turns: []Turn{{Text: "a"}, {Text: "b"}}})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(streamReq))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	counts := map[int]int{}
	for _, r := range srv.Requests() {
		counts[r.Turn]++
	}
	if srv.RequestCount() != 20 || counts[0] != 10 || counts[1] != 10 {
		t.Errorf("turn counts %v over %d requests, want 10 each", counts, srv.RequestCount())
	}
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	srv := NewServer(t, Script{LogPath: path, Turns: []Turn{{Text: "a"}, {Text: "b"}}})
	post(t, srv.URL(), "{\n  \"model\": \"one\",\n  \"stream\": true\n}")
	post(t, srv.URL(), `{"model":"two"}`)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var models []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v struct{ Model string }
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		models = append(models, v.Model)
	}
	if strings.Join(models, ",") != "one,two" {
		t.Errorf("logged models %v, want one,two", models)
	}
}

func TestNonStreamingReply(t *testing.T) {
	t.Parallel()
	srv := NewServer(t, Script{Turns: []Turn{{ToolCalls: []Call{{Name: "ls", Arguments: json.RawMessage(`{}`)}}, Usage: &Usage{PromptTokens: 1, CompletionTokens: 2}}}})
	resp, body := post(t, srv.URL(), `{"model":"m","stream":false,"messages":[]}`)
	var v struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string                `json:"id"`
					Function struct{ Name string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage Usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%v: %s", err, body)
	}
	c := v.Choices[0]
	if c.Message.Content != nil || c.Message.ToolCalls[0].Function.Name != "ls" || c.Message.ToolCalls[0].ID != "call_1_1" ||
		c.FinishReason != "tool_calls" || v.Usage.CompletionTokens != 2 {
		t.Errorf("reply = %s", body)
	}
}

// The stream shapes the quirks promise, checked on the raw bytes.
func TestQuirkShapes(t *testing.T) {
	t.Parallel()
	call := []Call{{ID: "call_q", Name: "ls", Arguments: json.RawMessage(`{"dir":"src"}`)}}
	tests := []struct {
		turn      Turn
		contains  []string
		excludes  []string
		endsClean bool // ends with data: [DONE]
	}{
		{Turn{ToolCalls: call}, []string{`"index":0,"id":"call_q","type":"function","function":{"name":"ls","arguments":""}`, `"finish_reason":"tool_calls"`}, nil, true},
		{Turn{ToolCalls: call, Quirks: []string{"no_index"}}, []string{`"tool_calls":[{"id":"call_q"`}, []string{`"index":0,"id"`}, true},
		{Turn{ToolCalls: call, Quirks: []string{"split_args"}}, []string{`"arguments":"{"`, `"arguments":"\""`, `"arguments":"d"`}, nil, true},
		{Turn{ToolCalls: call, Quirks: []string{"whole_args"}}, []string{`"arguments":"{\"dir\":\"src\"}"`}, nil, true},
		{Turn{ToolCalls: call, Quirks: []string{"id_repeated"}}, []string{`{"index":0,"id":"call_q","function":{"arguments":`}, nil, true},
		{Turn{ToolCalls: call, Quirks: []string{"id_new_each_chunk"}}, []string{`"id":"call_q_1"`, `"id":"call_q_2"`}, nil, true},
		{Turn{ToolCalls: call, Quirks: []string{"id_empty"}}, []string{`"id":""`}, []string{`call_q`}, true},
		{Turn{ToolCalls: call, Quirks: []string{"duplicate_index"}}, []string{`"arguments":""}},{"index":0,"function"`}, nil, true},
		{Turn{ToolCalls: call, Quirks: []string{"finish_stop_with_tools"}}, []string{`"finish_reason":"stop"`}, []string{`"tool_calls"}`}, true},
		{Turn{Text: "x", Quirks: []string{"no_finish_reason"}}, []string{`"choices":[],"usage"`}, []string{`"finish_reason":"`}, true},
		{Turn{Text: "hello world", Quirks: []string{"cut_off"}}, []string{`"content":"hell"`}, []string{`"finish_reason":"`, "[DONE]", `"usage"`}, false},
		{Turn{Text: "x", Reasoning: "r", Quirks: []string{"content_parts"}}, []string{`"content":[{"type":"thinking","thinking":[{"type":"text","text":"r"}]}]`, `"content":[{"type":"text","text":"x"}]`}, []string{"reasoning_content"}, true},
		{Turn{Text: "x", Quirks: []string{"usage_empty_choices"}}, []string{`"choices":[],"usage"`}, nil, true},
		{Turn{Text: "x", Quirks: []string{"keepalive"}}, []string{": OPENROUTER PROCESSING\n\n"}, nil, true},
		{Turn{Text: "hello world", Quirks: []string{"error_openrouter"}}, []string{`data: {"error":{"code":502,"message":"upstream"}}`}, []string{"[DONE]", "finish_reason\":\""}, false},
		{Turn{Text: "hello world", Quirks: []string{"error_vllm"}}, []string{`data: {"object":"error"`}, []string{"[DONE]"}, false},
		{Turn{Text: "x", Reasoning: "r", Quirks: []string{"reasoning_field"}}, []string{`"reasoning":"r"`}, []string{"reasoning_content"}, true},
		{Turn{Text: "x", Reasoning: "r"}, []string{`"reasoning_content":"r"`}, nil, true},
	}
	for _, tt := range tests {
		srv := NewServer(t, Script{Turns: []Turn{tt.turn}})
		_, body := post(t, srv.URL(), streamReq)
		for _, s := range tt.contains {
			if !strings.Contains(body, s) {
				t.Errorf("%v: stream lacks %s:\n%s", tt.turn.Quirks, s, body)
			}
		}
		for _, s := range tt.excludes {
			if strings.Contains(body, s) {
				t.Errorf("%v: stream has %s:\n%s", tt.turn.Quirks, s, body)
			}
		}
		if got := strings.HasSuffix(body, "data: [DONE]\n\n"); got != tt.endsClean {
			t.Errorf("%v: ends with [DONE] = %v, want %v", tt.turn.Quirks, got, tt.endsClean)
		}
	}
}

func TestDisconnectDropsTheConnection(t *testing.T) {
	t.Parallel()
	srv := NewServer(t, Script{Turns: []Turn{{Text: "some longer text to cut", Quirks: []string{"disconnect"}}}})
	resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(streamReq))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil || strings.Contains(string(data), "[DONE]") {
		t.Errorf("read %q, err %v; want an unexpected EOF before [DONE]", data, err)
	}
}

// A keep-alive turn sends its headers at once and then comments while it
// waits: from the start through a delay, and after the first chunks
// through a hang.
func TestKeepaliveTurns(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		turn      Turn
		firstData bool // a data line comes before the comments
	}{
		{"only keep-alives", Turn{Text: "late", DelayMS: 60_000, KeepaliveMS: 5}, false},
		{"keep-alives after some content", Turn{Text: "stalls", Hang: true, KeepaliveMS: 5}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := NewServer(t, Script{Turns: []Turn{tt.turn}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(streamReq))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("content type %q", ct)
			}
			r := bufio.NewReader(resp.Body)
			var sawData bool
			comments := 0
			for comments < 3 {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				switch {
				case strings.HasPrefix(line, "data: "):
					if comments > 0 || strings.Contains(line, "[DONE]") {
						t.Fatalf("data after keep-alives: %q", line)
					}
					sawData = true
				case line == ": keep-alive\n":
					comments++
				}
			}
			if sawData != tt.firstData {
				t.Errorf("data before the keep-alives = %v, want %v", sawData, tt.firstData)
			}
		})
	}
}

func TestHangReleasedByClientAndClose(t *testing.T) {
	t.Parallel()
	srv, err := Start(Script{Turns: []Turn{{Text: "hello", Hang: true}, {Text: "hello", Hang: true}}})
	if err != nil {
		t.Fatal(err)
	}

	// The client leaving ends the first hang.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(streamReq))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.HasPrefix(line, "data: ") {
		t.Errorf("first line %q", line)
	}
	cancel()
	resp.Body.Close()

	// Close ends the second one, promptly.
	go func() {
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(streamReq))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	for srv.RequestCount() < 2 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	srv.Close()
	if d := time.Since(start); d > time.Minute { // not the hang's forever, whatever the load
		t.Errorf("close took %v", d)
	}
}

// A gated turn answers once its gate is closed, however long that takes.
func TestGateHoldsTheReply(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	srv := NewServer(t, Script{Turns: []Turn{{Text: "let go", Gate: gate}}})
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":false,"messages":[]}`))
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		answered <- string(data)
	}()
	for deadline := time.Now().Add(time.Minute); srv.RequestCount() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never came")
		}
	}
	select {
	case body := <-answered:
		t.Fatalf("answered before the gate was closed: %s", body)
	default:
	}
	close(gate)
	select {
	case body := <-answered:
		if !strings.Contains(body, "let go") {
			t.Errorf("reply = %s", body)
		}
	case <-time.After(time.Minute):
		t.Fatal("no reply once the gate was closed")
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	srv := NewServer(t, Script{})
	resp, err := http.Get(srv.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("models status %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown route status %d", resp.StatusCode)
	}
	if r, body := post(t, srv.URL(), "not json"); r.StatusCode != 400 || srv.RequestCount() != 1 || srv.Requests()[0].Turn != -1 {
		t.Errorf("bad body: %d %s", r.StatusCode, body)
	}
}

func TestWhenRoutesTurns(t *testing.T) {
	t.Parallel()
	srv := NewServer(t, Script{Turns: []Turn{
		{When: "phase a", Text: "a1"},
		{When: "phase b", Text: "b1"},
		{When: "phase a", Text: "a2"},
	}})
	ask := func(prompt string) string {
		_, body := post(t, srv.URL(),
			`{"model":"m","stream":false,"messages":[{"role":"user","content":"`+prompt+`"}]}`)
		return body
	}
	for _, c := range []struct{ prompt, want string }{
		{"this is phase b", `"content":"b1"`},
		{"this is phase a", `"content":"a1"`},
		{"this is phase a", `"content":"a2"`},
		{"this is phase a", "script exhausted"},
	} {
		if got := ask(c.prompt); !strings.Contains(got, c.want) {
			t.Errorf("%q got %s, want %s", c.prompt, got, c.want)
		}
	}
}

// A request past the window is refused in each server's words, stating
// the window and the request's tokens (Ollama states only the excess);
// one that fits gets its turn, with usage counted the same way.
func TestContextWindowRefusals(t *testing.T) {
	t.Parallel()
	long := `{"model":"m","stream":false,"messages":[{"role":"user","content":"` + strings.Repeat("w", 400) + `"}]}`
	short := `{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`
	for _, name := range ContextErrors() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := NewServer(t, Script{ContextWindow: 64, ContextError: name, Turns: []Turn{{Text: "fits"}}})
			resp, body := post(t, srv.URL(), long)
			tokens := len(long) / 4
			var want []string
			switch name {
			case "ollama":
				want = []string{"exceeded max context length by " + strconv.Itoa(tokens-64) + " tokens"}
			case "llamacpp":
				want = []string{`"n_ctx":64`, `"n_prompt_tokens":` + strconv.Itoa(tokens)}
			default:
				want = []string{"maximum context length is 64 tokens", strconv.Itoa(tokens) + " tokens"}
			}
			if resp.StatusCode != 400 || !json.Valid([]byte(body)) {
				t.Fatalf("HTTP %d %s, want 400 and a JSON body", resp.StatusCode, body)
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("refusal %s does not say %q", body, w)
				}
			}
			resp, body = post(t, srv.URL(), short)
			if resp.StatusCode != 200 || !strings.Contains(body, "fits") {
				t.Errorf("a request within the window: HTTP %d %s", resp.StatusCode, body)
			}
			reqs := srv.Requests()
			if len(reqs) != 2 || !reqs[0].TooLong || reqs[0].Turn != -1 || reqs[1].TooLong || reqs[1].Turn != 0 {
				t.Errorf("requests: %+v", reqs)
			}
		})
	}
}
