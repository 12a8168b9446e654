package console

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"agent/event"
	"agent/plan"
	"agent/store"
	"agent/vision"
)

// PrintRuns is the table of `agent runs list`.
func PrintRuns(w io.Writer, runs []store.Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tKIND\tTURNS\tAGE\tPROMPT")
	for _, r := range runs {
		kind, prompt := r.Kind, OneLine(r.Prompt, 60)
		if r.ParentRunID != "" {
			// A task call's sub-run: runs show of its parent has it too.
			kind, prompt = "subagent", "↳ "+ShortID(r.ParentRunID)+": "+OneLine(r.Description, 50)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ShortID(r.ID), r.ShownStatus(), kind, r.Turns, age(r.CreatedAt), prompt)
	}
	return tw.Flush()
}

// PrintRun tells a run's story, as `agent runs show` does: what it is,
// how to go on with it, and its transcript or phases.
func PrintRun(w io.Writer, v store.RunDetail) {
	fmt.Fprintf(w, "run       %s\n", v.ID)
	fmt.Fprintf(w, "status    %s", v.Status)
	if why := orDefault(v.Detail, v.Reason); why != "" && v.Status != event.StatusCompleted {
		fmt.Fprintf(w, " (%s)", why)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "kind      %s\n", v.Kind)
	if v.ParentRunID != "" {
		fmt.Fprintf(w, "parent    %s (subagent for the task %q)\n", v.ParentRunID, v.Task)
	}
	fmt.Fprintf(w, "model     %s\n", v.Model)
	fmt.Fprintf(w, "workspace %s\n", v.Workspace)
	if v.Sandbox != "" {
		fmt.Fprintf(w, "sandbox   %s\n", v.Sandbox)
	}
	fmt.Fprintf(w, "created   %s (%s ago)\n", v.CreatedAt.Local().Format(time.DateTime), age(v.CreatedAt))
	fmt.Fprintf(w, "turns     %d · %d prompt + %d completion tokens\n", v.Turns, v.Usage.PromptTokens, v.Usage.CompletionTokens)
	if v.MaxIterations > 0 {
		fmt.Fprintf(w, "iteration %d of %d, until %q\n", v.Iteration, v.MaxIterations, v.CompletionPromise)
	}
	if v.LeaseOwner != "" && v.LeaseExpiresAt != nil && (v.HolderGone || v.LeaseExpiresAt.After(time.Now())) {
		fmt.Fprintf(w, "lease     held by %s until %s", v.LeaseOwner, v.LeaseExpiresAt.Local().Format(time.TimeOnly))
		if v.HolderGone {
			fmt.Fprintf(w, ", but that process is gone (killed or crashed): 'agent resume %s' takes over at once", ShortID(v.ID))
		}
		fmt.Fprintln(w)
	}
	for _, wait := range v.Waiting {
		fmt.Fprintf(w, "waiting   %s\n", strings.TrimPrefix(WaitLine(wait), "⏸ waiting "))
	}
	// A sub-run is answered and resumed through its parent, which has
	// its waits and continues it.
	via := ShortID(v.ID)
	if v.ParentRunID != "" {
		via = ShortID(v.ParentRunID)
	}
	if len(v.Waiting) > 0 {
		fmt.Fprintf(w, "answer    agent approve, deny or answer %s (see agent waiting); then agent resume %s\n", via, via)
	} else if v.Status != event.StatusCompleted && v.Status != event.StatusCancelled {
		fmt.Fprintf(w, "resume    agent resume %s\n", via)
	}
	if v.PrunedAt != nil {
		fmt.Fprintf(w, "pruned    on %s: message deltas and tool outputs removed (agent prune)\n", v.PrunedAt.Local().Format(time.DateOnly))
	}
	fmt.Fprintf(w, "\nprompt:\n  %s\n", indented(v.Prompt))
	if len(v.Phases) > 0 {
		printPhases(w, v.Phases, v.Learnings)
	}
	if len(v.Subagents) > 0 {
		printSubagents(w, v.Subagents)
	}
	if len(v.Receipts) > 0 {
		fmt.Fprintln(w, "\nside effects:")
		printReceipts(w, "  ", v.Receipts)
	}
	if len(v.Notifications) > 0 {
		fmt.Fprintln(w, "\nnotifications:")
		for _, n := range v.Notifications {
			fmt.Fprintf(w, "  %-9s → %s: %s", n.Event, n.Channel, n.State)
			if n.LastError != "" {
				fmt.Fprintf(w, " (after %d tries: %s)", n.Tries, OneLine(n.LastError, 80))
			}
			fmt.Fprintln(w)
		}
	}
	printTranscript(w, v)
	if v.Result != "" {
		fmt.Fprintf(w, "\nresult:\n  %s\n", indented(v.Result))
	}
}

