package acp

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	sdk "github.com/coder/acp-go-sdk"
)

// writeMCPConfig writes the MCP servers a client passed for session id as
// a .mcp.json file in home, the form --mcp-config reads, and returns its
// path: the session's runs then start them as the operator's own.
func writeMCPConfig(home, id string, servers []sdk.McpServer) (string, error) {
	type server struct {
		Type    string            `json:"type,omitempty"`
		Command string            `json:"command,omitempty"`
		Args    []string          `json:"args,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
		URL     string            `json:"url,omitempty"`
		Headers map[string]string `json:"headers,omitempty"`
	}
	file := struct {
		MCPServers map[string]server `json:"mcpServers"`
	}{map[string]server{}}
	for _, m := range servers {
		switch {
		case m.Stdio != nil:
			env := map[string]string{}
			for _, e := range m.Stdio.Env {
				env[e.Name] = e.Value
			}
			file.MCPServers[m.Stdio.Name] = server{Command: m.Stdio.Command, Args: m.Stdio.Args, Env: env}
		case m.Http != nil:
			headers := map[string]string{}
			for _, h := range m.Http.Headers {
				headers[h.Name] = h.Value
			}
			file.MCPServers[m.Http.Name] = server{Type: "http", URL: m.Http.Url, Headers: headers}
		default:
			return "", sdk.NewInvalidParams(map[string]any{"error": "an MCP server over SSE or ACP is not supported here: give it as stdio or http"})
		}
	}
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(home, "acp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("keep the editor's MCP servers: %w", err)
	}
	path := filepath.Join(dir, id+".mcp.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("keep the editor's MCP servers: %w", err)
	}
	return path, nil
}
