package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/event"
	"agent/store"
	"agent/supervisor"
)

func runsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON: one object per line for lists, one object otherwise"}
	return &cli.Command{
		Name:  "runs",
		Usage: "inspect persisted runs",
		Description: "Every run is stored in $AGENT_HOME/agent.db as it happens. RUN_ID may be a unique prefix.\n\n" +
			"Examples:\n" +
			"  agent runs list\n" +
			"  agent runs show 3f2a\n" +
			"  agent runs events 3f2a --follow --json",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list recent runs, newest first",
				Flags:  []cli.Flag{jsonFlag, &cli.IntFlag{Name: "limit", Value: 20, Usage: "show at most N runs"}},
				Action: runsListAction,
			},
			{
				Name:      "show",
				Usage:     "show one run: status, result and transcript",
				ArgsUsage: "RUN_ID",
				Flags:     []cli.Flag{jsonFlag},
				Action:    runsShowAction,
			},
			{
				Name:      "events",
				Usage:     "print a run's events",
				ArgsUsage: "RUN_ID",
				Flags: []cli.Flag{
					jsonFlag,
					&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until the run ends"},
					&cli.Int64Flag{Name: "after-seq", Usage: "start after this seq"},
				},
				Action: runsEventsAction,
			},
		},
	}
}

// loadStore reads the settings and opens the store.
func loadStore() (*store.DB, error) {
	settings, err := config.Load()
	if err != nil {
		return nil, err
	}
	return openStore(settings)
}

// openRun opens the store and finds the run named by the only argument.
func openRun(c *cli.Context, command string) (*store.DB, *store.Run, error) {
	if c.Args().Len() != 1 {
		return nil, nil, usageErrorf("%s needs exactly one RUN_ID; see 'agent runs list'", command)
	}
	db, err := loadStore()
	if err != nil {
		return nil, nil, err
	}
	r, err := db.GetRun(c.Context, c.Args().First())
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, r, nil
}

// runView is the JSON shape of a run for scripts.
type runView struct {
	ID                string               `json:"id"`
	Kind              string               `json:"kind"`
	SessionID         string               `json:"session_id,omitempty"`
	Status            string               `json:"status"`
	Prompt            string               `json:"prompt"`
	Workspace         string               `json:"workspace"`
	Model             string               `json:"model"`
	Sandbox           string               `json:"sandbox,omitempty"` // e.g. "workspace-write, network off"
	Result            string               `json:"result,omitempty"`
	Reason            string               `json:"reason,omitempty"`
	Detail            string               `json:"detail,omitempty"`
	ExitCode          int                  `json:"exit_code"`
	Turns             int                  `json:"turns"`
	Usage             event.Usage          `json:"usage"`
	Iteration         int                  `json:"iteration,omitempty"`
	MaxIterations     int                  `json:"max_iterations,omitempty"`
	CompletionPromise string               `json:"completion_promise,omitempty"`
	LeaseOwner        string               `json:"lease_owner,omitempty"`
	LeaseExpiresAt    *time.Time           `json:"lease_expires_at,omitempty"`
	LeaseHolderGone   bool                 `json:"lease_holder_gone,omitempty"` // a process of this machine that is gone: resume takes over at once
	CreatedAt         time.Time            `json:"created_at"`
	FinishedAt        *time.Time           `json:"finished_at,omitempty"`
	PrunedAt          *time.Time           `json:"pruned_at,omitempty"` // agent prune removed its deltas and tool outputs
	Phases            []store.BoardPhase   `json:"phases,omitempty"`
	Receipts          []store.BoardReceipt `json:"receipts,omitempty"`
	Learnings         []string             `json:"learnings,omitempty"`
	Messages          []messageView        `json:"messages,omitempty"`
	ToolCalls         []toolCallView       `json:"tool_calls,omitempty"`
	Config            json.RawMessage      `json:"config,omitempty"`
}

