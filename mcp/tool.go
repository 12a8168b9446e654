package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/event"
	"agent/tools"
	"agent/vision"
)

// tool is one server tool as the model sees it.
type tool struct {
	c        *conn
	remote   string // the server's name for it
	def      tools.Definition
	readOnly bool
}

// tool makes t a tools.Tool; one listed under effects is a side effect.
func (c *conn) tool(t *sdk.Tool, scope tools.EffectScope, outbox tools.Outbox) tools.Tool {
	schema, _ := json.Marshal(t.InputSchema) // checked when listed
	if len(schema) == 0 || string(schema) == "null" || string(schema) == "{}" {
		schema = []byte(`{"type":"object","properties":{}}`)
	}
	desc := t.Description
	if len(desc) > maxDescription {
		desc = strings.ToValidUTF8(desc[:maxDescription], "") + "…"
	}
	mt := &tool{
		c: c, remote: t.Name, readOnly: t.Annotations != nil && t.Annotations.ReadOnlyHint,
		def: tools.Definition{Name: ToolName(c.srv.Name, t.Name), Description: desc, Parameters: schema},
	}
	e, ok := c.srv.Effects[t.Name]
	if !ok {
		return mt
	}
	// With no key arguments the key is the run, the phase and the tool:
	// one effect per run and phase.
	newOne := "it happens once per run and phase, so a new one needs a new run"
	if len(e.KeyArgs) > 0 {
		newOne = "change " + strings.Join(e.KeyArgs, " or ")
	}
	effect := tools.Effect{Tool: mt.def.Name, ReceiptType: e.Receipt, KeyArgs: e.KeyArgs, NewOne: newOne}
	return tools.NewEffectTool(effect, mt.def, scope, outbox, mt.prepare)
}

func (t *tool) Definition() tools.Definition { return t.def }

// ReadOnly is the server's readOnlyHint: only such a call is run again
// after a crash interrupted it.
func (t *tool) ReadOnly() bool { return t.readOnly }

func (t *tool) Run(ctx context.Context, _ *tools.Workspace, args json.RawMessage) tools.Result {
	res, err := t.c.call(ctx, t.remote, args, nil)
	if err != nil {
		return tools.Result{Output: err.Error(), IsError: true}
	}
	images, rest := Images(res)
	return tools.Result{Output: Text(rest), IsError: res.IsError, Images: images}
}

// Images takes out of res the image content a model can be given as an
// image (vision.Read reads it); Text describes the rest, an image it
// could not read included. Structured content that stood beside only
// such images goes too: it is their copy, with their base64.
func Images(res *sdk.CallToolResult) ([]event.Image, *sdk.CallToolResult) {
	rest := *res
	rest.Content = nil
	var images []event.Image
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok {
			if img, err := vision.Read("", ic.Data); err == nil {
				images = append(images, img)
				continue
			}
		}
		rest.Content = append(rest.Content, c)
	}
	if len(images) > 0 && len(rest.Content) == 0 {
		rest.StructuredContent = nil
	}
	return images, &rest
}

// prepare is the effect's flow (tools.NewEffectTool): the call carries
// its idempotency key in _meta, for servers that deduplicate. A server
// that refused or reported an error did not act; one that broke or timed
// out may have.
func (t *tool) prepare(args json.RawMessage) (tools.Perform, error) {
	return func(ctx context.Context, key string) (tools.Sent, error) {
		res, err := t.c.call(ctx, t.remote, args, sdk.Meta{"idempotency_key": key})
		var ce *callError
		switch {
		case errors.As(err, &ce) && !ce.sent:
			return tools.Sent{}, tools.NotSent(err)
		case err != nil:
			return tools.Sent{}, err
		case res.IsError:
			return tools.Sent{}, tools.NotSent(fmt.Errorf("the tool reported an error: %s", Text(res)))
		}
		text := Text(res)
		details := map[string]any{"server": t.c.srv.Name, "tool": t.remote}
		if res.StructuredContent != nil {
			details["result"] = withoutBinary(res.StructuredContent)
		} else {
			details["result"] = clip(text, 2048)
		}
		return tools.Sent{Summary: text, Details: details}, nil
	}, nil
}

