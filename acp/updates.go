package acp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"agent/console"
	"agent/event"
	"agent/plan"
	"agent/tools"
	"agent/vision"
)

// updater turns a session's run events into session/update
// notifications: live, as a prompt's run records them, or replayed from
// the store by session/load.
type updater struct {
	a    *agent
	s    *session
	live bool
	// streamed: message.delta was sent since the last message.completed,
	// so the whole message is not sent again.
	streamed bool
	// before are the files a live write_file or edit_file is about to
	// change, as they were at its tool.started: its diff's oldText.
	before map[string]*string
	// plan is a harness run's phases, in the plan's order.
	plan []sdk.PlanEntry
}

func (a *agent) updater(s *session, live bool) *updater {
	return &updater{a: a, s: s, live: live, before: map[string]*string{}}
}

// show sends e's updates to the client. A client gone away loses them:
// the store has them, and session/load replays them.
func (u *updater) show(e event.Event) {
	for _, up := range u.updates(e) {
		_ = u.a.conn.SessionUpdate(context.Background(), sdk.SessionNotification{SessionId: sdk.SessionId(u.s.id), Update: up})
	}
}

// updates are the session/update notifications event e makes, if any.
func (u *updater) updates(e event.Event) []sdk.SessionUpdate {
	switch e.Type {
	case event.RunStarted:
		var d event.RunStartedData
		if e.Decode(&d) != nil || d.Resumed || d.Prompt == "" || u.live {
			return nil // a live prompt's text is the client's own
		}
		return []sdk.SessionUpdate{sdk.UpdateUserMessageText(d.Prompt)}
	case event.MessageDelta:
		var d event.MessageDeltaData
		if e.Decode(&d) != nil || d.Text == "" || !u.live {
			return nil // a replay sends whole messages
		}
		u.streamed = true
		return []sdk.SessionUpdate{sdk.UpdateAgentMessageText(d.Text)}
	case event.MessageCompleted:
		var d event.MessageData
		streamed := u.streamed
		u.streamed = false
		if e.Decode(&d) != nil || d.Role != "assistant" || d.Text == "" || streamed {
			return nil
		}
		return []sdk.SessionUpdate{sdk.UpdateAgentMessageText(d.Text)}
	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) != nil {
			return nil
		}
		return []sdk.SessionUpdate{u.toolStarted(d)}
	case event.ToolCompleted:
		var d event.ToolCompletedData
		if e.Decode(&d) != nil {
			return nil
		}
		return []sdk.SessionUpdate{u.toolCompleted(d)}
	case event.ToolProgress:
		// How far a running call has come, as its content until its
		// result replaces it.
		var d event.ToolProgressData
		if e.Decode(&d) != nil || !u.s.calls[d.CallID] {
			return nil
		}
		return []sdk.SessionUpdate{sdk.UpdateToolCall(sdk.ToolCallId(d.CallID),
			sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock(console.ProgressText(d)))}))}
	case event.RunWaiting:
		var d event.RunWaitingData
		if e.Decode(&d) != nil {
			return nil
		}
		if d.Kind != event.WaitApproval {
			return []sdk.SessionUpdate{sdk.UpdateAgentThoughtText(console.WaitLine(d))}
		}
		// The call waits for its approval (asked live as
		// session/request_permission): shown pending until it starts.
		u.s.waits[d.WaitID] = d.CallID
		if u.s.calls[d.CallID] {
			return nil // asked again after a crash: shown already
		}
		u.s.calls[d.CallID] = true
		var a toolArgs
		_ = json.Unmarshal(d.Args, &a)
		opts := []sdk.ToolCallStartOpt{sdk.WithStartKind(toolKind(d.Tool)), sdk.WithStartStatus(sdk.ToolCallStatusPending), sdk.WithStartRawInput(json.RawMessage(d.Args))}
		if path := u.abs(a.Path); path != "" {
			opts = append(opts, sdk.WithStartLocations([]sdk.ToolCallLocation{{Path: path}}))
		}
		return []sdk.SessionUpdate{sdk.StartToolCall(sdk.ToolCallId(d.CallID), toolTitle(d.Tool, a), opts...)}
	case event.WaitResolved:
		var d event.WaitResolvedData
		if e.Decode(&d) != nil || d.Outcome != event.WaitDenied && d.Outcome != event.WaitTimedOut {
			return nil
		}
		call, ok := u.s.waits[d.WaitID]
		if !ok {
			return nil
		}
		return []sdk.SessionUpdate{sdk.UpdateToolCall(sdk.ToolCallId(call), sdk.WithUpdateStatus(sdk.ToolCallStatusFailed),
			sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock(fmt.Sprintf("not run: %s (via %s)", d.Outcome, d.Via)))}))}
	case event.PlanCreated:
		var d event.PlanData
		var p plan.Plan
		if e.Decode(&d) != nil || json.Unmarshal(d.Plan, &p) != nil {
			return nil
		}
		u.plan = u.plan[:0]
		for _, ph := range p.Phases {
			u.plan = append(u.plan, sdk.PlanEntry{Content: ph.Title, Priority: sdk.PlanEntryPriorityMedium, Status: sdk.PlanEntryStatusPending,
				Meta: map[string]any{"phase_id": ph.ID}})
		}
		return []sdk.SessionUpdate{sdk.UpdatePlan(u.plan...)}
	case event.PhaseStarted, event.PhaseCompleted, event.PhaseFailed:
		status := map[string]sdk.PlanEntryStatus{
			event.PhaseStarted: sdk.PlanEntryStatusInProgress, event.PhaseCompleted: sdk.PlanEntryStatusCompleted,
			event.PhaseFailed: sdk.PlanEntryStatusPending, // retried, or the run fails: not done
		}[e.Type]
		for i := range u.plan {
			if u.plan[i].Meta["phase_id"] == e.PhaseID {
				u.plan[i].Status = status
				return []sdk.SessionUpdate{sdk.UpdatePlan(u.plan...)}
			}
		}
	case event.RunFailed, event.RunCancelled, event.RunInterrupted:
		if u.live {
			return nil // the prompt's answer says it
		}
		var d event.RunFinishedData
		if e.Decode(&d) != nil {
			return nil
		}
		return []sdk.SessionUpdate{sdk.UpdateAgentThoughtText(fmt.Sprintf("(the run %s: %s)", d.Status, d.Detail))}
	}
	return nil
}

