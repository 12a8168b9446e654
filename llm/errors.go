package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrorKind classifies a model provider failure.
type ErrorKind string

const (
	KindAuth             ErrorKind = "auth"              // 401/403: never retried
	KindRateLimit        ErrorKind = "rate_limit"        // 429
	KindServer           ErrorKind = "server"            // 5xx (and 408)
	KindConnection       ErrorKind = "connection"        // no HTTP response at all
	KindTruncated        ErrorKind = "truncated"         // the stream ended without a finish_reason or [DONE]
	KindStream           ErrorKind = "stream"            // an error object or garbage inside a 200 stream
	KindNotFound         ErrorKind = "not_found"         // 404, or a 400 saying the model does not exist: never retried
	KindBadRequest       ErrorKind = "bad_request"       // other 4xx: never retried
	KindUnsupportedTools ErrorKind = "unsupported_tools" // the server cannot handle tools
	KindReplay           ErrorKind = "replay"            // the cassette does not match or is exhausted
	KindTimeout          ErrorKind = "timeout"           // the call ran past Config.CallTimeout
	KindContextLength    ErrorKind = "context_length"    // the prompt is past the model's context window: never retried as is
)

// Error is the one error type Client, the recorder and the replayer
// return for provider failures. Context cancellation is not an *Error:
// it is returned as ctx.Err(), wrapped.
type Error struct {
	Kind       ErrorKind
	Status     int           // HTTP status, or the code inside a stream error; 0 if none
	Message    string        // what the provider said, or what went wrong
	Retryable  bool          // whether another attempt could succeed
	RetryAfter time.Duration // from Retry-After / retry-after-ms; 0 if absent
	Attempts   int           // attempts made before giving up
	URL        string        // the base URL, for connection errors
	Err        error         // underlying cause, if any
	// WaitTooLong says the call gave up at once because the wait before
	// the next attempt (RetryAfter when the server asked for it, else the
	// backoff) would have passed Config.CallTimeout. Rate limited for
	// longer than a call may take: Kind == KindRateLimit && WaitTooLong,
	// with RetryAfter saying for how long.
	WaitTooLong bool
	// Stalled says the attempt got no data for Config.IdleTimeout (silence
	// or only keep-alives). A provider that stalls once is likely to again:
	// a call retries at most Config.MaxStalls of them.
	Stalled bool
	// ContextWindow is the model's context window in tokens when a
	// context-length refusal states it (OpenAI, vLLM, OpenRouter,
	// llama.cpp do); 0 when it does not.
	ContextWindow int
}

