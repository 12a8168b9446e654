package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"agent/store"
)

func sessionsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON: one object per line for lists, one object otherwise"}
	return &cli.Command{
		Name:  "sessions",
		Usage: "inspect and fork gateway sessions",
		Description: "Sessions live in $AGENT_HOME/agent.db, written by 'agent gateway'. A run in a session sees the\n" +
			"session's earlier messages. SESSION may be a unique prefix.\n\n" +
			"Examples:\n" +
			"  agent sessions list\n" +
			"  agent sessions list --all          # with the sessions scheduled jobs' ticks created\n" +
			"  agent sessions show 3f2a\n" +
			"  agent sessions fork 3f2a --seq 40     # a new session with the conversation up to seq 40\n" +
			"  agent run --gateway --session NEW_ID \"try another approach\"",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "list sessions, most recently active first", Flags: []cli.Flag{jsonFlag,
				&cli.IntFlag{Name: "limit", Value: 20, Usage: "show at most N sessions"},
				&cli.BoolFlag{Name: "all", Usage: "also list the sessions scheduled jobs' ticks created"}}, Action: sessionsListAction},
			{Name: "show", Usage: "show a session and its runs", ArgsUsage: "SESSION", Flags: []cli.Flag{jsonFlag}, Action: sessionsShowAction},
			{Name: "fork", Usage: "start a new session from a session's conversation up to a seq", ArgsUsage: "SESSION",
				Flags: []cli.Flag{jsonFlag,
					&cli.Int64Flag{Name: "seq", Usage: "keep the conversation up to this event seq", DefaultText: "all of it"},
					&cli.StringFlag{Name: "title", Usage: "the new session's title"}},
				Action: sessionsForkAction},
		},
	}
}

// sessionView is the JSON shape of a session for scripts.
type sessionView struct {
	ID            string    `json:"id"`
	Title         string    `json:"title,omitempty"`
	ParentID      string    `json:"parent_id,omitempty"`
	ForkedFromSeq int64     `json:"forked_from_seq,omitempty"`
	JobID         string    `json:"job_id,omitempty"`
	LastSeq       int64     `json:"last_seq"`
	Runs          int       `json:"runs"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	RunList       []runView `json:"run_list,omitempty"`
}

func newSessionView(s store.Session) sessionView {
	return sessionView{ID: s.ID, Title: s.Title, ParentID: s.ParentID, ForkedFromSeq: s.ForkedFromSeq, JobID: s.JobID,
		LastSeq: s.LastSeq, Runs: s.Runs, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func sessionsListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("sessions list takes no arguments")
	}
	db, err := loadStore()
	if err != nil {
		return err
	}
	defer db.Close()
	sessions, err := db.ListSessions(c.Context, c.Int("limit"), c.Bool("all"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, s := range sessions {
			if err := enc.Encode(newSessionView(s)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(sessions) == 0 {
		if !c.Bool("all") {
			if jobs, err := db.ListSessions(c.Context, 1, true); err == nil && len(jobs) > 0 {
				fmt.Fprintln(c.App.ErrWriter, "no sessions but those scheduled jobs created; list them with: agent sessions list --all")
				return nil
			}
		}
		fmt.Fprintln(c.App.ErrWriter, "no sessions yet; start 'agent gateway', then: agent run --gateway \"PROMPT\"")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUNS\tLAST SEQ\tACTIVE\tTITLE")
	for _, s := range sessions {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", shortID(s.ID), s.Runs, s.LastSeq, age(s.UpdatedAt), oneLine(s.Title, 60))
	}
	return tw.Flush()
}

func sessionsShowAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("sessions show needs exactly one SESSION")
	}
	db, err := loadStore()
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := db.GetSession(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	runs, err := db.ListSessionRuns(c.Context, s.ID)
	if err != nil {
		return err
	}
	v := newSessionView(*s)
	for _, r := range runs {
		v.RunList = append(v.RunList, newRunView(r))
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(v)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "session   %s\n", v.ID)
	if v.Title != "" {
		fmt.Fprintf(w, "title     %s\n", v.Title)
	}
	if v.ParentID != "" {
		fmt.Fprintf(w, "forked    from %s %s\n", v.ParentID, forkPoint(v.ForkedFromSeq))
	}
	if v.JobID != "" {
		fmt.Fprintf(w, "job       %s (agent jobs runs %s)\n", v.JobID, shortID(v.JobID))
	}
	fmt.Fprintf(w, "events    %d\n", v.LastSeq)
	fmt.Fprintf(w, "active    %s ago\n", age(v.UpdatedAt))
	fmt.Fprintf(w, "follow    agent attach %s --after-seq %d\n", shortID(v.ID), v.LastSeq)
	if len(runs) > 0 {
		fmt.Fprintln(w, "\nruns:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range runs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", shortID(r.ID), r.ShownStatus(), age(r.CreatedAt), oneLine(r.Prompt, 60))
		}
		return tw.Flush()
	}
	return nil
}

func sessionsForkAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("sessions fork needs exactly one SESSION")
	}
	if c.Int64("seq") < 0 {
		return usageErrorf("--seq must not be negative")
	}
	db, err := loadStore()
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := db.ForkSession(c.Context, c.Args().First(), uuid.NewString(), c.String("title"), c.Int64("seq"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(newSessionView(*s))
	}
	fmt.Fprintf(c.App.Writer, "%s\n", s.ID)
	fmt.Fprintf(c.App.ErrWriter, "forked session %s %s; continue it with: agent run --gateway --session %s \"PROMPT\"\n",
		s.ParentID, forkPoint(s.ForkedFromSeq), shortID(s.ID))
	return nil
}

// forkPoint says where a fork was taken: seq 0 means the whole conversation.
func forkPoint(seq int64) string {
	if seq == 0 {
		return "with all its conversation"
	}
	return fmt.Sprintf("at seq %d", seq)
}
