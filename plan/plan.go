// Package plan is the mission: an objective split into phases with
// dependencies and evidence requirements (docs/PROTOCOL.md#plan-format, mission.json).
// It parses and validates plans and orders their phases; it knows nothing
// about running them.
package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// Version is the mission.json format version.
const Version = 1

// DefaultMaxAttempts is a phase's attempt budget when the plan gives none.
const DefaultMaxAttempts = 3

// Evidence types.
const (
	EvidenceArtifact     = "artifact"
	EvidenceReceipt      = "receipt"
	EvidenceHybrid       = "hybrid"
	EvidenceProgrammatic = "programmatic"
	EvidenceNone         = "none"
)

// Plan is mission.json.
type Plan struct {
	Version   int     `json:"version"`
	Objective string  `json:"objective"`
	Phases    []Phase `json:"phases"`
}

// Phase is the smallest unit of work that should complete in one fresh
// context window.
type Phase struct {
	ID            string   `json:"id"`
	Title         string   `json:"title"`
	Instructions  string   `json:"instructions"`
	DependsOn     []string `json:"depends_on"`
	Evidence      Evidence `json:"evidence"`
	MaxAttempts   int      `json:"max_attempts"`
	Until         string   `json:"until"`
	MaxIterations int      `json:"max_iterations"`
}

// Evidence is what proves a phase done.
type Evidence struct {
	Type      string   `json:"type"`
	Artifacts []string `json:"artifacts"`
	Receipts  []string `json:"receipts"`
	Command   string   `json:"command"`
}

// Error is a validation failure naming the offending field, e.g.
// `phases[2].depends_on: unknown phase "gathr"`.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "invalid plan: " + e.Msg
	}
	return fmt.Sprintf("invalid plan: %s: %s", e.Field, e.Msg)
}

// isSlug reports whether id is a phase slug: 1–64 of lowercase letters,
// digits, - and _, not starting with - or _. (A loop, not a regexp: this
// package is initialised on every start of the binary.)
func isSlug(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case (r == '-' || r == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Parse decodes and validates a plan, filling in defaults. Unknown fields
// are errors, so a typo in a hand-edited mission.json is caught.
func Parse(data []byte) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, decodeError(data, err)
	}
	// More reports false before a stray ] or }, which Token sees.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{Msg: "trailing data after the plan object"}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// decodeError turns a JSON decoding error into an *Error naming the field.
// encoding/json reports neither which phase holds an unknown field nor the
// index of a mistyped one ("phases.max_attempts"), so the phases are decoded
// again one by one to find the first that fails.
func decodeError(data []byte, err error) *Error {
	var raw struct {
		Phases []json.RawMessage `json:"phases"`
	}
	var syn *json.SyntaxError
	if !errors.As(err, &syn) && json.Unmarshal(data, &raw) == nil {
		for i, r := range raw.Phases {
			dec := json.NewDecoder(bytes.NewReader(r))
			dec.DisallowUnknownFields()
			var ph Phase
			if perr := dec.Decode(&ph); perr != nil {
				field, msg := jsonProblem(perr)
				if field == "" {
					field = fmt.Sprintf("phases[%d]", i)
				} else {
					field = fmt.Sprintf("phases[%d].%s", i, field)
				}
				return &Error{Field: field, Msg: msg}
			}
		}
	}
	field, msg := jsonProblem(err)
	return &Error{Field: field, Msg: msg}
}

// jsonProblem splits a decoding error into the field it is about, if
// known, and a message without Go type names.
func jsonProblem(err error) (field, msg string) {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "", "the input is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "", "not valid JSON: the input ends too early"
	case errors.As(err, &syn):
		return "", fmt.Sprintf("not valid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		return typ.Field, fmt.Sprintf("must be %s, not %s", jsonKind(typ.Type.Kind()), typ.Value)
	}
	return "", strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names a Go kind the way JSON would.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Slice:
		return "a list"
	case reflect.Struct:
		return "an object"
	}
	return k.String()
}

// Validate checks the plan and fills in defaults: version 1, max_attempts
// 3, non-nil lists. It returns the first problem as an *Error.
func (p *Plan) Validate() error {
	if p.Version == 0 {
		p.Version = Version
	}
	if p.Version != Version {
		return &Error{Field: "version", Msg: fmt.Sprintf("unsupported version %d (want %d)", p.Version, Version)}
	}
	if strings.TrimSpace(p.Objective) == "" {
		return &Error{Field: "objective", Msg: "is empty"}
	}
	if len(p.Phases) == 0 {
		return &Error{Field: "phases", Msg: "a plan needs at least one phase"}
	}
	seen := map[string]int{}
	for i := range p.Phases {
		ph := &p.Phases[i]
		field := fmt.Sprintf("phases[%d]", i)
		if !isSlug(ph.ID) {
			return &Error{Field: field + ".id", Msg: fmt.Sprintf("%q is not a slug (lowercase letters, digits, - and _)", ph.ID)}
		}
		if j, dup := seen[ph.ID]; dup {
			return &Error{Field: field + ".id", Msg: fmt.Sprintf("%q repeats phases[%d].id", ph.ID, j)}
		}
		seen[ph.ID] = i
		if strings.TrimSpace(ph.Instructions) == "" {
			return &Error{Field: field + ".instructions", Msg: "is empty"}
		}
		if ph.Title == "" {
			ph.Title = ph.ID
		}
		if ph.DependsOn == nil {
			ph.DependsOn = []string{}
		}
		if ph.MaxAttempts == 0 {
			ph.MaxAttempts = DefaultMaxAttempts
		}
		if ph.MaxAttempts < 0 || ph.MaxAttempts > 20 {
			return &Error{Field: field + ".max_attempts", Msg: fmt.Sprintf("%d is out of range 1..20", ph.MaxAttempts)}
		}
		if ph.MaxIterations < 0 {
			return &Error{Field: field + ".max_iterations", Msg: "must not be negative"}
		}
		if ph.MaxIterations > 0 && strings.TrimSpace(ph.Until) == "" {
			return &Error{Field: field + ".until", Msg: "max_iterations needs until, the promise that marks the phase complete"}
		}
		if strings.Contains(ph.Until, "\n") {
			return &Error{Field: field + ".until", Msg: "must be a single line"}
		}
		if err := ph.Evidence.validate(field + ".evidence"); err != nil {
			return err
		}
	}
	for i, ph := range p.Phases {
		for j, dep := range ph.DependsOn {
			field := fmt.Sprintf("phases[%d].depends_on[%d]", i, j)
			if _, ok := seen[dep]; !ok {
				return &Error{Field: field, Msg: fmt.Sprintf("unknown phase %q", dep)}
			}
			if dep == ph.ID {
				return &Error{Field: field, Msg: fmt.Sprintf("phase %q depends on itself", dep)}
			}
		}
	}
	if cycle := p.cycle(); cycle != nil {
		return &Error{Field: "phases", Msg: "dependency cycle: " + strings.Join(cycle, " -> ")}
	}
	return nil
}

