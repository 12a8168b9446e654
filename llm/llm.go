// Package llm is a provider-neutral client for OpenAI-compatible Chat
// Completions endpoints. It is the only package that imports go-openai.
package llm

import (
	"context"
	"encoding/json"
)

// Role of a conversation message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one conversation message.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"` // set on RoleTool messages
	// Images are sent as image parts (Image); only to a model that sees
	// them: the caller gives any other one a line of text instead.
	Images []Image `json:"images,omitempty"`
}

// Image is an image a message gives the model, sent as an image_url part
// with a data: URL. About names it for the model ("photo.png: PNG image,
// 640×480, 12 KB") and goes before it as text. A cassette keeps SHA256 in
// place of Data, so a replay compares images without their bytes.
type Image struct {
	SHA256    string `json:"sha256"`
	MediaType string `json:"media_type"`
	About     string `json:"about"`
	Data      []byte `json:"data,omitempty"`
}

// ToolCall is a complete tool call. Arguments is the raw JSON text the
// model produced; it may be invalid and is never parsed here.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool describes a function the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is one chat completion request.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
	// ResponseFormat, if set, asks for a final answer in JSON valid
	// against a schema (response_format json_schema).
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
}

// Usage counts tokens of one response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Response is a fully assembled assistant reply.
//
// FinishReason is "tool_calls" whenever Message.ToolCalls is non-empty,
// whatever the server said, except "length", which is kept because the
// arguments may then be cut short. Every tool call has a non-empty ID
// (synthesized when the server sent none). Usage is the last usage the
// server reported, zero if it reported none. Reasoning collects the
// reasoning_content / reasoning deltas and "thinking" content parts.
type Response struct {
	Message      Message `json:"message"` // Role is always RoleAssistant
	FinishReason string  `json:"finish_reason"`
	Usage        Usage   `json:"usage"`
	Reasoning    string  `json:"reasoning,omitempty"`
}

// Model answers chat requests, streaming assistant text to onText as it
// arrives. onText may be nil. *Client, the recorder and the replayer
// implement it.
type Model interface {
	Stream(ctx context.Context, req Request, onText func(string)) (*Response, error)
}
