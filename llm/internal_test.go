package llm

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		rand       float64
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"first, no jitter", 0, 1, 0, 250 * time.Millisecond},
		{"first, full jitter", 0.999999, 1, 0, 500 * time.Millisecond},
		{"grows exponentially", 0, 3, 0, time.Second},
		{"capped", 0, 10, 0, 15 * time.Second},
		{"capped with jitter", 0.999999, 10, 0, 30 * time.Second},
		{"huge attempt does not overflow", 0, 200, 0, 15 * time.Second},
		{"retry-after wins when longer", 0, 1, 3 * time.Second, 3 * time.Second},
		{"backoff wins when longer", 0, 8, 3 * time.Second, 15 * time.Second},
		{"retry-after above the cap", 0, 1, 2 * time.Minute, 2 * time.Minute},
		// The call's CallTimeout, not backoff, decides whether to wait this long.
		{"retry-after not capped", 0, 1, time.Hour, time.Hour},
	}
	for _, tt := range tests {
		c, err := New(Config{BaseURL: "http://x/v1", Rand: func() float64 { return tt.rand }})
		if err != nil {
			t.Fatal(err)
		}
		got := c.backoff(tt.attempt, tt.retryAfter)
		if diff := got - tt.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("%s: backoff = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		header, value string
		want          time.Duration
	}{
		{"Retry-After", "3", 3 * time.Second},
		{"Retry-After", "1.5", 1500 * time.Millisecond},
		{"Retry-After", "0", 0},
		{"Retry-After", "-4", 0},
		{"Retry-After", "NaN", 0},
		{"Retry-After", "3600", time.Hour},
		{"Retry-After", "1e300", 24 * time.Hour},
		{"Retry-After", now.Add(42 * time.Second).Format(http.TimeFormat), 42 * time.Second},
		{"Retry-After", now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"Retry-After", "tomorrow", 0},
		{"Retry-After-Ms", "250", 250 * time.Millisecond},
	}
	for _, tt := range tests {
		h := http.Header{}
		h.Set(tt.header, tt.value)
		if got := parseRetryAfter(h, now); got != tt.want {
			t.Errorf("%s: %s = %v, want %v", tt.header, tt.value, got, tt.want)
		}
	}
}

func TestStatusErrorClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status    int
		body      string
		kind      ErrorKind
		retryable bool
		text      string
	}{
		{401, `{"error":{"message":"bad key"}}`, KindAuth, false, "model provider: unauthorized (401): bad key; check OPENAI_API_KEY"},
		{403, ``, KindAuth, false, "model provider: unauthorized (403): check OPENAI_API_KEY"},
		{429, `{"error":{"message":"Rate limit reached"}}`, KindRateLimit, true, "model provider: rate limited (429): Rate limit reached"},
		{500, `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`, KindUnsupportedTools, false,
			"model provider: the server rejected tools (500): llama.cpp needs --jinja (server said: tools param requires --jinja flag)"},
		{502, "<html>\n<body>Bad Gateway</body>\n</html>", KindServer, true, "model provider: server error (502): <html> <body>Bad Gateway</body> </html>"},
		{408, ``, KindServer, true, "model provider: server error (408)"},
		{404, `{"detail":"Not Found"}`, KindNotFound, false, "model provider: not found (404): Not Found; no such model or endpoint at this base URL? check --model and --base-url"},
		{404, ``, KindNotFound, false, "model provider: not found (404): no such model or endpoint at this base URL? check --model and --base-url"},
		{422, `{"detail":[{"msg":"field required"}]}`, KindBadRequest, false, `model provider: bad request (422): [{"msg":"field required"}]`},
		{400, `{"error":"model not found"}`, KindNotFound, false, "model provider: not found (400): model not found; no such model or endpoint at this base URL? check --model and --base-url"},
		{400, `{"error":{"message":"The model does not exist","code":"model_not_found"}}`, KindNotFound, false,
			"model provider: not found (400): The model does not exist; no such model or endpoint at this base URL? check --model and --base-url"},
		{400, `{"error":{"message":"messages: field required"}}`, KindBadRequest, false, "model provider: bad request (400): messages: field required"},
		{400, `{"object":"error","message":"too long","code":400}`, KindBadRequest, false, "model provider: bad request (400): too long"},
	}
	for _, tt := range tests {
		e := statusError(tt.status, []byte(tt.body), 0)
		if e.Kind != tt.kind || e.Retryable != tt.retryable || e.Error() != tt.text {
			t.Errorf("%d %s:\ngot  %s %v %q\nwant %s %v %q", tt.status, tt.body, e.Kind, e.Retryable, e.Error(), tt.kind, tt.retryable, tt.text)
		}
	}
	long := statusError(500, []byte(strings.Repeat("é", 1000)), 0).Error()
	if len(long) > 400 || !strings.HasSuffix(long, "…") {
		t.Errorf("long body not clipped: %d bytes", len(long))
	}
}

