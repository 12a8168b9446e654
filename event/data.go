package event

import "encoding/json"

// Usage counts tokens as the provider reported them.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + o.PromptTokens, CompletionTokens: u.CompletionTokens + o.CompletionTokens}
}

// RunStartedData opens a run.
type RunStartedData struct {
	Prompt        string   `json:"prompt,omitempty"`
	Model         string   `json:"model,omitempty"`
	Workspace     string   `json:"workspace,omitempty"`
	Tools         []string `json:"tools,omitempty"`
	Resumed       bool     `json:"resumed,omitempty"`
	Until         string   `json:"until,omitempty"`
	MaxIterations int      `json:"max_iterations,omitempty"`
}

// RunFinishedData is the data of the last event of a run.
type RunFinishedData struct {
	Status     string `json:"status"`
	Result     string `json:"result"`
	Turns      int    `json:"turns"`
	Usage      Usage  `json:"usage"`
	DurationMS int64  `json:"duration_ms"`
	ExitCode   int    `json:"exit_code"`
	Reason     string `json:"reason,omitempty"`
}

// MessageDeltaData is a fragment of streamed assistant text.
type MessageDeltaData struct {
	Text string `json:"text"`
}

// ToolCall is a tool call as the model asked for it.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// MessageData is a whole conversation message. Role is "user" or
// "assistant"; tool results travel as tool.completed. Persisting these
// events is enough to rebuild the conversation.
type MessageData struct {
	Role      string     `json:"role"`
	Text      string     `json:"text"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Usage     *Usage     `json:"usage,omitempty"`
	Iteration int        `json:"iteration,omitempty"`
}

// ToolStartedData is emitted, and persisted, before a tool runs.
type ToolStartedData struct {
	CallID string          `json:"call_id"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args"`
}

// ToolCompletedData carries the result exactly as the model will see it.
type ToolCompletedData struct {
	CallID    string `json:"call_id"`
	Name      string `json:"name,omitempty"`
	OK        bool   `json:"ok"`
	Output    string `json:"output"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ArtifactData describes a file a tool wrote.
type ArtifactData struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ReceiptData proves a side effect happened.
type ReceiptData struct {
	Type    string          `json:"type"`
	Key     string          `json:"key"`
	Details json.RawMessage `json:"details,omitempty"`
}

// IterationData marks a Ralph loop iteration.
type IterationData struct {
	Iteration     int    `json:"iteration"`
	MaxIterations int    `json:"max_iterations"`
	Promise       string `json:"promise,omitempty"`
	Completed     bool   `json:"completed,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

// RetryData reports a model call that will be retried.
type RetryData struct {
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	DelayMS     int64  `json:"delay_ms"`
	Error       string `json:"error"`
	Status      int    `json:"status,omitempty"`
}

// WarningData is a diagnostic worth showing to a person.
type WarningData struct {
	Message string `json:"message"`
}
