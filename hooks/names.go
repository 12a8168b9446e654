package hooks

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// claudeNames are Claude Code's names of agent's tools: a matcher may
// name either, and a hook is told Claude's, so that a hook written for
// Claude Code works unchanged. An MCP tool, mcp__SERVER__TOOL, has the
// same name in both.
var claudeNames = map[string][]string{
	"bash":       {"Bash"},
	"write_file": {"Write"},
	"edit_file":  {"Edit", "MultiEdit"},
	"read_file":  {"Read"},
	"grep":       {"Grep"},
	"list_files": {"Glob", "LS"},
	"task":       {"Task", "Agent"},
}

// Names are the names a matcher may match a tool by: agent's, then
// Claude Code's.
func Names(tool string) []string { return append([]string{tool}, claudeNames[tool]...) }

// ClaudeName is the tool's name as a hook is told it: Claude Code's when
// it has one.
func ClaudeName(tool string) string {
	if names := claudeNames[tool]; len(names) > 0 {
		return names[0]
	}
	return tool
}

// fileTools take a path, which Claude Code's tools call file_path and
// give absolute.
var fileTools = []string{"read_file", "write_file", "edit_file"}

// ClaudeInput is a tool call's arguments as Claude Code's tool takes
// them, for a hook's tool_input: a file tool's path is file_path, made
// absolute in the workspace root; bash's timeout_s is timeout, in
// milliseconds. Other fields are as they are; arguments that are no JSON
// object are given as they are.
func ClaudeInput(tool string, args json.RawMessage, root string) json.RawMessage {
	var in map[string]any
	if json.Unmarshal(args, &in) != nil || in == nil {
		return args
	}
	switch {
	case slices.Contains(fileTools, tool):
		if p, ok := in["path"].(string); ok {
			if !filepath.IsAbs(p) {
				p = filepath.Join(root, p)
			}
			delete(in, "path")
			in["file_path"] = p
		}
	case tool == "bash":
		if s, ok := in["timeout_s"].(float64); ok {
			delete(in, "timeout_s")
			in["timeout"] = s * 1000
		}
	}
	out, err := json.Marshal(in)
	if err != nil {
		return args
	}
	return out
}

// AgentInput is the reverse of ClaudeInput, for a hook's updatedInput:
// Claude's field names made agent's, a file_path in the workspace made
// relative to it (one outside is kept, for the tool to refuse).
func AgentInput(tool string, input json.RawMessage, root string) json.RawMessage {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil || in == nil {
		return input
	}
	switch {
	case slices.Contains(fileTools, tool):
		if p, ok := in["file_path"].(string); ok {
			if rel, err := filepath.Rel(root, p); err == nil && filepath.IsAbs(p) && rel != ".." && !strings.HasPrefix(rel, "../") {
				p = rel
			}
			delete(in, "file_path")
			in["path"] = p
		}
	case tool == "bash":
		if ms, ok := in["timeout"].(float64); ok {
			delete(in, "timeout")
			in["timeout_s"] = math.Ceil(ms / 1000)
		}
	}
	out, err := json.Marshal(in)
	if err != nil {
		return input
	}
	return out
}

// ClaudeResponse is a tool's result as a hook's tool_response: success
// and output for every tool, and the fields Claude Code's hooks read most
// (a file tool's filePath, bash's stdout).
func ClaudeResponse(tool string, args json.RawMessage, root string, ok bool, output string) json.RawMessage {
	resp := map[string]any{"success": ok, "output": output}
	if !ok {
		resp["error"] = output
	}
	switch {
	case slices.Contains(fileTools, tool):
		var in struct {
			FilePath string `json:"file_path"`
		}
		if json.Unmarshal(ClaudeInput(tool, args, root), &in) == nil && in.FilePath != "" {
			resp["filePath"] = in.FilePath
		}
	case tool == "bash":
		resp["stdout"] = output
	}
	out, _ := json.Marshal(resp) // strings and a bool: cannot fail
	return out
}
