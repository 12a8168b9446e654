package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Prefix starts the name of every MCP tool the model sees.
const Prefix = "mcp__"

// IsName reports whether name is an MCP tool's or server's name:
// mcp__SERVER__TOOL or mcp__SERVER.
func IsName(name string) bool { return strings.HasPrefix(name, Prefix) }

// Open reports whether an --allow-tools or --deny-tools entry may name a
// tool only the started servers can tell exists: theirs, or the resource
// tools (offered when a server has resources).
func Open(entry string) bool {
	return IsName(entry) || entry == ResourcesName || entry == ReadResourceName
}

// ServerOf returns the server part of mcp__SERVER__TOOL or mcp__SERVER.
func ServerOf(name string) string {
	rest := strings.TrimPrefix(name, Prefix)
	server, _, _ := strings.Cut(rest, "__")
	return server
}

// Matches reports whether an --allow-tools or --deny-tools entry names
// tool: the tool itself, or mcp__SERVER for all of a server's tools.
func Matches(entry, tool string) bool {
	return entry == tool || IsName(entry) && !strings.Contains(strings.TrimPrefix(entry, Prefix), "__") &&
		strings.HasPrefix(tool, entry+"__")
}

var unsafeChar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9_-]`) })

// maxName is the longest tool name providers accept.
const maxName = 64

// ToolName is the name the model calls a server's tool by. Providers
// accept [A-Za-z0-9_-]{1,64}: other characters become _, and a name too
// long keeps its start and a hash of the whole, so it stays unique.
func ToolName(server, tool string) string {
	name := Prefix + server + "__" + unsafeChar().ReplaceAllString(tool, "_")
	if len(name) <= maxName && !unsafeChar().MatchString(tool) {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:])[:8]
	if len(name)+len(suffix) > maxName {
		name = name[:maxName-len(suffix)]
	}
	return name + suffix
}

// Used returns the servers a run with these allow and deny lists can
// offer tools of: all of them when allow is empty, else those allow names
// (mcp__SERVER or one of its tools); a server denied whole is not used.
func Used(servers []Server, allow, deny []string) []Server {
	var out []Server
	for _, s := range servers {
		whole := Prefix + s.Name
		if slices.Contains(deny, whole) {
			continue
		}
		if len(allow) == 0 || slices.ContainsFunc(allow, func(e string) bool { return IsName(e) && ServerOf(e) == s.Name }) {
			out = append(out, s)
		}
	}
	return out
}

// Entries are the tool-list entries that stand for the used servers'
// tools before they are known: the allow list's MCP entries, or
// mcp__SERVER for each server used when allow is empty.
func Entries(servers []Server, allow, deny []string) []string {
	var out []string
	if len(allow) > 0 {
		for _, e := range allow {
			if IsName(e) {
				out = append(out, e)
			}
		}
		return out
	}
	for _, s := range Used(servers, nil, deny) {
		out = append(out, Prefix+s.Name)
	}
	return out
}

// UnknownServer returns the first MCP entry of list whose server is not
// configured, or "".
func UnknownServer(servers []Server, list []string) string {
	for _, e := range list {
		if !IsName(e) {
			continue
		}
		if !slices.ContainsFunc(servers, func(s Server) bool { return s.Name == ServerOf(e) }) {
			return e
		}
	}
	return ""
}

// ServersOf are the servers a tool list's MCP entries name, in order,
// each once.
func ServersOf(list []string) []string {
	var out []string
	for _, e := range list {
		if IsName(e) && !slices.Contains(out, ServerOf(e)) {
			out = append(out, ServerOf(e))
		}
	}
	return out
}