// Index-less deltas: fragments go to the current call, a new id or name
// starts the next one, and a repeated name or id does not.
func TestToolDeltaWithoutIndex(t *testing.T) {
	t.Parallel()
	d := func(id, name, args string) openai.ToolCall {
		return openai.ToolCall{ID: id, Function: openai.FunctionCall{Name: name, Arguments: args}}
	}
	var a assembler
	for _, tc := range []openai.ToolCall{
		d("", "read", `{"p":`), // no id at all yet
		d("", "", `1}`),
		d("", "write", `{}`),    // a new name starts a call
		d("id_w", "write", ``),  // the same name again with a first id: same call
		d("id_w", "", ``),       // repeated id: same call
		d("id_x", "write", `{`), // a different id: a new call of the same tool
		d("", "", `}`),
	} {
		a.toolDelta(tc)
	}
	a.finish = "stop"
	resp, err := a.response()
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Message.ToolCalls
	if len(got) != 3 || got[0].Name != "read" || got[0].Arguments != `{"p":1}` ||
		got[1].ID != "id_w" || got[1].Arguments != `{}` || got[2].ID != "id_x" || got[2].Arguments != `{}` {
		t.Errorf("calls = %+v", got)
	}
	if !strings.HasPrefix(got[0].ID, "call_") || resp.FinishReason != "tool_calls" {
		t.Errorf("id %q finish %q", got[0].ID, resp.FinishReason)
	}
}

// Only a data chunk carrying part of the reply is progress for the idle
// watchdog: comments, blank lines, other SSE fields, a role-only or empty
// chunk and [DONE] are not.
func TestStreamProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line     string
		progress bool
	}{
		{": OPENROUTER PROCESSING\n", false},
		{": keep-alive\r\n", false},
		{"\n", false},
		{"\r\n", false},
		{"event: message\n", false},
		{"id: 7\n", false},
		{"retry: 1000\n", false},
		{"data:\n", false},
		{"data: {}\n", false},
		{`data: {"choices":[]}` + "\n", false},
		{`data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n", false},
		{`data: {"choices":[{"index":0,"delta":{"content":""}}]}` + "\n", false},
		{`data: {"choices":[{"index":1,"delta":{"content":"other choice"}}]}` + "\n", false},
		{`data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n", true},
		{`data: {"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}` + "\n", true},
		{`data: {"choices":[{"index":0,"delta":{"reasoning":"hmm"}}]}` + "\n", true},
		{`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}` + "\n", true},
		{`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}` + "\n", true},
		{`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n", true},
		{"data: [DONE]\n", false},
	}
	for _, tt := range tests {
		var a assembler
		_, progressed, err := a.line([]byte(tt.line), nil)
		if err != nil || progressed != tt.progress {
			t.Errorf("%q: progress %v, err %v; want %v", tt.line, progressed, err, tt.progress)
		}
	}

	// And readStream reports it: once per chunk with something in it.
	stream := ": OPENROUTER PROCESSING\n\n" +
		`data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n" +
		": OPENROUTER PROCESSING\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}` + "\n\n" +
		"data: [DONE]\n\n"
	n := 0
	resp, err := readStream(strings.NewReader(stream), nil, func() { n++ }, defaultLimits)
	if err != nil || resp.Message.Content != "ab" || n != 2 {
		t.Errorf("readStream: %+v, %v, progress %d times; want ab, 2", resp, err, n)
	}
}

// endless is a reader of 'a', counting what it gave. It is endless to a
// bounded reader: it stops at 64 MiB only so that an unbounded one fails
// the test rather than exhaust memory.
type endless struct{ n int }

func (r *endless) Read(p []byte) (int, error) {
	if r.n >= 64<<20 {
		return 0, io.EOF
	}
	p = p[:min(len(p), 64<<20-r.n)]
	for i := range p {
		p[i] = 'a'
	}
	r.n += len(p)
	return len(p), nil
}

// An endless line is refused once it passes the line limit, having read
// little more than the limit; a long line under the limit is fine. Not
// parallel: reading 16 MiB would slow the timing tests.
func TestReadStreamBoundsLines(t *testing.T) {
	r := &endless{}
	_, err := readStream(io.MultiReader(strings.NewReader("data: "), r), nil, nil, defaultLimits)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindStream || e.Retryable || e.Message != "model response line of more than 16 MiB refused" {
		t.Fatalf("err = %v, want the line refused", err)
	}
	if r.n > defaultLimits.line+128<<10 {
		t.Errorf("read %d bytes of the line, want little more than the %d limit", r.n, defaultLimits.line)
	}

	lim := limits{line: 1 << 10, response: 1 << 20}
	ok := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 900) + `"},"finish_reason":"stop"}]}` + "\n"
	if resp, err := readStream(strings.NewReader(ok), nil, nil, lim); err != nil || len(resp.Message.Content) != 900 {
		t.Errorf("a line under the limit: %v", err)
	}
	long := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 1100) + `"}}]}` + "\n"
	_, err = readStream(strings.NewReader(long), nil, nil, lim)
	if err == nil || err.Error() != "model provider: error in stream: model response line of more than 1 KiB refused" {
		t.Errorf("a line over the limit: %v", err)
	}
}

