package llm

import (
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
		{"retry-after bounded", 0, 1, time.Hour, 5 * time.Minute},
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
		{"Retry-After", "1e300", 5 * time.Minute},
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
		{404, `{"detail":"Not Found"}`, KindBadRequest, false, "model provider: bad request (404): Not Found"},
		{422, `{"detail":[{"msg":"field required"}]}`, KindBadRequest, false, `model provider: bad request (422): [{"msg":"field required"}]`},
		{400, `{"error":"model not found"}`, KindBadRequest, false, "model provider: bad request (400): model not found"},
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