type messageView struct {
	Iteration  int              `json:"iteration,omitempty"`
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolCalls  []event.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type toolCallView struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args,omitempty"`
	Status    string          `json:"status"`
	Error     string          `json:"error,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

func newRunView(r store.Run) runView {
	v := runView{
		ID: r.ID, Kind: r.Kind, SessionID: r.SessionID, Status: r.ShownStatus(), Prompt: r.Prompt,
		Workspace: r.Workspace, Model: r.Model, Result: r.Result, Reason: r.Reason, Detail: r.Detail, ExitCode: r.ExitCode,
		Turns: r.Turns, Usage: r.Usage, Iteration: r.IterationCount, MaxIterations: r.MaxIterations,
		CompletionPromise: r.CompletionPromise, CreatedAt: r.CreatedAt,
	}
	if r.Status == event.StatusRunning && r.LeaseOwner != "" {
		v.LeaseOwner = r.LeaseOwner
		v.LeaseExpiresAt = timePtr(r.LeaseExpiresAt)
	}
	v.FinishedAt = timePtr(r.FinishedAt)
	v.PrunedAt = timePtr(r.PrunedAt)
	return v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func runsListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("runs list takes no arguments")
	}
	db, err := loadStore()
	if err != nil {
		return err
	}
	defer db.Close()
	runs, err := db.ListRuns(c.Context, c.Int("limit"))
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		for _, r := range runs {
			if err := enc.Encode(newRunView(r)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(runs) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no runs yet; start one with: agent run \"PROMPT\"")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tKIND\tTURNS\tAGE\tPROMPT")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", shortID(r.ID), r.ShownStatus(), r.Kind, r.Turns, age(r.CreatedAt), oneLine(r.Prompt, 60))
	}
	return tw.Flush()
}

func runsShowAction(c *cli.Context) error {
	db, r, err := openRun(c, "runs show")
	if err != nil {
		return err
	}
	defer db.Close()
	msgs, err := db.Messages(c.Context, r.ID)
	if err != nil {
		return err
	}
	calls, err := db.ToolCalls(c.Context, r.ID)
	if err != nil {
		return err
	}
	v := newRunView(*r)
	v.Config = r.Config
	if o, err := supervisor.DecodeOptions(r); err == nil {
		v.Sandbox = o.SandboxSummary()
	}
	v.LeaseHolderGone = v.LeaseOwner != "" && db.OwnerDead != nil && db.OwnerDead(v.LeaseOwner)
	if r.Kind == store.KindHarness {
		// A harness run's messages come from many phases; the plan state
		// tells its story.
		msgs, calls = nil, nil
		v.Phases, v.Learnings, err = harnessView(c.Context, db, r)
		if err != nil {
			return err
		}
	}
	if r.Kind != store.KindHarness {
		receipts, err := db.Receipts(c.Context, r.ID, "")
		if err != nil {
			return err
		}
		if len(receipts) > 0 {
			v.Receipts = store.BoardReceipts(r, receipts)
		}
	}
	for _, m := range msgs {
		v.Messages = append(v.Messages, messageView{Iteration: m.Iteration, Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID})
	}
	for _, tc := range calls {
		v.ToolCalls = append(v.ToolCalls, toolCallView{CallID: tc.CallID, Name: tc.Name, Args: tc.Args, Status: tc.Status, Error: tc.Error, Truncated: tc.Truncated})
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(v)
	}
	printRun(c.App.Writer, v)
	return nil
}

func printRun(w io.Writer, v runView) {
	fmt.Fprintf(w, "run       %s\n", v.ID)
	fmt.Fprintf(w, "status    %s", v.Status)
	if why := config.Pick(v.Detail, v.Reason); why != "" && v.Status != event.StatusCompleted {
		fmt.Fprintf(w, " (%s)", why)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "kind      %s\n", v.Kind)
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
	if v.LeaseOwner != "" && v.LeaseExpiresAt != nil && (v.LeaseHolderGone || v.LeaseExpiresAt.After(time.Now())) {
		fmt.Fprintf(w, "lease     held by %s until %s", v.LeaseOwner, v.LeaseExpiresAt.Local().Format(time.TimeOnly))
		if v.LeaseHolderGone {
			fmt.Fprintf(w, ", but that process is gone (killed or crashed): 'agent resume %s' takes over at once", shortID(v.ID))
		}
		fmt.Fprintln(w)
	}
	if v.Status != event.StatusCompleted && v.Status != event.StatusCancelled {
		fmt.Fprintf(w, "resume    agent resume %s\n", shortID(v.ID))
	}
	if v.PrunedAt != nil {
		fmt.Fprintf(w, "pruned    on %s: message deltas and tool outputs removed (agent prune)\n", v.PrunedAt.Local().Format(time.DateOnly))
	}
	fmt.Fprintf(w, "\nprompt:\n  %s\n", indent(v.Prompt))
	if len(v.Phases) > 0 {
		printPhases(w, v.Phases, v.Learnings)
	}
	if len(v.Receipts) > 0 {
		fmt.Fprintln(w, "\nside effects:")
		printReceipts(w, "  ", v.Receipts)
	}
	status := map[string]toolCallView{}
	for _, tc := range v.ToolCalls {
		status[tc.CallID] = tc
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
		switch m.Role {
		case "tool":
			tc := status[m.ToolCallID]
			mark, content := "✓", m.Content
			if tc.Status == "failed" {
				mark = "✗"
			}
			if content == store.PrunedOutput && tc.Error != "" {
				content = tc.Error // prune keeps errors
			}
			fmt.Fprintf(w, "  %s %s %s\n", mark, tc.Name, oneLine(content, 100))
		default:
			if m.Content != "" {
				fmt.Fprintf(w, "  %s: %s\n", m.Role, oneLine(m.Content, 200))
			}
			for _, call := range m.ToolCalls {
				if tc := status[call.ID]; tc.Status == "started" {
					fmt.Fprintf(w, "  … %s %s (started, no result: interrupted)\n", call.Name, console.Summary(call.Name, json.RawMessage(call.Arguments)))
				}
			}
		}
	}
	if v.Result != "" {
		fmt.Fprintf(w, "\nresult:\n  %s\n", indent(v.Result))
	}
}

func runsEventsAction(c *cli.Context) error {
	db, r, err := openRun(c, "runs events")
	if err != nil {
		return err
	}
	defer db.Close()
	after := c.Int64("after-seq")
	enc := event.NewEncoder(c.App.Writer)
	for {
		evs, err := db.ListEvents(c.Context, r.ID, after, 1000)
		if err != nil {
			return err
		}
		ended := false
		for _, e := range evs {
			after = e.Seq
			if c.Bool("json") {
				if err := enc.Encode(e); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(c.App.Writer, "%5d  %s  %-22s %s\n", e.Seq, e.TS.Local().Format("15:04:05.000"), e.Type, eventSummary(e))
			}
			ended = ended || event.IsTerminal(e.Type)
		}
		if len(evs) == 1000 {
			continue
		}
		if !c.Bool("follow") || ended {
			return nil
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// eventSummary is the human one-liner of an event in 'runs events'.
func eventSummary(e event.Event) string {
	switch e.Type {
	case event.MessageDelta:
		var d event.MessageDeltaData
		_ = e.Decode(&d)
		return fmt.Sprintf("%q", d.Text)
	case event.MessageCompleted:
		var d event.MessageData
		_ = e.Decode(&d)
		s := d.Role + ": " + oneLine(d.Text, 80)
		for _, tc := range d.ToolCalls {
			s += " [" + tc.Name + "]"
		}
		return s
	case event.ToolStarted:
		var d event.ToolStartedData
		_ = e.Decode(&d)
		return d.Name + " " + console.Summary(d.Name, d.Args)
	case event.ToolCompleted:
		var d event.ToolCompletedData
		_ = e.Decode(&d)
		if !d.OK {
			return d.Name + " failed: " + oneLine(d.Error, 80)
		}
		return d.Name + " ok"
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		var d event.RunFinishedData
		_ = e.Decode(&d)
		return fmt.Sprintf("exit %d %s: %s", d.ExitCode, d.Reason, oneLine(d.Detail, 80))
	}
	return oneLine(string(e.Data), 100)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}