// The reply as a whole is bounded too, however it is cut into lines.
func TestReadStreamBoundsTheResponse(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for range 10 {
		b.WriteString(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` + strings.Repeat("y", 600) + `"}}]}}]}` + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	_, err := readStream(strings.NewReader(b.String()), nil, nil, limits{line: 1 << 10, response: 4 << 10})
	var e *Error
	if !errors.As(err, &e) || e.Retryable || e.Message != "model response of more than 4 KiB refused" {
		t.Errorf("err = %v, want the response refused", err)
	}
	if _, err := readStream(strings.NewReader(b.String()), nil, nil, limits{line: 1 << 10, response: 8 << 10}); err != nil {
		t.Errorf("under the limit: %v", err)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	c, err := New(Config{BaseURL: "http://x/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.IdleTimeout != 2*time.Minute || c.cfg.CallTimeout != 5*time.Minute || c.cfg.MaxStalls != 2 {
		t.Errorf("idle %v, call %v, stalls %d; want 2m, 5m and 2", c.cfg.IdleTimeout, c.cfg.CallTimeout, c.cfg.MaxStalls)
	}
}

// Every real server's wording of a prompt past the context window is
// recognised (llmtest's contextErrors carry the same texts), and the
// window read when it is stated.
func TestContextLengthErrors(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		window     int
	}{
		{"openai", `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, 8192},
		{"vllm", `{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9100 tokens","type":"BadRequestError","code":400}`, 8192},
		{"llamacpp", `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9100,"n_ctx":8192}}`, 8192},
		{"llamacpp without n_ctx", `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`, 0},
		{"ollama", `{"error":{"message":"prompt too long; exceeded max context length by 908 tokens","type":"api_error"}}`, 0},
		{"openrouter", `{"error":{"message":"This endpoint's maximum context length is 8192 tokens. However, you requested about 9100 tokens","code":400}}`, 8192},
		{"anthropic", `{"error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, 200000},
		{"lm studio", `{"error":"Trying to keep the first 9100 tokens when context the overflows. However, the model is loaded with context length of only 8192 tokens, which is not enough."}`, 8192},
	} {
		err := statusError(400, []byte(tt.body), 0)
		if !IsContextLength(err) {
			t.Errorf("%s: %v is not a context-length error", tt.name, err)
		}
		if got := ContextWindowOf(err); got != tt.window {
			t.Errorf("%s: window %d, want %d", tt.name, got, tt.window)
		}
	}
	if IsContextLength(statusError(400, []byte(`{"error":{"message":"temperature must be at most 2"}}`), 0)) {
		t.Error("a plain bad request reads as a context-length error")
	}
}