func (e *Error) Error() string {
	var b strings.Builder
	switch e.Kind {
	case KindReplay:
		b.WriteString(e.Message)
	case KindConnection:
		fmt.Fprintf(&b, "model provider unreachable at %s: %s", e.URL, e.Message)
	default:
		b.WriteString("model provider: ")
		b.WriteString(kindText(e.Kind))
		if e.Status != 0 {
			fmt.Fprintf(&b, " (%d)", e.Status)
		}
		if e.Message != "" {
			b.WriteString(": ")
			b.WriteString(e.Message)
		}
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ResumeAt is when a call refused by a rate limit may be tried again
// (RFC 3339, UTC): the server's Retry-After from now, or a minute when it
// did not say.
func (e *Error) ResumeAt(now time.Time) string {
	wait := e.RetryAfter
	if wait <= 0 {
		wait = time.Minute
	}
	return now.Add(wait).UTC().Format(time.RFC3339)
}

func kindText(k ErrorKind) string {
	switch k {
	case KindAuth:
		return "unauthorized"
	case KindRateLimit:
		return "rate limited"
	case KindServer:
		return "server error"
	case KindTruncated:
		return "response truncated"
	case KindStream:
		return "error in stream"
	case KindNotFound:
		return "not found"
	case KindBadRequest:
		return "bad request"
	case KindUnsupportedTools:
		return "the server rejected tools"
	case KindTimeout:
		return "timed out"
	case KindContextLength:
		return "the conversation is longer than the model's context window"
	default:
		return string(k)
	}
}

// maxMessage bounds provider text quoted in error messages.
const maxMessage = 300

// statusError classifies a non-2xx HTTP response.
func statusError(status int, body []byte, retryAfter time.Duration) *Error {
	msg := providerMessage(body)
	e := &Error{Status: status, Message: msg, RetryAfter: retryAfter}
	switch {
	case status == 401 || status == 403:
		e.Kind = KindAuth
		if msg == "" {
			e.Message = "check OPENAI_API_KEY"
		} else {
			e.Message = msg + "; check OPENAI_API_KEY"
		}
	case status == 429:
		e.Kind, e.Retryable = KindRateLimit, true
	case rejectsTools(string(body)):
		e.Kind, e.Message = KindUnsupportedTools, toolsHint(string(body), msg)
	case status == 408 || status >= 500:
		// 408 is the server giving up on a slow request: as transient as a 503.
		e.Kind, e.Retryable = KindServer, true
	case (status == 400 || status == 413) && contextTooLong(string(body)):
		e.Kind, e.ContextWindow = KindContextLength, statedWindow(string(body))
	case status == 404 || status == 400 && missingModel(string(body)):
		e.Kind, e.Message = KindNotFound, withHint(msg, notFoundHint)
	default:
		e.Kind = KindBadRequest
	}
	return e
}

// IsContextLength reports whether err is a provider saying the prompt is
// past the model's context window.
func IsContextLength(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindContextLength
}

// ContextWindowOf is the context window a provider stated when it refused
// a request as too long, in tokens; 0 when err is no such refusal or the
// provider did not say.
func ContextWindowOf(err error) int {
	var e *Error
	if errors.As(err, &e) && e.Kind == KindContextLength {
		return e.ContextWindow
	}
	return 0
}

// windowPatterns find the window in a context-length refusal: OpenAI,
// vLLM and OpenRouter ("maximum context length is 8192 tokens"),
// llama.cpp ("n_ctx":8192 beside its message), Anthropic's compatible
// endpoint ("210000 tokens > 200000 maximum") and LM Studio ("context
// length of only 8192 tokens"). Ollama states only the excess.
var windowPatterns = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`(?i)maximum context length is (\d+) tokens`),
		regexp.MustCompile(`"n_ctx"\s*:\s*(\d+)`),
		regexp.MustCompile(`(?i)\d+ tokens > (\d+) maximum`),
		regexp.MustCompile(`(?i)context length of only (\d+) tokens`),
	}
})