// toolArgs are the arguments of the tools the client is shown more of:
// the path a file tool works on, a file's new content or an edit.
type toolArgs struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
	Command    string `json:"command"`
	Pattern    string `json:"pattern"`
	URL        string `json:"url"`
}

// toolStarted is a tool call as it starts: its kind, a title, the file it
// works on, and for a file edit the diff it is about to make. A call
// shown already (it waited for its approval) is updated instead.
func (u *updater) toolStarted(d event.ToolStartedData) sdk.SessionUpdate {
	var a toolArgs
	_ = json.Unmarshal(d.Args, &a)
	path := u.abs(a.Path)
	var locs []sdk.ToolCallLocation
	if path != "" {
		locs = []sdk.ToolCallLocation{{Path: path}}
	}
	diff, isEdit := u.diff(d.CallID, d.Name, path, a)
	if u.s.calls[d.CallID] {
		opts := []sdk.ToolCallUpdateOpt{sdk.WithUpdateStatus(sdk.ToolCallStatusInProgress)}
		if isEdit {
			opts = append(opts, sdk.WithUpdateContent([]sdk.ToolCallContent{diff}))
		}
		return sdk.UpdateToolCall(sdk.ToolCallId(d.CallID), opts...)
	}
	u.s.calls[d.CallID] = true
	opts := []sdk.ToolCallStartOpt{sdk.WithStartKind(toolKind(d.Name)), sdk.WithStartStatus(sdk.ToolCallStatusInProgress), sdk.WithStartRawInput(json.RawMessage(d.Args))}
	if locs != nil {
		opts = append(opts, sdk.WithStartLocations(locs))
	}
	if isEdit {
		opts = append(opts, sdk.WithStartContent([]sdk.ToolCallContent{diff}))
	}
	return sdk.StartToolCall(sdk.ToolCallId(d.CallID), toolTitle(d.Name, a), opts...)
}

// diff is a write_file's or edit_file's change: live, the whole file as
// it is and as it will be; replayed, the file's new content or the edit's
// two texts, the file having changed since.
func (u *updater) diff(callID, tool, path string, a toolArgs) (sdk.ToolCallContent, bool) {
	if path == "" || tool != "write_file" && tool != "edit_file" {
		return sdk.ToolCallContent{}, false
	}
	var old *string
	if u.live {
		if b, err := os.ReadFile(path); err == nil {
			old = new(string(b))
		}
		u.before[callID] = old
	}
	switch {
	case tool == "write_file":
		return diffContent(path, old, a.Content), true
	case old == nil:
		return diffContent(path, &a.OldString, a.NewString), true
	case a.ReplaceAll:
		return diffContent(path, old, strings.ReplaceAll(*old, a.OldString, a.NewString)), true
	}
	return diffContent(path, old, strings.Replace(*old, a.OldString, a.NewString, 1)), true
}

