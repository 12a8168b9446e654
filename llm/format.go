package llm

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
)

// ResponseFormat asks the provider to make the final answer JSON valid
// against Schema (OpenAI's response_format json_schema): Name names it
// (^[a-zA-Z0-9_-]{1,64}$), Strict asks for exact adherence, which OpenAI
// accepts only for schemas whose objects are all closed and fully
// required.
type ResponseFormat struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict,omitempty"`
}

// formatHosts are the endpoints that take response_format json_schema in
// a streamed request that also offers tools, and still call the tools
// (docs/PROTOCOL.md#structured-output-and-providers). Others are not sent
// it: servers that turn it into a grammar constrain the whole reply and
// then refuse tools or never call them (llama.cpp answers 400 "Cannot use
// custom grammar constraints with tools"), and some refuse it when
// streaming or for most models; config.toml's structured_outputs says
// otherwise for an endpoint known to cope.
var formatHosts = []string{"api.openai.com", ".openai.azure.com", "openrouter.ai", "api.mistral.ai", "api.x.ai"}

// SendsResponseFormat reports whether a request to baseURL carries a
// run's output schema as response_format: as configured (on), or by the
// endpoint when not configured (nil).
func SendsResponseFormat(baseURL string, on *bool) bool {
	if on != nil {
		return *on
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	for _, h := range formatHosts {
		if host == h || strings.HasPrefix(h, ".") && strings.HasSuffix(host, h) {
			return true
		}
	}
	return false
}

// RefusedFormat reports whether err may be a provider refusing a
// request's response_format: a bad request (400), whatever its words,
// since servers say it in their own ("This model does not support
// response format json_schema", "Cannot use custom grammar constraints
// with tools", "Invalid schema for response_format"). The request can be
// made again without it; a 400 for another reason then comes again.
func RefusedFormat(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindBadRequest
}
