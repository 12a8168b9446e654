package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/llm"
	"agent/llm/llmtest"
)

// fakeClock records the delays the client would have slept.
type fakeClock struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delays = append(c.delays, d)
	return ctx.Err()
}

func (c *fakeClock) Delays() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.delays...)
}

// newClient returns a client for url that never really sleeps.
func newClient(t *testing.T, url string, edit func(*llm.Config)) (*llm.Client, *fakeClock) {
	t.Helper()
	clock := &fakeClock{}
	cfg := llm.Config{BaseURL: url, Sleep: clock.Sleep, Rand: func() float64 { return 0.5 }}
	if edit != nil {
		edit(&cfg)
	}
	c, err := llm.New(cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return c, clock
}

var simpleRequest = llm.Request{
	Model:    "test-model",
	Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
	Tools: []llm.Tool{
		{Name: "read_file", Description: "read a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		{Name: "write_file", Description: "write a file", Parameters: json.RawMessage(`{"type":"object"}`)},
	},
}

var (
	readCall  = llmtest.Call{ID: "call_a", Name: "read_file", Arguments: json.RawMessage(`{"path": "a.txt"}`)}
	writeCall = llmtest.Call{ID: "call_b", Name: "write_file", Arguments: json.RawMessage(`{"path":"b.txt","content":"héllo \"wörld\"\n"}`)}
	twoCalls  = []llmtest.Call{readCall, writeCall}
	wantTwo   = []llm.ToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.txt"}`},
		{ID: "call_b", Name: "write_file", Arguments: `{"path":"b.txt","content":"héllo \"wörld\"\n"}`},
	}
)

// synthID matches ids the client makes up; a want with ID "synth" expects one.
var synthID = regexp.MustCompile(`^call_[0-9a-f]{12}$`)

func TestStreamQuirks(t *testing.T) {
	t.Parallel()
	bigArgs := `{"content":"` + strings.Repeat("x", 1<<20) + `"}`
	tests := []struct {
		name      string
		turn      llmtest.Turn
		text      string
		calls     []llm.ToolCall
		finish    string
		usage     llm.Usage
		reasoning string
	}{
		{
			name:   "well formed text",
			turn:   llmtest.Turn{Text: "Hello, wörld! How are you today?", Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 7}},
			text:   "Hello, wörld! How are you today?",
			finish: "stop",
			usage:  llm.Usage{PromptTokens: 12, CompletionTokens: 7},
		},
		{
			name:   "well formed tool calls",
			turn:   llmtest.Turn{Text: "Let me look.", ToolCalls: twoCalls, Usage: &llmtest.Usage{PromptTokens: 3, CompletionTokens: 4}},
			text:   "Let me look.",
			calls:  wantTwo,
			finish: "tool_calls",
			usage:  llm.Usage{PromptTokens: 3, CompletionTokens: 4},
		},
		{
			// #1: a missing index must not merge the calls into call 0.
			name:   "1 no index",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"no_index"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			// #1: two calls of the same tool, told apart by their ids.
			name: "1 no index same tool twice",
			turn: llmtest.Turn{ToolCalls: []llmtest.Call{readCall, {ID: "call_c", Name: "read_file", Arguments: json.RawMessage(`{"path":"c.txt"}`)}},
				Quirks: []string{"no_index"}},
			calls: []llm.ToolCall{
				{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.txt"}`},
				{ID: "call_c", Name: "read_file", Arguments: `{"path":"c.txt"}`},
			},
			finish: "tool_calls",
		},
		{
			// #1 with Ollama's whole arguments.
			name:   "1 no index whole args",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"no_index", "whole_args"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "2 split args one character per chunk",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"split_args"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "2 whole args",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"whole_args"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			// A one-megabyte line must not trip any line-length limit.
			name:   "2 whole args huge line",
			turn:   llmtest.Turn{ToolCalls: []llmtest.Call{{ID: "call_big", Name: "write_file", RawArguments: bigArgs}}, Quirks: []string{"whole_args"}},
			calls:  []llm.ToolCall{{ID: "call_big", Name: "write_file", Arguments: bigArgs}},
			finish: "tool_calls",
		},
		{
			name:   "3 id first only",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"id_first_only"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "3 id repeated",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"id_repeated"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "3 new id each chunk keeps the first",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"id_new_each_chunk"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name: "3 empty ids are synthesized",
			turn: llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"id_empty"}},
			calls: []llm.ToolCall{
				{ID: "synth", Name: "read_file", Arguments: `{"path":"a.txt"}`},
				{ID: "synth", Name: "write_file", Arguments: `{"path":"b.txt","content":"héllo \"wörld\"\n"}`},
			},
			finish: "tool_calls",
		},
		{
			// #4: `{"` in the first chunk instead of "": still concatenated.
			name:   "4 arguments in first chunk",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"args_in_first_chunk"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name: "4 invalid arguments passed through",
			turn: llmtest.Turn{ToolCalls: []llmtest.Call{{ID: "call_x", Name: "read_file", RawArguments: `{"path": "a.txt"`}}},
			// Never parsed in llm: the runner reports invalid JSON to the model.
			calls:  []llm.ToolCall{{ID: "call_x", Name: "read_file", Arguments: `{"path": "a.txt"`}},
			finish: "tool_calls",
		},
		{
			name:   "5 duplicate index in one chunk",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"duplicate_index"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "5 duplicate index whole args",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"duplicate_index", "whole_args"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "6 finish stop with tools",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"finish_stop_with_tools"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "finish length kept",
			turn:   llmtest.Turn{Text: "cut", FinishReason: "length"},
			text:   "cut",
			finish: "length",
		},
		{
			// #7: [DONE] marks a complete stream without any finish_reason (Snowflake Cortex).
			name:   "7 no finish reason but [DONE]",
			turn:   llmtest.Turn{Text: "4", Usage: &llmtest.Usage{PromptTokens: 22, CompletionTokens: 5}, Quirks: []string{"no_finish_reason"}},
			text:   "4",
			finish: "stop",
			usage:  llm.Usage{PromptTokens: 22, CompletionTokens: 5},
		},
		{
			name:   "7 no finish reason but [DONE] with tool calls",
			turn:   llmtest.Turn{ToolCalls: twoCalls, Quirks: []string{"no_finish_reason"}},
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:   "8 usage with empty choices",
			turn:   llmtest.Turn{Text: "hi", Usage: &llmtest.Usage{PromptTokens: 5, CompletionTokens: 6}, Quirks: []string{"usage_empty_choices"}},
			text:   "hi",
			finish: "stop",
			usage:  llm.Usage{PromptTokens: 5, CompletionTokens: 6},
		},
		{
			name:   "9 usage every chunk keeps the last",
			turn:   llmtest.Turn{Text: "hello there world", Usage: &llmtest.Usage{PromptTokens: 5, CompletionTokens: 40}, Quirks: []string{"usage_every_chunk"}},
			text:   "hello there world",
			finish: "stop",
			usage:  llm.Usage{PromptTokens: 5, CompletionTokens: 40},
		},
		{
			name:   "9 usage every chunk and empty choices",
			turn:   llmtest.Turn{Text: "hello", Usage: &llmtest.Usage{PromptTokens: 5, CompletionTokens: 40}, Quirks: []string{"usage_every_chunk", "usage_empty_choices"}},
			text:   "hello",
			finish: "stop",
			usage:  llm.Usage{PromptTokens: 5, CompletionTokens: 40},
		},
		{
			name:   "10 keepalive comments blank lines and event lines",
			turn:   llmtest.Turn{Text: "still here", ToolCalls: twoCalls, Quirks: []string{"keepalive", "event_lines"}},
			text:   "still here",
			calls:  wantTwo,
			finish: "tool_calls",
		},
		{
			name:      "12 reasoning field",
			turn:      llmtest.Turn{Text: "42", Reasoning: "six times seven", Quirks: []string{"reasoning_field"}},
			text:      "42",
			finish:    "stop",
			reasoning: "six times seven",
		},
		{
			name:      "12 reasoning content",
			turn:      llmtest.Turn{Text: "42", Reasoning: "six times seven", Quirks: []string{"reasoning_content"}},
			text:      "42",
			finish:    "stop",
			reasoning: "six times seven",
		},
		{
			name: "12 reasoning in both fields counted once",
			turn: llmtest.Turn{Body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"hm\",\"reasoning_content\":\"hm\"}}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
			text:      "ok",
			finish:    "stop",
			reasoning: "hm",
		},
		{
			// #16: text parts are the answer, thinking parts the reasoning.
			name:      "16 content as parts",
			turn:      llmtest.Turn{Text: "2 + 2 = 4", Reasoning: "basic arithmetic", Quirks: []string{"content_parts"}},
			text:      "2 + 2 = 4",
			finish:    "stop",
			reasoning: "basic arithmetic",
		},
		{
			name:      "16 content as parts with tool calls",
			turn:      llmtest.Turn{Text: "Let me look.", Reasoning: "read it", ToolCalls: twoCalls, Quirks: []string{"content_parts"}},
			text:      "Let me look.",
			calls:     wantTwo,
			finish:    "tool_calls",
			reasoning: "read it",
		},
		{
			// Parts of other types are ignored; string and array content mix.
			name: "16 mixed content shapes",
			turn: llmtest.Turn{Body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},{\"type\":\"text\",\"text\":\"a\"}]}}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
			text:      "ab",
			finish:    "stop",
			reasoning: "hm",
		},
		{
			name: "bare json lines, crlf and no [DONE]",
			turn: llmtest.Turn{Body: "data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
				"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\n"},
			text:   "ab",
			finish: "stop",
			usage:  llm.Usage{PromptTokens: 1, CompletionTokens: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{tt.turn}})
			c, _ := newClient(t, srv.URL(), func(c *llm.Config) { c.MaxAttempts = 1 })
			var deltas []string
			resp, err := c.Stream(context.Background(), simpleRequest, func(s string) { deltas = append(deltas, s) })
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if got := strings.Join(deltas, ""); got != tt.text {
				t.Errorf("onText got %q, want %q", got, tt.text)
			}
			for _, d := range deltas {
				if d == "" {
					t.Errorf("onText got an empty delta")
				}
			}
			if resp.Message.Role != llm.RoleAssistant {
				t.Errorf("role = %q, want assistant", resp.Message.Role)
			}
			if resp.Message.Content != tt.text {
				t.Errorf("content = %q, want %q", resp.Message.Content, tt.text)
			}
			checkCalls(t, resp.Message.ToolCalls, tt.calls)
			if resp.FinishReason != tt.finish {
				t.Errorf("finish = %q, want %q", resp.FinishReason, tt.finish)
			}
			if tt.usage != (llm.Usage{}) && resp.Usage != tt.usage {
				t.Errorf("usage = %+v, want %+v", resp.Usage, tt.usage)
			}
			if resp.Usage.PromptTokens == 0 && tt.turn.Body == "" {
				t.Errorf("usage = %+v, want non-zero", resp.Usage)
			}
			if resp.Reasoning != tt.reasoning {
				t.Errorf("reasoning = %q, want %q", resp.Reasoning, tt.reasoning)
			}
		})
	}
}