// printTranscript shows a run's messages, a line each, and each tool
// call's outcome.
func printTranscript(w io.Writer, v store.RunDetail) {
	calls := map[string]store.ToolCallView{}
	for _, tc := range v.ToolCalls {
		calls[tc.CallID] = tc
	}
	if len(v.Messages) > 0 {
		fmt.Fprintln(w, "\ntranscript:")
	}
	iteration := 0
	for _, m := range v.Messages {
		if m.Iteration != iteration && v.MaxIterations > 0 {
			iteration = m.Iteration
			fmt.Fprintf(w, "  ── iteration %d ──\n", iteration)
		}
		if m.Role == "tool" {
			tc := calls[m.ToolCallID]
			mark, content := "✓", m.Content
			if tc.Status == event.StatusFailed {
				mark = "✗"
			}
			if content == store.PrunedOutput && tc.Error != "" {
				content = tc.Error // prune keeps errors
			}
			fmt.Fprintf(w, "  %s %s %s\n", mark, tc.Name, OneLine(content, 100))
			printImages(w, m.Images)
			continue
		}
		if m.Content != "" {
			fmt.Fprintf(w, "  %s: %s\n", m.Role, OneLine(m.Content, 200))
		}
		printImages(w, m.Images)
		for _, call := range m.ToolCalls {
			if calls[call.ID].Status == event.StatusStarted {
				fmt.Fprintf(w, "  … %s %s (started, no result: interrupted)\n", call.Name, Summary(call.Name, json.RawMessage(call.Arguments)))
			}
		}
	}
}

// printImages names the images a message gave the model.
func printImages(w io.Writer, images []event.Image) {
	for _, img := range images {
		fmt.Fprintf(w, "    image %s\n", vision.Describe(img))
	}
}

// printPhases is a harness run's board: each phase with its attempts and
// side effects, then the learnings.
func printPhases(w io.Writer, phases []store.BoardPhase, learnings []string) {
	fmt.Fprintln(w, "\nphases:")
	for _, ph := range phases {
		mark := map[string]string{event.StatusCompleted: "✓", event.StatusFailed: "✗", event.StatusRunning: "…", event.StatusPending: "·"}[ph.Status]
		fmt.Fprintf(w, "  %s %-16s %-9s %s", mark, ph.ID, ph.Status, evidenceText(ph.Evidence))
		if len(ph.DependsOn) > 0 {
			fmt.Fprintf(w, "  after %s", strings.Join(ph.DependsOn, ", "))
		}
		fmt.Fprintln(w)
		for _, a := range ph.Attempts {
			line := fmt.Sprintf("      attempt %d %s", a.Attempt, a.Status)
			if a.DurationMS > 0 {
				line += fmt.Sprintf(" in %.1fs", float64(a.DurationMS)/1000)
			}
			if a.Verification != nil {
				line += " · verification " + a.Verification.Status
			}
			if a.Reason != "" && a.Status != event.StatusPassed {
				line += ": " + OneLine(a.Reason, 120)
			}
			fmt.Fprintln(w, line)
		}
		printReceipts(w, "      ", ph.Receipts)
	}
	if len(learnings) > 0 {
		fmt.Fprintln(w, "\nlearnings:")
		for _, l := range learnings {
			fmt.Fprintf(w, "  - %s\n", OneLine(l, 160))
		}
	}
}

