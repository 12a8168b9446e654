package llm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzFixtures are SSE streams captured from real providers; the repo is
// checked out with ../shared beside it.
const fuzzFixtures = "../../shared/fixtures/providers"

// fuzzLimits are small, so that mutated inputs reach the limits too.
var fuzzLimits = limits{line: 4 << 10, response: 16 << 10}

// FuzzReadStream feeds arbitrary bytes to the SSE reader: it must never
// panic, must return either a response or an error (never both, never
// neither), and a response must be whole: the deltas given to onText
// make up its content, and every tool call has an id.
func FuzzReadStream(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join(fuzzFixtures, "*.sse"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no captured streams in %s (%v): the repo needs ../shared beside it", fuzzFixtures, err)
	}
	seeded := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) > 8<<10 {
			continue // small seeds keep the fuzzer fast
		}
		f.Add(data)
		seeded++
	}
	if seeded < 5 {
		f.Fatalf("only %d small fixtures in %s", seeded, fuzzFixtures)
	}
	f.Add([]byte(": keep-alive\n\n: OPENROUTER PROCESSING\n\n\n\n"))
	f.Add([]byte(": keep-alive\r\n\r\n" + `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: " + strings.Repeat("x", fuzzLimits.line+1)))
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("long ", fuzzLimits.line/5) + `"}}]}` + "\n"))
	f.Add([]byte(`data: {"error":{"code":502,"message":"upstream"}}` + "\n\n"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		var deltas strings.Builder
		resp, err := readStream(strings.NewReader(string(data)), func(s string) { deltas.WriteString(s) }, func() {}, fuzzLimits)
		switch {
		case resp != nil && err != nil:
			t.Fatalf("both a response and an error: %+v, %v", resp, err)
		case resp == nil && err == nil:
			t.Fatal("neither a response nor an error")
		case err != nil:
			return
		}
		if resp.Message.Content != deltas.String() {
			t.Errorf("content %q, deltas %q", resp.Message.Content, deltas.String())
		}
		if resp.FinishReason == "" || resp.Message.Role != RoleAssistant {
			t.Errorf("finish %q, role %q", resp.FinishReason, resp.Message.Role)
		}
		for _, tc := range resp.Message.ToolCalls {
			if tc.ID == "" {
				t.Errorf("tool call without an id: %+v", tc)
			}
		}
	})
}
