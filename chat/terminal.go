package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/chzyer/readline"

	"agent/console"
	"agent/event"
	"agent/supervisor"
)

// HistoryFile is where the chat keeps what was typed at its prompt, under
// AGENT_HOME, for ↑ and ↓ in the next chat too.
const HistoryFile = "chat_history"

// Terminal is the chat at a terminal: a line editor (github.com/chzyer/
// readline) reads each message; Enter sends it, Ctrl-J or Alt-Enter adds a
// line, a paste stays one message. Ctrl-C interrupts a turn (resumable: the
// next message goes on with it in context); Ctrl-C twice at an empty
// prompt, Ctrl-D or /quit leaves. The terminal is left as it was found on
// every way out; after kill -9 or a crash, by a guard process.
func (c *Chat) Terminal(ctx context.Context, home string) error {
	if release, err := console.GuardTerminal(os.Stdin, string(pasteOff)); err == nil {
		defer release() // last: after the editor put the terminal back
	} else {
		fmt.Fprintf(c.cfg.Err, "warning: %v; if this chat is killed, run reset\n", err)
	}
	in := newInput(os.Stdin)
	rl, err := readline.NewEx(&readline.Config{
		Prompt:                 c.prompt(),
		HistoryFile:            filepath.Join(home, HistoryFile),
		DisableAutoSaveHistory: true, // the messages, not the answers to questions
		AutoComplete:           completer(),
		Stdin:                  in,
		Stdout:                 c.cfg.Out,
		Stderr:                 c.cfg.Err,
		InterruptPrompt:        "^C",
		EOFPrompt:              "\n",
	})
	if err != nil {
		return fmt.Errorf("chat: the terminal: %w", err)
	}
	t := &terminal{Chat: c, rl: rl, in: in, pending: pendingPrompt{out: c.cfg.Err}}
	fmt.Fprint(c.cfg.Out, string(pasteOn))
	defer func() {
		fmt.Fprint(c.cfg.Out, string(pasteOff))
		rl.Close()
	}()
	ctx, stop := t.signals(ctx)
	defer stop()
	fmt.Fprintf(c.cfg.Err, "%s · Enter sends, Ctrl-J adds a line, /help lists the commands, Ctrl-D leaves\n", c.describe())
	return t.loop(ctx)
}

// terminal is a Chat's state at a terminal.
type terminal struct {
	*Chat
	rl      *readline.Instance
	in      *input
	pending pendingPrompt // what the asker wrote after its last line break

	mu   sync.Mutex
	turn context.CancelCauseFunc // the turn under way, or nil
	quit bool                    // a signal asked to leave once the turn ends
}

func (t *terminal) loop(ctx context.Context) error {
	interrupted := false // the last key at an empty prompt was Ctrl-C
	for {
		t.rl.SetPrompt(t.prompt())
		line, err := t.readline()
		switch {
		case errors.Is(err, readline.ErrInterrupt):
			if strings.TrimSpace(line) == "" {
				if interrupted {
					return t.leave()
				}
				fmt.Fprintln(t.cfg.Err, "(Ctrl-C again or Ctrl-D to leave)")
			}
			interrupted = true
			continue
		case errors.Is(err, io.EOF):
			return t.leave()
		case err != nil:
			return err
		}
		interrupted = false
		if t.leaving() || ctx.Err() != nil {
			return t.leave()
		}
		msg := strings.TrimSpace(strings.ReplaceAll(line, string(newline), "\n"))
		if msg == "" {
			continue
		}
		_ = t.rl.SaveHistory(line)
		if strings.HasPrefix(msg, "/") {
			if done, err := t.command(ctx, msg); done || err != nil {
				return err
			}
			continue
		}
		send := t.send
		if harnessLike(msg) {
			yes, err := t.offerHarness(ctx)
			if err != nil {
				continue
			}
			if yes {
				send = t.harness
			}
		}
		if err := send(ctx, msg); err != nil {
			return err
		}
		if t.leaving() {
			return t.leave()
		}
	}
}

// send runs one message as a turn that Ctrl-C (SIGINT) interrupts.
func (t *terminal) send(ctx context.Context, msg string) error {
	return t.turnWith(ctx, func(ctx context.Context, asker *TerminalAsker) (Turn, error) { return t.Send(ctx, msg, asker) })
}

