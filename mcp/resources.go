package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/tools"
)

// The servers' resources reach the model through two tools, offered when
// a started server has resources (it says so in its capabilities):
// mcp_resources lists them, mcp_read_resource reads one; text is given
// as it is, binary as one line.
const (
	ResourcesName    = "mcp_resources"
	ReadResourceName = "mcp_read_resource"
)

// maxResources bounds one server's listing: a server with a million
// files cannot flood the model's context.
const maxResources = 200

// ResourceTools are mcp_resources and mcp_read_resource when a started
// server has resources; none otherwise.
func (s *Servers) ResourceTools() []tools.Tool {
	if len(s.withResources()) == 0 {
		return nil
	}
	names := strings.Join(s.withResources(), ", ")
	return []tools.Tool{
		&resourceTool{s: s, def: tools.Definition{
			Name: ResourcesName,
			Description: "List the resources (documents, files, data) the MCP servers offer, and the URI templates they read. " +
				"Servers with resources: " + names + ".",
			Parameters: json.RawMessage(`{"type":"object","properties":{"server":{"type":"string","description":"Only this server's resources."}},"additionalProperties":false}`),
		}},
		&resourceTool{s: s, read: true, def: tools.Definition{
			Name:        ReadResourceName,
			Description: "Read one resource of an MCP server by its URI (from mcp_resources, or a URI template filled in). Servers with resources: " + names + ".",
			Parameters: json.RawMessage(`{"type":"object","properties":{"server":{"type":"string"},"uri":{"type":"string"}},` +
				`"required":["server","uri"],"additionalProperties":false}`),
		}},
	}
}

// withResources are the started servers that have resources.
func (s *Servers) withResources() []string {
	var out []string
	if s == nil {
		return nil
	}
	for _, c := range s.conns {
		if c.resources {
			out = append(out, c.srv.Name)
		}
	}
	return out
}

type resourceTool struct {
	s    *Servers
	read bool
	def  tools.Definition
}

func (t *resourceTool) Definition() tools.Definition { return t.def }

// ReadOnly: listing and reading change nothing.
func (t *resourceTool) ReadOnly() bool { return true }

func (t *resourceTool) Run(ctx context.Context, _ *tools.Workspace, args json.RawMessage) tools.Result {
	var a struct{ Server, URI string }
	if err := json.Unmarshal(args, &a); err != nil {
		return tools.Result{IsError: true, Output: "invalid arguments: " + err.Error()}
	}
	servers := t.s.withResources()
	if a.Server != "" && !slices.Contains(servers, a.Server) {
		return tools.Result{IsError: true, Output: fmt.Sprintf("no MCP server %q with resources; servers with resources: %s", a.Server, strings.Join(servers, ", "))}
	}
	if t.read {
		return t.s.readResource(ctx, a.Server, a.URI)
	}
	var parts []string
	for _, c := range t.s.conns {
		if slices.Contains(servers, c.srv.Name) && (a.Server == "" || a.Server == c.srv.Name) {
			parts = append(parts, c.listResources(ctx))
		}
	}
	return tools.Result{Output: strings.Join(parts, "\n\n")}
}

// listResources is one server's resources and templates, a line each.
func (c *conn) listResources(ctx context.Context) string {
	lines := []string{fmt.Sprintf("MCP server %q:", c.srv.Name)}
	err := c.request(ctx, func(ctx context.Context, cs *sdk.ClientSession) error {
		n := 0
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return err
			}
			if n++; n > maxResources {
				lines = append(lines, fmt.Sprintf("  … more than %d resources; the rest are not listed", maxResources))
				break
			}
			lines = append(lines, "  "+describeResource(r.URI, r.Name, r.Title, r.MIMEType, r.Description))
		}
		n = 0
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				break // templates are optional: a server may not answer
			}
			if n++; n > maxResources {
				break
			}
			lines = append(lines, "  template "+describeResource(r.URITemplate, r.Name, r.Title, r.MIMEType, r.Description))
		}
		return nil
	})
	if err != nil {
		lines = append(lines, "  could not list its resources: "+err.Error())
	} else if len(lines) == 1 {
		lines = append(lines, "  no resources")
	}
	return strings.Join(lines, "\n")
}

func describeResource(uri, name, title, mimeType, description string) string {
	line := uri
	if title != "" {
		name = title
	}
	if name != "" && name != uri {
		line += " " + name
	}
	line += mime(mimeType)
	if description != "" {
		line += ": " + clip(strings.Join(strings.Fields(description), " "), 200)
	}
	return line
}

// readResource is what the model reads of one resource.
func (s *Servers) readResource(ctx context.Context, server, uri string) tools.Result {
	for _, c := range s.conns {
		if c.srv.Name != server {
			continue
		}
		var res *sdk.ReadResourceResult
		err := c.request(ctx, func(ctx context.Context, cs *sdk.ClientSession) error {
			var err error
			res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
			return err
		})
		if err != nil {
			return tools.Result{IsError: true, Output: fmt.Sprintf("MCP server %q could not read %s: %v", server, uri, err)}
		}
		var parts []string
		for _, r := range res.Contents {
			parts = append(parts, resource(r))
		}
		if len(parts) == 0 {
			return tools.Result{Output: fmt.Sprintf("[resource %s: empty]", uri)}
		}
		return tools.Result{Output: strings.Join(parts, "\n")}
	}
	return tools.Result{IsError: true, Output: fmt.Sprintf("no MCP server %q", server)}
}

// request runs one request to the server within its tool timeout,
// restarting a server that died as a call does.
func (c *conn) request(ctx context.Context, do func(context.Context, *sdk.ClientSession) error) error {
	s, err := c.session(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.srv.ToolTimeout)
	defer cancel()
	if err := do(ctx, s.cs); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("no answer within %s (tool_timeout_s)", c.srv.ToolTimeout)
		}
		return err
	}
	return nil
}
