package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/tools"
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
	effect := tools.Effect{Tool: mt.def.Name, ReceiptType: e.Receipt, KeyArgs: e.KeyArgs,
		NewOne: "change " + strings.Join(e.KeyArgs, " or ")}
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
	return tools.Result{Output: Text(res), IsError: res.IsError}
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
			details["result"] = res.StructuredContent
		} else {
			details["result"] = clip(text, 2048)
		}
		return tools.Sent{Summary: text, Details: details}, nil
	}, nil
}

// Text is what the model reads of a result: text content joined, the
// structured content as JSON, and a line for each image, audio or
// resource: the model gets no binary.
func Text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s%s]", c.Name, c.URI, mime(c.MIMEType)))
		case *sdk.EmbeddedResource:
			parts = append(parts, resource(c.Resource))
		default:
			parts = append(parts, "[content not shown]")
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && !containsJSON(parts, b) {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func resource(r *sdk.ResourceContents) string {
	if r == nil {
		return "[resource]"
	}
	if r.Text != "" || r.Blob == nil {
		return fmt.Sprintf("[resource %s%s]\n%s", r.URI, mime(r.MIMEType), r.Text)
	}
	return fmt.Sprintf("[resource %s%s, %d bytes, not shown]", r.URI, mime(r.MIMEType), len(r.Blob))
}

func mime(m string) string {
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

// containsJSON reports whether a text part already is the structured
// content, as servers that follow the spec send it twice.
func containsJSON(parts []string, b []byte) bool {
	for _, p := range parts {
		var a, c any
		if json.Unmarshal([]byte(p), &a) == nil && json.Unmarshal(b, &c) == nil {
			pa, _ := json.Marshal(a)
			pc, _ := json.Marshal(c)
			if string(pa) == string(pc) {
				return true
			}
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