// statedWindow is the context window an error body states, or 0.
func statedWindow(body string) int {
	for _, re := range windowPatterns() {
		if m := re.FindStringSubmatch(body); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// contextTooLong reports whether an error body says the prompt does not
// fit the context window, as OpenAI (code context_length_exceeded), vLLM
// and OpenRouter ("maximum context length is N tokens"), llama.cpp
// ("exceeds the available context size"), Ollama ("prompt too long;
// exceeded max context length") and LM Studio ("loaded with context
// length of only N tokens") put it.
func contextTooLong(body string) bool {
	s := strings.ToLower(body)
	for _, p := range []string{"context_length_exceeded", "maximum context length", "context size", "exceed_context_size",
		"max context length", "context window", "prompt is too long", "prompt too long", "context length of only"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// notFoundHint follows a 404 or a missing model: the usual causes are a
// model name the server does not serve and a base URL that is not an
// OpenAI-compatible API root (missing or doubled /v1).
const notFoundHint = "no such model or endpoint at this base URL? check --model and --base-url"

// missingModel reports whether a 400 body says the model does not exist,
// as OpenAI ("model_not_found", "The model `x` does not exist"), Ollama
// ("model \"x\" not found, try pulling it first") and vLLM ("The model `x`
// does not exist.") put it.
func missingModel(body string) bool {
	s := strings.ToLower(body)
	if strings.Contains(s, "model_not_found") {
		return true
	}
	return strings.Contains(s, "model") && (strings.Contains(s, "does not exist") || strings.Contains(s, "not found"))
}

// withHint appends hint to the provider's message, if any.
func withHint(msg, hint string) string {
	if msg == "" {
		return hint
	}
	return msg + "; " + hint
}

// rejectsTools reports whether an error body says the server cannot take
// the tools parameter: llama.cpp without --jinja answers 500 "tools param
// requires --jinja flag", Ollama answers 400 "... does not support tools".
func rejectsTools(body string) bool {
	s := strings.ToLower(body)
	if strings.Contains(s, "jinja") {
		return true
	}
	if !strings.Contains(s, "tool") {
		return false
	}
	for _, p := range []string{"not support", "unsupported", "does not support"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// toolsHint names the likely cause of a tools rejection described by
// raw, followed by the provider's message.
func toolsHint(raw, msg string) string {
	hint := "the model may not support tool calling"
	if strings.Contains(strings.ToLower(raw), "jinja") {
		hint = "llama.cpp needs --jinja"
	}
	if msg == "" {
		return hint
	}
	return hint + " (server said: " + msg + ")"
}

// providerMessage extracts a human message from an error body, whatever
// its shape: {"error":{"message":…}}, {"error":"…"}, {"message":…},
// {"detail":…}, or plain text.
func providerMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		if len(v.Error) > 0 && string(v.Error) != "null" {
			var obj struct {
				Message string `json:"message"`
			}
			var s string
			switch {
			case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
				return clip(obj.Message)
			case json.Unmarshal(v.Error, &s) == nil && s != "":
				return clip(s)
			}
		}
		if v.Message != "" {
			return clip(v.Message)
		}
		var s string
		if json.Unmarshal(v.Detail, &s) == nil && s != "" {
			return clip(s)
		}
		if len(v.Detail) > 0 {
			return clip(string(v.Detail))
		}
	}
	return clip(string(body))
}

// clip makes provider text fit on one short line.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxMessage {
		// Cut on a rune boundary.
		cut := maxMessage
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// streamError classifies an error object found inside a 200 stream, in
// OpenRouter's shape {"error":{"code":502,"message":…}} or vLLM's
// {"object":"error","message":…,"code":500}. It returns nil if the chunk
// is not an error.
func streamError(data []byte) *Error {
	var v struct {
		Object  string          `json:"object"`
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	var msg, typ string
	var code json.RawMessage
	switch {
	case len(v.Error) > 0 && string(v.Error) != "null":
		var obj struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(v.Error, &obj) != nil {
			// {"error":"some text"}
			var s string
			_ = json.Unmarshal(v.Error, &s)
			obj.Message = s
		}
		msg, typ, code = obj.Message, obj.Type, obj.Code
	case v.Object == "error":
		msg, typ, code = v.Message, v.Type, v.Code
	default:
		return nil
	}
	status := codeStatus(code)
	e := &Error{Kind: KindStream, Status: status, Message: clip(msg)}
	if e.Message == "" {
		e.Message = "unknown error"
	}
	switch {
	case rejectsTools(msg):
		e.Kind, e.Message = KindUnsupportedTools, toolsHint(msg, e.Message)
	case status == 408 || status == 429 || status >= 500:
		e.Retryable = true
	case status == 0:
		e.Retryable = looksTransient(msg + " " + typ + " " + string(code))
	}
	return e
}

// codeStatus turns an error code into an HTTP-like status when it is a
// number or a numeric string; other codes ("server_error") give 0.
func codeStatus(code json.RawMessage) int {
	s := strings.Trim(string(code), `"`)
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return 0
	}
	return n
}

// looksTransient guesses from words whether a coded-less error may pass.
func looksTransient(s string) bool {
	s = strings.ToLower(s)
	for _, w := range []string{
		"timeout", "timed out", "overloaded", "temporar", "unavailable",
		"upstream", "rate limit", "rate_limit", "try again", "disconnect",
		"server_error", "internalservererror", "internal server error", "busy",
	} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// connError classifies a failure to get any HTTP response.
func connError(baseURL string, err error) *Error {
	return &Error{Kind: KindConnection, URL: baseURL, Message: connReason(err), Retryable: true, Err: err}
}

func connReason(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before a response"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "no such host " + dnsErr.Name
		}
		return "dns lookup failed: " + dnsErr.Err
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