// Text is what the model reads of a result: its content, with a line
// for each image, audio or binary resource instead of the data. The
// structured content is read only when there is no content: a server that
// follows the spec also returns it as text, and others wrap a copy of their
// text in it (the reference filesystem server's {"content": TEXT} and
// {"content": [IMAGE]}, FastMCP's {"result": …}), so the model would read
// the result twice. Encoded binary in any string is described, not shown.
func Text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if p := contentText(c); p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(withoutBinary(res.StructuredContent)); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func contentText(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return textOrBinary(c.Text)
	case *sdk.ImageContent: // one Images could not read
		return binaryLine("image", c.MIMEType, len(c.Data))
	case *sdk.AudioContent:
		return binaryLine("audio", c.MIMEType, len(c.Data))
	case *sdk.ResourceLink:
		return fmt.Sprintf("[resource %s %s%s]", c.Name, c.URI, mime(c.MIMEType))
	case *sdk.EmbeddedResource:
		return resource(c.Resource)
	default:
		return "[content not shown]"
	}
}

// binaryLine stands for data the model is not given: its kind, MIME type
// and size in bytes.
func binaryLine(kind, mimeType string, size int) string {
	if mimeType != "" {
		kind += " " + mimeType
	}
	return fmt.Sprintf("[%s, %d bytes, not shown]", kind, size)
}

func resource(r *sdk.ResourceContents) string {
	if r == nil {
		return "[resource]"
	}
	if r.Text != "" || r.Blob == nil {
		return fmt.Sprintf("[resource %s%s]\n%s", r.URI, mime(r.MIMEType), textOrBinary(r.Text))
	}
	return fmt.Sprintf("[resource %s%s, %d bytes, not shown]", r.URI, mime(r.MIMEType), len(r.Blob))
}

func mime(m string) string {
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

// withoutBinary is v, a decoded JSON value, with each string that holds
// encoded binary replaced by a line describing it.
func withoutBinary(v any) any {
	switch v := v.(type) {
	case string:
		return textOrBinary(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = withoutBinary(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = withoutBinary(e)
		}
		return out
	default:
		return v
	}
}

// minBinary is the shortest string taken for encoded binary: a shorter
// one costs the model little and may be a token it must pass on (an id, a
// page cursor).
const minBinary = 1024

// textOrBinary is s, or a line describing it when s is encoded binary:
// base64 (plain or in a data: URL) or bytes that are not text.
func textOrBinary(s string) string {
	if len(s) < minBinary {
		return s
	}
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		if mt, data, ok := strings.Cut(rest, ";base64,"); ok && len(mt) < 128 && isBase64(data) {
			return binaryLine("base64 data URL", mt, decodedSize(data))
		}
	}
	if isBase64(s) {
		return binaryLine("base64 data", "", decodedSize(s))
	}
	if notText(s) {
		return binaryLine("binary data", "", len(s))
	}
	return s
}

// isBase64 reports whether s is only the base64 alphabet (standard or
// URL-safe) with upper and lower case letters and digits all present, as
// encoded bytes have and words and hex do not; on one line, or wrapped as
// MIME and PEM wrap it, every line but the last of one width.
func isBase64(s string) bool {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(s, "\r\n", "\n"), "\n"), "\n")
	width := len(lines[0])
	for i, l := range lines[1:] {
		if width < 60 || len(l) > width || (i < len(lines)-2 && len(l) != width) {
			return false
		}
	}
	var upper, lower, digit bool
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z':
			upper = true
		case 'a' <= c && c <= 'z':
			lower = true
		case '0' <= c && c <= '9':
			digit = true
		case c == '+' || c == '/' || c == '=' || c == '-' || c == '_' || c == '\r' || c == '\n':
		default:
			return false
		}
	}
	return upper && lower && digit
}

// decodedSize is how many bytes base64 s decodes to.
func decodedSize(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '=' && c != '\r' && c != '\n' {
			n++
		}
	}
	return n * 6 / 8
}

// notText reports whether over a tenth of s is control characters or
// replacement characters: bytes read as if they were text.
func notText(s string) bool {
	bad, n := 0, 0
	for _, r := range s {
		n++
		if r == utf8.RuneError || (r < 0x20 && r != '\n' && r != '\r' && r != '\t') {
			bad++
		}
	}
	return bad*10 > n
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