func diffContent(path string, oldText *string, newText string) sdk.ToolCallContent {
	return sdk.ToolCallContent{Diff: &sdk.ToolCallContentDiff{Path: path, OldText: oldText, NewText: newText, Type: "diff"}}
}

// toolCompleted is a tool call's end: completed or failed, with its output.
func (u *updater) toolCompleted(d event.ToolCompletedData) sdk.SessionUpdate {
	status := sdk.ToolCallStatusCompleted
	if !d.OK {
		status = sdk.ToolCallStatusFailed
	}
	out := d.Output
	if out == "" {
		out = d.Error
	}
	delete(u.before, d.CallID)
	return sdk.UpdateToolCall(sdk.ToolCallId(d.CallID), sdk.WithUpdateStatus(status),
		sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock(out))}),
		sdk.WithUpdateRawOutput(map[string]any{"ok": d.OK, "output": d.Output, "error": d.Error}))
}

// abs is a tool's path as the client needs it: absolute, in the session's
// workspace; "" for none.
func (u *updater) abs(path string) string {
	switch {
	case path == "":
		return ""
	case filepath.IsAbs(path):
		return filepath.Clean(path)
	}
	return filepath.Join(u.s.cwd, path)
}

// toolKind is what ACP calls the kind of one of our tools, so the editor
// picks its icon.
func toolKind(name string) sdk.ToolKind {
	switch name {
	case "read_file", "list_files", "skill":
		return sdk.ToolKindRead
	case "write_file", "edit_file":
		return sdk.ToolKindEdit
	case "bash":
		return sdk.ToolKindExecute
	case "grep":
		return sdk.ToolKindSearch
	case "web_fetch", "fetch":
		return sdk.ToolKindFetch
	case tools.AskHumanName, tools.WaitUntilName, tools.WaitForSignalName:
		return sdk.ToolKindThink
	}
	return sdk.ToolKindOther
}

// toolTitle says a tool call in a line: `bash: go test ./...`, `edit_file main.go`.
func toolTitle(name string, a toolArgs) string {
	switch {
	case a.Command != "":
		return name + ": " + console.OneLine(a.Command, 80)
	case a.Path != "":
		return name + " " + a.Path
	case a.Pattern != "":
		return name + " " + console.OneLine(a.Pattern, 80)
	case a.URL != "":
		return name + " " + a.URL
	}
	return name
}

// promptOf is a prompt's content as a run's prompt: its text, the
// resources it links or embeds, named, and its images (PNG, JPEG, GIF or
// WebP), which go with the prompt as --image's do. Audio and binary
// resources are refused.
func promptOf(blocks []sdk.ContentBlock) (string, []event.Image, error) {
	var parts []string
	var images []event.Image
	for _, b := range blocks {
		switch {
		case b.Text != nil:
			parts = append(parts, b.Text.Text)
		case b.ResourceLink != nil:
			parts = append(parts, "@"+b.ResourceLink.Uri)
		case b.Resource != nil && b.Resource.Resource.TextResourceContents != nil:
			r := b.Resource.Resource.TextResourceContents
			parts = append(parts, fmt.Sprintf("<file uri=%q>\n%s\n</file>", r.Uri, r.Text))
		case b.Image != nil:
			name := fmt.Sprintf("image %d", len(images)+1)
			data, err := base64.StdEncoding.DecodeString(b.Image.Data)
			if err != nil {
				return "", nil, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf("%s: its data is not base64: %v", name, err)})
			}
			img, err := vision.Read(name, data)
			if err != nil {
				return "", nil, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
			}
			images = append(images, img)
		default:
			return "", nil, sdk.NewInvalidParams(map[string]any{"error": "only text, resources and images can be a prompt here: agent acp does not take audio or binary resources"})
		}
	}
	text := strings.TrimSpace(strings.Join(parts, "\n"))
	if text == "" {
		return "", nil, sdk.NewInvalidParams(map[string]any{"error": "the prompt has no text: say what to do"})
	}
	return text, images, nil
}

// replay sends the session's recorded events to the client as updates,
// then says how a run it left unfinished goes on.
func (a *agent) replay(ctx context.Context, s *session) error {
	evs, err := a.cfg.DB.ListSessionEvents(ctx, s.id, 0, 0)
	if err != nil {
		return err
	}
	u := a.updater(s, false)
	for _, e := range evs {
		u.show(e)
	}
	r, err := a.unfinished(ctx, s.id)
	if err != nil || r == nil {
		return err
	}
	note := fmt.Sprintf("(run %s was left unfinished, %s; the next prompt goes on with it first, asking here what it still waits for, if anything)", r.ID, r.Status)
	return a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sdk.SessionId(s.id), Update: sdk.UpdateAgentThoughtText(note)})
}