// turnWith runs a turn (a message, or a waiting run answered) that Ctrl-C
// (SIGINT) interrupts, asking inline at the editor.
func (t *terminal) turnWith(ctx context.Context, turnFn func(context.Context, *TerminalAsker) (Turn, error)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t.mu.Lock()
	t.turn = cancel
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.turn = nil
		t.mu.Unlock()
	}()
	asker := &TerminalAsker{lines: console.LinesFrom(t.question), out: &t.pending}
	turn, err := turnFn(ctx, asker)
	if errors.As(err, new(*BusySessionError)) {
		fmt.Fprintln(t.cfg.Err, err)
		return nil
	}
	if err != nil {
		return err
	}
	if turn.End.Status == event.StatusInterrupted && !t.leaving() {
		fmt.Fprintln(t.cfg.Err, "the next message goes on with it in context")
	}
	return nil
}

// question reads an answer to a run's question or approval at the editor,
// its prompt what the asker wrote last; another channel's answer (ctx)
// ends it, and Ctrl-C interrupts the turn.
func (t *terminal) question(ctx context.Context) (string, error) {
	t.rl.SetPrompt(t.pending.take())
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		line, err := t.readline()
		got <- read{line, err}
	}()
	select {
	case r := <-got:
		if errors.Is(r.err, readline.ErrInterrupt) {
			t.interrupt()
			return "", context.Canceled
		}
		return strings.TrimSpace(r.line), r.err
	case <-ctx.Done():
		t.in.inject([]byte{readline.CharInterrupt}) // ends the pending read
		<-got
		return "", context.Cause(ctx)
	}
}

// readline is the editor's read, the terminal raw meanwhile.
func (t *terminal) readline() (string, error) {
	t.in.editing.Store(true)
	defer t.in.editing.Store(false)
	return t.rl.Readline()
}

// interrupt stops the turn under way, resumably.
func (t *terminal) interrupt() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.turn != nil {
		t.turn(supervisor.Interrupt(""))
	}
}

func (t *terminal) leaving() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.quit
}

// leave says how to come back.
func (t *terminal) leave() error {
	if id := t.SessionID(); id != "" {
		fmt.Fprintf(t.cfg.Err, "session %s kept; go on with: agent chat --continue%s\n", console.ShortID(id), t.where())
	}
	return nil
}

// signals: SIGINT interrupts the turn under way (at the prompt the editor
// reads Ctrl-C itself); SIGTERM and SIGHUP interrupt it and leave, or at
// the prompt leave at once, restoring the terminal.
func (t *terminal) signals(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				t.mu.Lock()
				busy := t.turn != nil
				if s != os.Interrupt {
					t.quit = true
				}
				t.mu.Unlock()
				switch {
				case busy:
					t.interrupt()
				case s == os.Interrupt: // Ctrl-C as a turn ends: the prompt's
					t.in.inject([]byte{readline.CharInterrupt})
				default:
					cancel()
					t.in.inject([]byte{readline.CharEnter}) // ends the prompt's read
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sig)
		close(done)
		cancel()
	}
}

// prompt shows the session and the model.
func (c *Chat) prompt() string {
	return fmt.Sprintf("%s › ", c.describe())
}

func (c *Chat) describe() string {
	session := "new session"
	if id := c.SessionID(); id != "" {
		session = "session " + console.ShortID(id)
	}
	model := c.cfg.Options.Model
	if c.cfg.Gateway != nil {
		// The gateway fills in the model unless --model says it.
		model = strings.TrimSpace(model + " via " + strings.TrimPrefix(c.cfg.GatewayAddr, "http://"))
	}
	return fmt.Sprintf("%s · %s", session, model)
}

// pendingPrompt holds what an asker writes after its last line break: the
// prompt of the editor's read of the answer.
type pendingPrompt struct {
	mu   sync.Mutex
	out  io.Writer
	tail string
}

func (p *pendingPrompt) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.tail + string(b)
	i := strings.LastIndexByte(s, '\n')
	if i >= 0 {
		if _, err := io.WriteString(p.out, s[:i+1]); err != nil {
			return 0, err
		}
	}
	p.tail = s[i+1:]
	return len(b), nil
}

func (p *pendingPrompt) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.tail
	p.tail = ""
	return s
}
