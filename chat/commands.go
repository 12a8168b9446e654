package chat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/chzyer/readline"

	"agent/config"
	"agent/console"
	"agent/event"
	"agent/store"
	"agent/supervisor"
	"agent/vision"
)

// commands are the chat's slash commands, in the order /help lists them.
var commands = []struct {
	name, args, help string
}{
	{"/help", "", "this list"},
	{"/new", "", "start a new session (the next message is its first)"},
	{"/sessions", "", "the sessions (local, or the gateway's), most recently active first"},
	{"/resume", "[ID]", "go on in a session: ID, or the one last active"},
	{"/model", "[NAME]", "say the model, or use NAME from the next message on"},
	{"/cost", "", "tokens and USD the session has spent so far"},
	{"/compact", "", "summarise the conversation so far at the start of the next message, to save context"},
	{"/fork", "[SEQ]", "go on in a new session with this one's conversation (up to event SEQ)"},
	{"/rewind", "[N]", "put back the files the last run changed (from its checkpoint N on)"},
	{"/image", "PATH", "give the model this image (PNG, JPEG, GIF or WebP) with the next message"},
	{"/harness", "REQUEST", "run REQUEST as a harness here: a plan to confirm, then verified phases on the board"},
	{"/approve", "", "allow the call the session's run waits for, and go on with it"},
	{"/deny", "[REASON]", "refuse it (the model is told REASON), and go on"},
	{"/quit", "", "leave (as Ctrl-D); agent chat --continue comes back"},
}

// completer completes the commands' names with Tab.
func completer() readline.AutoCompleter {
	var items []readline.PrefixCompleterInterface
	for _, c := range commands {
		items = append(items, readline.PcItem(c.name))
	}
	return readline.NewPrefixCompleter(items...)
}

// command runs a slash command; done is true when it leaves the chat.
func (t *terminal) command(ctx context.Context, line string) (done bool, err error) {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	out := t.cfg.Err
	switch name {
	case "/help":
		for _, c := range commands {
			fmt.Fprintf(out, "  %-18s %s\n", strings.TrimSpace(c.name+" "+c.args), c.help)
		}
		fmt.Fprintln(out, "  Enter sends; Ctrl-J or Alt-Enter adds a line; ↑/↓ the history; Ctrl-C interrupts a turn; Ctrl-D leaves")
	case "/new":
		t.session = nil
		fmt.Fprintln(out, "a new session starts with the next message")
	case "/sessions":
		return false, t.listSessions(ctx)
	case "/resume":
		s, err := t.GoOn(ctx, arg)
		if err != nil {
			fmt.Fprintln(out, err) // not found, ambiguous, not this chat's kind: said, and the chat goes on
			return false, nil
		}
		fmt.Fprintf(out, "going on in session %s: %s (%d runs)\n", console.ShortID(s.ID), s.Title, s.Runs)
	case "/model":
		if arg == "" {
			fmt.Fprintf(out, "model %s\n", t.cfg.Options.Model)
			return false, nil
		}
		o := t.cfg.Options
		o.Model = arg
		if o, _, err = t.cfg.Supervisor.Prepare(o, t.cfg.Workspace); err != nil {
			fmt.Fprintf(out, "model %s: %v\n", arg, err)
			return false, nil
		}
		t.cfg.Options = o
		fmt.Fprintf(out, "model %s from the next message on\n", o.Model)
	case "/cost":
		return false, t.cost(ctx)
	case "/compact":
		if t.SessionID() == "" {
			fmt.Fprintln(out, "nothing to compact: the session has no message yet")
			return false, nil
		}
		t.CompactNext()
		fmt.Fprintln(out, "the conversation so far is summarised when your next message starts (context.compacted)")
	case "/fork":
		seq, perr := strconv.ParseInt(config.Pick(arg, "0"), 10, 64)
		if perr != nil || seq < 0 {
			fmt.Fprintf(out, "/fork takes an event seq (agent sessions show lists them), not %q\n", arg)
			return false, nil
		}
		from := t.SessionID()
		if err := t.Fork(ctx, seq); err != nil {
			fmt.Fprintln(out, err)
			return false, nil
		}
		fmt.Fprintf(out, "session %s, forked from %s; the next message goes there\n", console.ShortID(t.SessionID()), console.ShortID(from))
	case "/rewind":
		to, perr := strconv.Atoi(config.Pick(arg, "1"))
		if perr != nil || to < 1 {
			fmt.Fprintf(out, "/rewind takes a checkpoint number, 1 or more (agent rewind RUN_ID --list), not %q\n", arg)
			return false, nil
		}
		rep, err := t.Rewind(ctx, to)
		if err != nil {
			fmt.Fprintln(out, err) // a range, a busy run: said, and the chat goes on
			return false, nil
		}
		console.PrintRewind(out, rep)
	case "/image":
		if arg == "" {
			fmt.Fprintln(out, "/image needs the PATH of a PNG, JPEG, GIF or WebP image: /image screenshot.png")
			return false, nil
		}
		if err := t.cfg.Options.AttachImages(arg); err != nil {
			fmt.Fprintf(out, "/image: %v\n", err) // said, and the chat goes on
			return false, nil
		}
		fmt.Fprintf(out, "%s goes with the next message\n", vision.Describe(t.cfg.Options.Images[len(t.cfg.Options.Images)-1]))
	case "/harness":
		if arg == "" {
			fmt.Fprintln(out, "/harness needs a REQUEST: /harness make every test pass")
			return false, nil
		}
		return false, t.harness(ctx, arg)
	case "/approve", "/deny":
		d := supervisor.Decision{Decide: supervisor.DecideAllow, Via: event.ViaTerminal, Who: os.Getenv("USER")}
		if name == "/deny" {
			d.Decide, d.Text = supervisor.DecideDeny, arg
		}
		err := t.turnWith(ctx, func(ctx context.Context, asker *TerminalAsker) (Turn, error) { return t.Answer(ctx, d, asker) })
		if errors.Is(err, ErrNothingWaits) || errors.As(err, new(*store.AnsweredError)) {
			fmt.Fprintln(out, err)
			return false, nil
		}
		return false, err
	case "/quit", "/exit":
		return true, t.leave()
	default:
		names := make([]string, len(commands))
		for i, c := range commands {
			names[i] = c.name
		}
		fmt.Fprintf(out, "unknown command %s; the commands are %s\n", name, strings.Join(names, " "))
	}
	return false, nil
}

