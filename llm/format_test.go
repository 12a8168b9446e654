package llm

import (
	"encoding/json"
	"testing"
)

// The endpoints sent response_format by default, and config.toml's word
// over them.
func TestSendsResponseFormat(t *testing.T) {
	t.Parallel()
	on, off := true, false
	for _, tc := range []struct {
		url  string
		conf *bool
		want bool
	}{
		{"https://api.openai.com/v1", nil, true},
		{"https://my-team.openai.azure.com/openai/v1", nil, true},
		{"https://openrouter.ai/api/v1", nil, true},
		{"http://127.0.0.1:11434/v1", nil, false}, // Ollama, llama.cpp, vLLM: a grammar over the whole reply
		{"https://api.groq.com/openai/v1", nil, false},
		{"https://evil.example/api.openai.com", nil, false},
		{"http://127.0.0.1:8080/v1", &on, true},
		{"https://api.openai.com/v1", &off, false},
	} {
		if got := SendsResponseFormat(tc.url, tc.conf); got != tc.want {
			t.Errorf("SendsResponseFormat(%s, %v) = %t, want %t", tc.url, tc.conf, got, tc.want)
		}
	}
}

func TestEncodeResponseFormat(t *testing.T) {
	t.Parallel()
	req := Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi"}},
		ResponseFormat: &ResponseFormat{Name: "output", Schema: json.RawMessage(`{"type":"object"}`), Strict: true}}
	data, err := encodeRequest(req, true)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		ResponseFormat json.RawMessage `json:"response_format"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"json_schema","json_schema":{"name":"output","schema":{"type":"object"},"strict":true}}`; string(body.ResponseFormat) != want {
		t.Errorf("response_format = %s, want %s", body.ResponseFormat, want)
	}
	if RefusedFormat(&Error{Kind: KindServer, Status: 500}) || !RefusedFormat(statusError(400, []byte(`{"error":{"message":"Cannot use custom grammar constraints with tools."}}`), 0)) {
		t.Error("RefusedFormat: a 500 is no refusal; a 400 may be")
	}
}