func checkCalls(t *testing.T, got, want []llm.ToolCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tool calls %+v, want %d", len(got), got, len(want))
	}
	seen := map[string]bool{}
	for i := range want {
		g, w := got[i], want[i]
		if w.ID == "synth" {
			if !synthID.MatchString(g.ID) {
				t.Errorf("call %d id = %q, want a synthesized call_<12 hex>", i, g.ID)
			}
		} else if g.ID != w.ID {
			t.Errorf("call %d id = %q, want %q", i, g.ID, w.ID)
		}
		if seen[g.ID] {
			t.Errorf("call %d id %q is not unique", i, g.ID)
		}
		seen[g.ID] = true
		if g.Name != w.Name || g.Arguments != w.Arguments {
			t.Errorf("call %d = %s(%.80s), want %s(%.80s)", i, g.Name, g.Arguments, w.Name, w.Arguments)
		}
	}
}

func TestStreamDeliversDeltasAsTheyArrive(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "one two three four", ChunkDelayMS: 5}}})
	c, _ := newClient(t, srv.URL(), nil)
	var deltas []string
	if _, err := c.Stream(context.Background(), simpleRequest, func(s string) { deltas = append(deltas, s) }); err != nil {
		t.Fatal(err)
	}
	if len(deltas) < 3 {
		t.Errorf("got %d deltas %q, want the text in several pieces", len(deltas), deltas)
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		turn      llmtest.Turn
		kind      llm.ErrorKind
		status    int
		retryable bool
		message   string // a substring of Error()
	}{
		{
			// #7: cut off (context overflow) with neither finish_reason nor [DONE].
			name: "7 cut off is truncation", turn: llmtest.Turn{Text: "partial answer", Quirks: []string{"cut_off"}},
			kind: llm.KindTruncated, retryable: true, message: "finish_reason",
		},
		{
			name: "7 [DONE] alone is no reply", turn: llmtest.Turn{Body: "data: [DONE]\n\n"},
			kind: llm.KindTruncated, retryable: true, message: "no choices",
		},
		{
			name: "disconnect mid-stream", turn: llmtest.Turn{Text: "a long answer that gets cut", Quirks: []string{"disconnect"}},
			kind: llm.KindTruncated, retryable: true, message: "truncated",
		},
		{
			name: "11 openrouter error object", turn: llmtest.Turn{Text: "some text first", Quirks: []string{"error_openrouter"}},
			kind: llm.KindStream, status: 502, retryable: true, message: "upstream",
		},
		{
			name: "11 vllm error object", turn: llmtest.Turn{Text: "some text first", Quirks: []string{"error_vllm"}},
			kind: llm.KindStream, status: 500, retryable: true, message: "scripted vllm error",
		},
		{
			name: "11 permanent error object", turn: llmtest.Turn{Body: `data: {"error":{"code":400,"message":"context length exceeded"}}` + "\n\n"},
			kind: llm.KindStream, status: 400, retryable: false, message: "context length exceeded",
		},
		{
			name: "11 uncoded transient error object", turn: llmtest.Turn{Body: `data: {"error":{"message":"Provider overloaded, try again"}}` + "\n\n"},
			kind: llm.KindStream, retryable: true, message: "overloaded",
		},
		{
			name: "11 error object with string code", turn: llmtest.Turn{Body: `data: {"error":{"code":"server_error","message":"boom"}}` + "\n\n"},
			kind: llm.KindStream, retryable: true, message: "boom",
		},
		{
			name: "13 jinja 500", turn: llmtest.Turn{Quirks: []string{"jinja_500"}},
			kind: llm.KindUnsupportedTools, status: 500, message: "the server rejected tools (500): llama.cpp needs --jinja",
		},
		{
			name: "13 ollama model without tools", turn: llmtest.Turn{Status: 400, Body: `{"error":{"message":"registry.ollama.ai/library/gemma:2b does not support tools"}}`},
			kind: llm.KindUnsupportedTools, status: 400, message: "may not support tool calling",
		},
		{
			name: "bad request not retried", turn: llmtest.Turn{Status: 400, Body: `{"error":{"message":"temperature must be at most 2"}}`},
			kind: llm.KindBadRequest, status: 400, message: "bad request (400): temperature must be at most 2",
		},
		{
			name: "context length not retried", turn: llmtest.Turn{Status: 400, Body: `{"error":{"message":"maximum context length is 8192 tokens"}}`},
			kind: llm.KindContextLength, status: 400, message: "the conversation is longer than the model's context window (400): maximum context length is 8192 tokens",
		},
		{
			name: "forbidden is auth", turn: llmtest.Turn{Status: 403, Body: "forbidden"},
			kind: llm.KindAuth, status: 403, message: "unauthorized (403): forbidden; check OPENAI_API_KEY",
		},
		{
			name: "malformed chunk", turn: llmtest.Turn{Body: "data: {\"choices\":[\n\n"},
			kind: llm.KindStream, retryable: true, message: "malformed chunk",
		},
		{
			name: "empty 200 body", turn: llmtest.Turn{Body: ": nothing\n\n", Headers: map[string]string{"Content-Type": "text/event-stream"}},
			kind: llm.KindTruncated, retryable: true, message: "finish_reason",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{tt.turn}})
			c, _ := newClient(t, srv.URL(), func(c *llm.Config) { c.MaxAttempts = 1 })
			_, err := c.Stream(context.Background(), simpleRequest, nil)
			var e *llm.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *llm.Error", err, err)
			}
			if e.Kind != tt.kind || e.Status != tt.status || e.Retryable != tt.retryable {
				t.Errorf("got kind %s status %d retryable %v, want %s %d %v", e.Kind, e.Status, e.Retryable, tt.kind, tt.status, tt.retryable)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not mention %q", err, tt.message)
			}
			if n := srv.RequestCount(); n != 1 {
				t.Errorf("server got %d requests, want 1", n)
			}
		})
	}
}