// printSubagents is the tree of a run's sub-runs (its task calls), each
// with its status and what it spent.
func printSubagents(w io.Writer, subs []store.RunView) {
	fmt.Fprintln(w, "\nsubagents:")
	for _, r := range subs {
		mark := map[string]string{event.StatusCompleted: "✓", event.StatusFailed: "✗", event.StatusRunning: "…", event.StatusWaiting: "⏸"}[r.Status]
		fmt.Fprintf(w, "  └ %s %s %-11s %s · %s, %d tokens", orDefault(mark, "·"), ShortID(r.ID), r.Status, OneLine(r.Task, 50),
			plural(r.Turns, "turn"), r.Usage.Total())
		if why := orDefault(r.Detail, r.Reason); why != "" && r.Status != event.StatusCompleted {
			fmt.Fprintf(w, " (%s)", OneLine(why, 80))
		}
		fmt.Fprintln(w)
	}
}

// evidenceText is what a phase must show, in a few words.
func evidenceText(ev plan.Evidence) string {
	switch ev.Type {
	case plan.EvidenceArtifact:
		return "artifact: " + strings.Join(ev.Artifacts, ", ")
	case plan.EvidenceReceipt:
		return "receipt: " + strings.Join(ev.Receipts, ", ")
	case plan.EvidenceHybrid:
		return "hybrid: " + strings.Join(append(append([]string{}, ev.Artifacts...), ev.Receipts...), ", ")
	case plan.EvidenceProgrammatic:
		return "command: " + ev.Command
	}
	return ev.Type
}

// printReceipts lists side effects; an unknown outcome says what to do.
func printReceipts(w io.Writer, indent string, rs []store.BoardReceipt) {
	for _, r := range rs {
		fmt.Fprintf(w, "%sreceipt %s %s %s\n", indent, orDefault(r.Type, r.Tool), r.State, OneLine(unescaped(r.Details), 100))
		if r.Unknown {
			fmt.Fprintf(w, "%s  outcome unknown: the process stopped between recording the intent and the result, so it was not repeated;\n"+
				"%s  check whether it arrived, and resume with --resend-unknown to send it again (key %s)\n", indent, indent, r.Key)
		}
	}
}

// EventLine is one stored event on a line, as `agent runs events` lists
// them: its seq, time, type and what it says; a sub-run's says whose.
func EventLine(e event.Event) string {
	summary := eventSummary(e)
	if e.Subagent != "" {
		summary = "↳ " + ShortID(e.Subagent) + " " + summary // a sub-run's, shown in its parent's stream
	}
	return fmt.Sprintf("%5d  %s  %-22s %s", e.Seq, e.TS.Local().Format("15:04:05.000"), e.Type, summary)
}

// eventSummary is what an event says, in a few words.
func eventSummary(e event.Event) string {
	switch e.Type {
	case event.MessageDelta:
		var d event.MessageDeltaData
		_ = e.Decode(&d)
		return fmt.Sprintf("%q", d.Text)
	case event.MessageCompleted:
		var d event.MessageData
		_ = e.Decode(&d)
		s := d.Role + ": " + OneLine(d.Text, 80)
		for _, tc := range d.ToolCalls {
			s += " [" + tc.Name + "]"
		}
		return s
	case event.ToolStarted:
		var d event.ToolStartedData
		_ = e.Decode(&d)
		return d.Name + " " + Summary(d.Name, d.Args)
	case event.ToolCompleted:
		var d event.ToolCompletedData
		_ = e.Decode(&d)
		if !d.OK {
			return d.Name + " failed: " + OneLine(d.Error, 80)
		}
		return d.Name + " ok"
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		var d event.RunFinishedData
		_ = e.Decode(&d)
		if d.Detail == "" {
			return fmt.Sprintf("exit %d %s", d.ExitCode, d.Reason)
		}
		return fmt.Sprintf("exit %d %s: %s", d.ExitCode, d.Reason, OneLine(d.Detail, 80))
	case event.RunWaiting:
		var d event.RunWaitingData
		_ = e.Decode(&d)
		return strings.TrimPrefix(WaitLine(d), "⏸ ")
	case event.WaitResolved:
		var d event.WaitResolvedData
		_ = e.Decode(&d)
		return strings.TrimSpace(ResolvedLine(d))
	}
	return OneLine(string(e.Data), 100)
}