func (e *Evidence) validate(field string) error {
	if e.Artifacts == nil {
		e.Artifacts = []string{}
	}
	if e.Receipts == nil {
		e.Receipts = []string{}
	}
	switch e.Type {
	case EvidenceArtifact:
		if len(e.Artifacts) == 0 {
			return &Error{Field: field + ".artifacts", Msg: "artifact evidence needs at least one file"}
		}
	case EvidenceReceipt:
		if len(e.Receipts) == 0 {
			return &Error{Field: field + ".receipts", Msg: "receipt evidence needs at least one receipt type"}
		}
	case EvidenceHybrid:
		if len(e.Artifacts) == 0 || len(e.Receipts) == 0 {
			return &Error{Field: field, Msg: "hybrid evidence needs both artifacts and receipts"}
		}
	case EvidenceProgrammatic:
		if strings.TrimSpace(e.Command) == "" {
			return &Error{Field: field + ".command", Msg: "programmatic evidence needs a command"}
		}
	case EvidenceNone:
	case "":
		return &Error{Field: field + ".type", Msg: "is missing; use artifact, receipt, hybrid, programmatic or none"}
	default:
		return &Error{Field: field + ".type", Msg: fmt.Sprintf("%q is not one of artifact, receipt, hybrid, programmatic, none", e.Type)}
	}
	for i, a := range e.Artifacts {
		if msg := artifactProblem(a); msg != "" {
			return &Error{Field: fmt.Sprintf("%s.artifacts[%d]", field, i), Msg: msg}
		}
	}
	for i, r := range e.Receipts {
		if strings.TrimSpace(r) == "" {
			return &Error{Field: fmt.Sprintf("%s.receipts[%d]", field, i), Msg: "is empty"}
		}
	}
	return nil
}

// artifactProblem says why an artifact path cannot name a file inside the
// workspace, or "" if it can. The check is lexical, as the workspace is not
// known here: the evidence check resolves symlinks when it looks. A path
// that leaves the workspace could never pass, so every attempt would be
// spent on it.
func artifactProblem(a string) string {
	switch {
	case strings.TrimSpace(a) == "":
		return "is empty"
	case strings.IndexByte(a, 0) >= 0:
		return fmt.Sprintf("%q contains a NUL byte", a)
	case filepath.IsAbs(a):
		return fmt.Sprintf("%q is absolute; give a path relative to the workspace", a)
	case filepath.Clean(a) == ".":
		return fmt.Sprintf("%q is the workspace itself; give a file inside it", a)
	case !filepath.IsLocal(a):
		return fmt.Sprintf("%q leaves the workspace; give a path inside it", a)
	}
	return ""
}

// cycle returns one dependency cycle as a path of ids, or nil.
func (p *Plan) cycle() []string {
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	deps := map[string][]string{}
	for _, ph := range p.Phases {
		deps[ph.ID] = ph.DependsOn
	}
	var stack []string
	var visit func(id string) []string
	visit = func(id string) []string {
		switch state[id] {
		case visiting:
			i := slices.Index(stack, id)
			return append(slices.Clone(stack[i:]), id)
		case done:
			return nil
		}
		state[id] = visiting
		stack = append(stack, id)
		for _, d := range deps[id] {
			if c := visit(d); c != nil {
				return c
			}
		}
		stack = stack[:len(stack)-1]
		state[id] = done
		return nil
	}
	for _, ph := range p.Phases {
		if c := visit(ph.ID); c != nil {
			return c
		}
	}
	return nil
}

// Phase returns the phase with the given id.
func (p *Plan) Phase(id string) (Phase, bool) {
	for _, ph := range p.Phases {
		if ph.ID == id {
			return ph, true
		}
	}
	return Phase{}, false
}

// Ready returns the phases that can start now, in plan order: not done,
// not running, and every dependency done. The order is deterministic so a
// resumed run picks the same phase a fresh one would.
func (p *Plan) Ready(done, running map[string]bool) []Phase {
	var out []Phase
	for _, ph := range p.Phases {
		if done[ph.ID] || running[ph.ID] {
			continue
		}
		ready := true
		for _, d := range ph.DependsOn {
			if !done[d] {
				ready = false
				break
			}
		}
		if ready {
			out = append(out, ph)
		}
	}
	return out
}

// JSON returns the plan as indented JSON, as written to mission.json.
func (p *Plan) JSON() []byte {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("marshal plan: %v", err)) // plain data always marshals
	}
	return append(b, '\n')
}