// Each retryable failure is retried and the next turn succeeds.
func TestStreamRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	failures := map[string]llmtest.Turn{
		"429":              {Status: 429},
		"503":              {Status: 503, Body: "upstream busy"},
		"truncated":        {Text: "partial answer", Quirks: []string{"cut_off"}},
		"disconnect":       {Text: "partial answer", Quirks: []string{"disconnect"}},
		"openrouter error": {Text: "par", Quirks: []string{"error_openrouter"}},
		"vllm error":       {Text: "par", Quirks: []string{"error_vllm"}},
	}
	for name, fail := range failures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{fail, {Text: "done"}}})
			var infos []llm.RetryInfo
			c, clock := newClient(t, srv.URL(), func(c *llm.Config) {
				c.OnRetry = func(ri llm.RetryInfo) { infos = append(infos, ri) }
			})
			resp, err := c.Stream(context.Background(), simpleRequest, nil)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if resp.Message.Content != "done" {
				t.Errorf("content = %q, want the retried turn's %q", resp.Message.Content, "done")
			}
			if srv.RequestCount() != 2 || len(infos) != 1 || len(clock.Delays()) != 1 {
				t.Fatalf("requests %d, retries %d, sleeps %d; want 2, 1, 1", srv.RequestCount(), len(infos), len(clock.Delays()))
			}
			ri := infos[0]
			if ri.Attempt != 1 || ri.MaxAttempts != 5 || ri.Err == nil || ri.Delay != clock.Delays()[0] {
				t.Errorf("retry info = %+v", ri)
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	began := time.Now()
	date := began.Add(20 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		headers  map[string]string
		min, max time.Duration
	}{
		// Rand is 0.5, so the first backoff is 375ms (half of 500ms fixed, a quarter random).
		{"no header uses backoff", nil, 375 * time.Millisecond, 375 * time.Millisecond},
		{"seconds", map[string]string{"Retry-After": "7"}, 7 * time.Second, 7 * time.Second},
		{"milliseconds", map[string]string{"Retry-After-Ms": "1500"}, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"http date", map[string]string{"Retry-After": date}, 19 * time.Second, 20 * time.Second}, // less the time since began
		{"above the cap is honoured", map[string]string{"Retry-After": "120"}, 120 * time.Second, 120 * time.Second},
		{"up to the call timeout", map[string]string{"Retry-After": "270"}, 270 * time.Second, 270 * time.Second},
		{"garbage is ignored", map[string]string{"Retry-After": "soon"}, 375 * time.Millisecond, 375 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
				{Status: 429, Headers: tt.headers, Body: `{"error":{"message":"slow down"}}`},
				{Text: "ok"},
			}})
			var status int
			c, clock := newClient(t, srv.URL(), func(c *llm.Config) {
				c.OnRetry = func(ri llm.RetryInfo) { status = ri.Status }
			})
			if _, err := c.Stream(context.Background(), simpleRequest, nil); err != nil {
				t.Fatal(err)
			}
			lo := tt.min
			if tt.headers["Retry-After"] == date {
				// The date was 20 s ahead (to the second) when the test
				// began; a loaded machine may have taken seconds since.
				lo -= time.Since(began)
			}
			d := clock.Delays()
			if len(d) != 1 || d[0] < lo || d[0] > tt.max {
				t.Errorf("slept %v, want one delay in [%v, %v]", d, lo, tt.max)
			}
			if status != 429 {
				t.Errorf("retry status = %d, want 429", status)
			}
		})
	}
}