func (t *terminal) listSessions(ctx context.Context) error {
	ss, err := t.Sessions(ctx)
	if err != nil {
		return err
	}
	for _, s := range ss {
		mark := " "
		if s.ID == t.SessionID() {
			mark = "*"
		}
		fmt.Fprintf(t.cfg.Err, "%s %s  %-40s  %d runs\n", mark, console.ShortID(s.ID), console.OneLine(s.Title, 40), s.Runs)
	}
	if len(ss) == 0 {
		fmt.Fprintln(t.cfg.Err, "no session yet")
	}
	return nil
}

// cost adds up the session's runs' usage.
func (t *terminal) cost(ctx context.Context) error {
	if t.session == nil {
		fmt.Fprintln(t.cfg.Err, "nothing spent: the session has no message yet")
		return nil
	}
	runs, err := t.Runs(ctx)
	if err != nil {
		return err
	}
	var prompt, completion int
	var usd float64
	for _, r := range runs {
		prompt += r.Usage.PromptTokens
		completion += r.Usage.CompletionTokens
		usd += r.Usage.CostUSD
	}
	price := "USD unknown (no [prices] for the model in config.toml)"
	if usd > 0 {
		price = fmt.Sprintf("$%.4f", usd)
	}
	fmt.Fprintf(t.cfg.Err, "session %s: %d runs, %d tokens (%d prompt, %d completion), %s\n",
		console.ShortID(t.session.ID), len(runs), prompt+completion, prompt, completion, price)
	return nil
}

// harness runs request as a harness run of the session, asking at the
// editor whether to run its plan.
func (t *terminal) harness(ctx context.Context, request string) error {
	return t.turnWith(ctx, func(ctx context.Context, asker *TerminalAsker) (Turn, error) {
		return t.Harness(ctx, request, asker, func(mission string) bool { return t.confirm(ctx, mission) })
	})
}

// harnessLike reports whether a message looks like a long task of several
// parts, which a harness of verified phases may do better than one run:
// three list items or more (numbered or bulleted lines), or a long
// message (60 words or more) that orders its steps. Only a guess: the
// person is offered it, and says yes or no.
func harnessLike(msg string) bool {
	items := 0
	for _, line := range strings.Split(msg, "\n") {
		if listItem().MatchString(line) {
			items++
		}
	}
	if items >= 3 {
		return true
	}
	if len(strings.Fields(msg)) < 60 {
		return false
	}
	lower := strings.ToLower(msg)
	steps := 0
	for _, w := range []string{" then ", "after that", "finally", "first,", "second,", "next,"} {
		steps += strings.Count(lower, w)
	}
	return steps >= 2
}

var listItem = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*(\d+[.)]|[-*•])\s+\S`) })

// offerHarness asks at the editor whether to run a harness-like message
// as a harness: no unless the person says yes. Ctrl-C (an error) sends
// neither: the message is ↑ in the history.
func (t *terminal) offerHarness(ctx context.Context) (bool, error) {
	fmt.Fprint(&t.pending, "Run this as a harness of verified phases? [y/N] ")
	answer, err := t.question(ctx)
	answer = strings.ToLower(answer)
	return answer == "y" || answer == "yes", err
}

// confirm asks at the editor whether to run the plan written to mission:
// yes unless the person says otherwise, as agent harness asks.
func (t *terminal) confirm(ctx context.Context, mission string) bool {
	fmt.Fprintf(&t.pending, "the plan is in %s\nRun this plan? [Y/n] ", mission)
	answer, err := t.question(ctx)
	answer = strings.ToLower(answer)
	return err == nil && (answer == "" || answer == "y" || answer == "yes")
}
