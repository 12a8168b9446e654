package llm

import "strings"

// knownWindows are the context windows, in tokens, of models served under
// these names (a prefix, longest first matters: the table is read in
// order). A model not here has no known window: compaction then happens
// only when the provider refuses a request as too long.
var knownWindows = []struct {
	prefix string
	tokens int
}{
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4", 8_192},
	{"gpt-5", 400_000},
	{"gpt-3.5-turbo", 16_385},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4", 200_000},
	{"claude", 200_000},
	{"gemini", 1_048_576},
	{"deepseek", 128_000},
	{"llama3", 8_192},
	{"llama-3", 8_192},
	{"mistral", 32_768},
	{"qwen2.5", 32_768},
}

// KnownContextWindow is the context window of model, or 0 when unknown.
// A provider prefix ("openai/gpt-4o") is ignored.
func KnownContextWindow(model string) int {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	model = strings.ToLower(model)
	for _, w := range knownWindows {
		if strings.HasPrefix(model, w.prefix) {
			return w.tokens
		}
	}
	return 0
}