func TestSteady500StopsAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Status: 500, Body: "internal error"}}})
	var attempts []int
	c, clock := newClient(t, srv.URL(), func(c *llm.Config) {
		c.OnRetry = func(ri llm.RetryInfo) { attempts = append(attempts, ri.Attempt) }
	})
	_, err := c.Stream(context.Background(), simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindServer || e.Attempts != 5 {
		t.Fatalf("err = %#v, want a server *Error after 5 attempts", err)
	}
	if got := srv.RequestCount(); got != 5 {
		t.Errorf("server got %d requests, want exactly 5", got)
	}
	if want := "model provider: server error (500): internal error (after 5 attempts)"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if len(attempts) != 4 || attempts[0] != 1 || attempts[3] != 4 {
		t.Errorf("OnRetry attempts = %v, want [1 2 3 4]", attempts)
	}
	// Exponential: each delay doubles (Rand is fixed), within the cap.
	d := clock.Delays()
	for i := 1; i < len(d); i++ {
		if d[i] != 2*d[i-1] {
			t.Errorf("delays %v do not double", d)
		}
	}
}

func TestUnauthorizedFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{Status: 401, Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`},
	}})
	c, clock := newClient(t, srv.URL(), func(c *llm.Config) { c.APIKey = "sk-wrong" })
	_, err := c.Stream(context.Background(), simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindAuth || e.Retryable {
		t.Fatalf("err = %v, want a non-retryable auth *Error", err)
	}
	if want := "model provider: unauthorized (401): Incorrect API key provided; check OPENAI_API_KEY"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if srv.RequestCount() != 1 || len(clock.Delays()) != 0 {
		t.Errorf("requests %d, sleeps %d; want 1 and 0", srv.RequestCount(), len(clock.Delays()))
	}
}

// A 404 (a wrong base URL, or a model the server does not have) and a 400
// saying the model does not exist fail at once, pointing at --model and
// --base-url rather than saying "bad request".
func TestModelNotFoundFailsAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		turn llmtest.Turn
		want string
	}{
		{"openai 404", llmtest.Turn{Status: 404, Body: `{"error":{"message":"The model ` + "`gpt-9`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}`},
			"model provider: not found (404): The model `gpt-9` does not exist or you do not have access to it.; no such model or endpoint at this base URL? check --model and --base-url"},
		{"bare 404", llmtest.Turn{Status: 404, Body: `404 page not found`},
			"model provider: not found (404): 404 page not found; no such model or endpoint at this base URL? check --model and --base-url"},
		{"ollama 404", llmtest.Turn{Status: 404, Body: `{"error":"model \"llama9\" not found, try pulling it first"}`},
			`model provider: not found (404): model "llama9" not found, try pulling it first; no such model or endpoint at this base URL? check --model and --base-url`},
		{"400 model_not_found", llmtest.Turn{Status: 400, Body: `{"error":{"message":"Invalid model: gpt-9","code":"model_not_found"}}`},
			"model provider: not found (400): Invalid model: gpt-9; no such model or endpoint at this base URL? check --model and --base-url"},
		{"vllm 400", llmtest.Turn{Status: 400, Body: `{"object":"error","message":"The model ` + "`qwen`" + ` does not exist.","type":"NotFoundError","code":404}`},
			"model provider: not found (400): The model `qwen` does not exist.; no such model or endpoint at this base URL? check --model and --base-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{tt.turn}})
			c, clock := newClient(t, srv.URL(), nil)
			_, err := c.Stream(context.Background(), simpleRequest, nil)
			var e *llm.Error
			if !errors.As(err, &e) || e.Kind != llm.KindNotFound || e.Retryable {
				t.Fatalf("err = %v, want a non-retryable not-found *Error", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q\nwant    %q", err, tt.want)
			}
			if srv.RequestCount() != 1 || len(clock.Delays()) != 0 {
				t.Errorf("requests %d, sleeps %d; want 1 and 0", srv.RequestCount(), len(clock.Delays()))
			}
		})
	}
}

func TestConnectionRefusedIsRetriedThenReported(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/v1"
	ln.Close() // nothing listens there now

	c, clock := newClient(t, url, func(c *llm.Config) { c.MaxAttempts = 3 })
	_, err = c.Stream(context.Background(), simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindConnection || e.Attempts != 3 {
		t.Fatalf("err = %v, want a connection *Error after 3 attempts", err)
	}
	if want := "model provider unreachable at " + url + ": connection refused (after 3 attempts)"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if len(clock.Delays()) != 2 {
		t.Errorf("slept %d times, want 2", len(clock.Delays()))
	}
}

func TestCancellation(t *testing.T) {
	t.Parallel()

	t.Run("mid-stream", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "hello world, this hangs", Hang: true}}})
		c, clock := newClient(t, srv.URL(), nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := c.Stream(ctx, simpleRequest, func(string) { cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if srv.RequestCount() != 1 || len(clock.Delays()) != 0 {
			t.Errorf("requests %d, sleeps %d; want 1 and 0", srv.RequestCount(), len(clock.Delays()))
		}
	})

	t.Run("deadline before the response", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "late", DelayMS: 5000}}})
		c, _ := newClient(t, srv.URL(), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Stream(ctx, simpleRequest, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("during the retry wait", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Status: 503}}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c, err := llm.New(llm.Config{BaseURL: srv.URL(), OnRetry: func(llm.RetryInfo) { cancel() }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Stream(ctx, simpleRequest, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if srv.RequestCount() != 1 {
			t.Errorf("server got %d requests, want 1", srv.RequestCount())
		}
	})
}

func TestRequestOnTheWire(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "a"}, {Text: "b"}, {Text: "c"}}})
	req := llm.Request{
		Model: "m1",
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "be brief"},
			{Role: llm.RoleUser, Content: "list files"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "ls", Arguments: `{"dir":"."}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Content: ""},
		},
		Tools: []llm.Tool{{Name: "ls", Description: "list"}},
	}

	withKey, _ := newClient(t, srv.URL(), func(c *llm.Config) { c.APIKey = "sk-test"; c.UserAgent = "agent/test" })
	if _, err := withKey.Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	noKey, _ := newClient(t, srv.URL()+"/", nil) // a trailing slash is fine
	if _, err := noKey.Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := noKey.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "c" || resp.FinishReason != "stop" || resp.Usage.CompletionTokens == 0 {
		t.Errorf("complete = %+v", resp)
	}

	reqs := srv.Requests()
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("authorization = %q", got)
	}
	if got := reqs[0].Header.Get("User-Agent"); got != "agent/test" {
		t.Errorf("user agent = %q", got)
	}
	if got, ok := reqs[1].Header["Authorization"]; ok {
		t.Errorf("authorization sent without a key: %q", got)
	}

	var body struct {
		Model         string                       `json:"model"`
		Stream        *bool                        `json:"stream"`
		StreamOptions map[string]bool              `json:"stream_options"`
		Messages      []map[string]json.RawMessage `json:"messages"`
		Tools         []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := reqs[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "m1" || body.Stream == nil || !*body.Stream || !body.StreamOptions["include_usage"] {
		t.Errorf("model %q stream %v options %v", body.Model, body.Stream, body.StreamOptions)
	}
	if len(body.Tools) != 1 || body.Tools[0].Type != "function" || body.Tools[0].Function.Name != "ls" ||
		string(body.Tools[0].Function.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("tools = %+v", body.Tools)
	}
	// A tool result keeps its content field even when empty.
	if got := string(body.Messages[3]["content"]); got != `""` {
		t.Errorf("tool message content = %s, want \"\"", got)
	}
	msgs := reqs[0].Messages()
	if len(msgs) != 4 || msgs[2].ToolCalls[0] != (llmtest.ToolCall{ID: "call_1", Name: "ls", Arguments: `{"dir":"."}`}) || msgs[3].ToolCallID != "call_1" {
		t.Errorf("messages = %+v", msgs)
	}

	// #14: the non-streaming call says "stream": false explicitly.
	var raw map[string]json.RawMessage
	if err := reqs[2].Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["stream"]) != "false" {
		t.Errorf(`complete sent "stream": %s, want false`, raw["stream"])
	}
	if _, ok := raw["stream_options"]; ok {
		t.Errorf("complete sent stream_options")
	}
}