// PrintNoSessions is `agent sessions list` with none to list: how to
// start one, or, if scheduled jobs made some, how to list those.
func PrintNoSessions(w io.Writer, jobsMadeSome bool) {
	if jobsMadeSome {
		fmt.Fprintln(w, "no sessions but those scheduled jobs created; list them with: agent sessions list --all")
		return
	}
	fmt.Fprintln(w, "no sessions yet; start one with agent chat, from an editor (agent acp), or through a gateway: agent run --gateway \"PROMPT\"")
}

// PrintSessions is the table of `agent sessions list`.
func PrintSessions(w io.Writer, sessions []store.Session) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUNS\tLAST SEQ\tACTIVE\tTITLE")
	for _, s := range sessions {
		title := OneLine(s.Title, 60)
		if s.ParentID != "" {
			title = strings.TrimSpace(title + " (fork of " + ShortID(s.ParentID) + ")")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", ShortID(s.ID), s.Runs, s.LastSeq, age(s.UpdatedAt), title)
	}
	return tw.Flush()
}

// PrintSessionsJSON is `agent sessions list --json`: a session per line.
func PrintSessionsJSON(w io.Writer, sessions []store.Session) error {
	enc := json.NewEncoder(w)
	for i := range sessions {
		if err := enc.Encode(sessions[i].View()); err != nil {
			return err
		}
	}
	return nil
}

// PrintSessionJSON is `agent sessions show --json`: the session and its runs.
func PrintSessionJSON(w io.Writer, s store.Session, runs []store.RunView) error {
	return json.NewEncoder(w).Encode(struct {
		store.SessionView
		RunList []store.RunView `json:"run_list,omitempty"`
	}{s.View(), runs})
}

// PrintDeletedSession says that a session is gone with its runs: its id on
// out, the rest on errw; or, with asJSON, the session as it was, deleted.
func PrintDeletedSession(out, errw io.Writer, s store.Session, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(out).Encode(struct {
			store.SessionView
			Deleted bool `json:"deleted"`
		}{s.View(), true})
	}
	fmt.Fprintln(out, s.ID)
	title := ""
	if s.Title != "" {
		title = fmt.Sprintf(" (%s)", OneLine(s.Title, 60))
	}
	fmt.Fprintf(errw, "deleted session %s%s with %s and their events\n", ShortID(s.ID), title, plural(s.Runs, "run"))
	return nil
}

// PrintSession shows a session, how to follow it, and its runs.
func PrintSession(w io.Writer, s store.Session, runs []store.Run) error {
	fmt.Fprintf(w, "session   %s\n", s.ID)
	if s.Title != "" {
		fmt.Fprintf(w, "title     %s\n", s.Title)
	}
	if s.ParentID != "" {
		fmt.Fprintf(w, "forked    from %s %s\n", s.ParentID, ForkPoint(s.ForkedFromSeq))
	}
	if s.JobID != "" {
		fmt.Fprintf(w, "job       %s (agent jobs runs %s)\n", s.JobID, ShortID(s.JobID))
	}
	fmt.Fprintf(w, "events    %d\n", s.LastSeq)
	fmt.Fprintf(w, "active    %s ago\n", age(s.UpdatedAt))
	fmt.Fprintf(w, "follow    agent attach %s --after-seq %d\n", ShortID(s.ID), s.LastSeq)
	if len(runs) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nruns:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range runs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", ShortID(r.ID), r.ShownStatus(), age(r.CreatedAt), OneLine(r.Prompt, 60))
	}
	return tw.Flush()
}

// ForkPoint says where a fork was taken: seq 0 means the whole conversation.
func ForkPoint(seq int64) string {
	if seq == 0 {
		return "with all its conversation"
	}
	return fmt.Sprintf("at seq %d", seq)
}

// Following says, between events, that a session is replayed after a seq
// and then followed, or, with nothing after that seq, followed.
func (p *Printer) Following(sessionID string, afterSeq, lastSeq int64) {
	if lastSeq > afterSeq {
		p.Note("replaying session %s after seq %d, then following it; Ctrl-C stops", sessionID, afterSeq)
		return
	}
	p.Note("following session %s: nothing after seq %d yet; new events show as they come; Ctrl-C stops", sessionID, afterSeq)
}

// unescaped is JSON as people read it: Go's encoder writes <, > and & as
// \u003c, \u003e and \u0026, which a receipt's "Bob <bob@example.com>"
// should not show.
func unescaped(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