func TestCompleteParsesToolCalls(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{ToolCalls: twoCalls, Reasoning: "think", Quirks: []string{"reasoning_field"}}}})
	c, _ := newClient(t, srv.URL(), nil)
	resp, err := c.Complete(context.Background(), simpleRequest)
	if err != nil {
		t.Fatal(err)
	}
	checkCalls(t, resp.Message.ToolCalls, wantTwo)
	if resp.FinishReason != "tool_calls" || resp.Reasoning != "think" {
		t.Errorf("finish %q reasoning %q", resp.FinishReason, resp.Reasoning)
	}
}

// #16 in a whole response: thinking parts stay out of the answer.
func TestCompleteContentParts(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "391", Reasoning: "17 * 23", Quirks: []string{"content_parts"}}}})
	c, _ := newClient(t, srv.URL(), nil)
	resp, err := c.Complete(context.Background(), simpleRequest)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "391" || resp.Reasoning != "17 * 23" || resp.FinishReason != "stop" {
		t.Errorf("content %q reasoning %q finish %q", resp.Message.Content, resp.Reasoning, resp.FinishReason)
	}
}

// A server that ignores stream: true and answers with one JSON body.
func TestStreamAcceptsJSONBody(t *testing.T) {
	t.Parallel()
	body := `{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Body: body}}})
	c, _ := newClient(t, srv.URL(), nil)
	var got string
	resp, err := c.Stream(context.Background(), simpleRequest, func(s string) { got += s })
	if err != nil {
		t.Fatal(err)
	}
	if got != "whole" || resp.Message.Content != "whole" || resp.Usage.PromptTokens != 2 {
		t.Errorf("onText %q, response %+v", got, resp)
	}
}

func TestNewValidatesBaseURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8080", "ftp://example.com/v1", "http://", "::bad"} {
		if _, err := llm.New(llm.Config{BaseURL: u}); err == nil {
			t.Errorf("New(%q) succeeded, want an error", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080/v1", "https://api.openai.com/v1/"} {
		if _, err := llm.New(llm.Config{BaseURL: u}); err != nil {
			t.Errorf("New(%q): %v", u, err)
		}
	}
}

// The idle timeout is generous: the fresh reply must not stall on a
// loaded machine.
func TestIdleStreamIsRetried(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]llmtest.Turn{
		"silent before the headers":        {DelayMS: 600_000, Text: "late"},
		"silent in the middle of a stream": {Hang: true, Text: "stalls"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{first, {Text: "fresh"}}})
			var retries []llm.RetryInfo
			c, _ := newClient(t, srv.URL(), func(cfg *llm.Config) {
				cfg.IdleTimeout = 3 * time.Second
				cfg.OnRetry = func(ri llm.RetryInfo) { retries = append(retries, ri) }
			})
			resp, err := c.Stream(context.Background(), llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil)
			if err != nil {
				t.Fatalf("Stream after an idle attempt: %v", err)
			}
			if resp.Message.Content != "fresh" {
				t.Errorf("content = %q, want the second turn's", resp.Message.Content)
			}
			var e *llm.Error
			if len(retries) != 1 || !errors.As(retries[0].Err, &e) || e.Kind != llm.KindTruncated || !strings.Contains(e.Error(), "no data from the model") {
				t.Errorf("retries = %+v, want one truncated 'no data' retry", retries)
			}
		})
	}
}

// A refusal as too long is not retried, and says the window when the
// server states it: every wording llmtest reproduces but Ollama's.
func TestContextWindowFromTheRefusal(t *testing.T) {
	t.Parallel()
	for _, name := range llmtest.ContextErrors() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{ContextWindow: 50, ContextError: name, Turns: []llmtest.Turn{{Text: "never"}}})
			c, clock := newClient(t, srv.URL(), nil)
			_, err := c.Stream(context.Background(), simpleRequest, nil)
			want := 50
			if name == "ollama" {
				want = 0 // it states only the excess
			}
			if !llm.IsContextLength(err) || llm.ContextWindowOf(err) != want {
				t.Errorf("err = %v: window %d, want a context-length error stating %d", err, llm.ContextWindowOf(err), want)
			}
			if srv.RequestCount() != 1 || len(clock.Delays()) != 0 {
				t.Errorf("%d requests, waits %v: a refusal as too long was retried", srv.RequestCount(), clock.Delays())
			}
		})
	}
	if w := llm.ContextWindowOf(errors.New("maximum context length is 8192 tokens")); w != 0 {
		t.Errorf("a plain error gave window %d", w)
	}
}
