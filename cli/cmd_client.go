package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/console"
	"agent/event"
	"agent/gateway"
	"agent/supervisor"
)

// defaultGateway is where the CLI looks for a gateway when --gateway has no
// value and AGENT_GATEWAY is unset.
const defaultGateway = "http://127.0.0.1:7420"

// gatewayDefaultValue stands for a bare --gateway (see normalizeArgs).
const gatewayDefaultValue = "default"

// gatewayAddress resolves the gateway to talk to: the flag's value, else
// AGENT_GATEWAY, else the default. ok is false when neither the flag nor
// the environment asks for a gateway.
func gatewayAddress(c *cli.Context) (addr string, ok bool) {
	v := c.String("gateway")
	env := os.Getenv("AGENT_GATEWAY")
	switch {
	case v != "" && v != gatewayDefaultValue:
		return v, true
	case env != "":
		return env, true
	case v == gatewayDefaultValue:
		return defaultGateway, true
	}
	return "", false
}

// clientToken is the token this client presents to a gateway.
func clientToken() (string, error) {
	home, err := config.Home()
	if err != nil {
		return "", err
	}
	t, err := gateway.ClientToken(home)
	if errors.Is(err, gateway.ErrNoToken) {
		return "", usageErrorf("no gateway token: %s", strings.TrimSuffix(err.Error(), ": "+gateway.ErrNoToken.Error()))
	}
	return t, err
}

// dialGateway connects and authenticates; events go to onEvent.
func dialGateway(ctx context.Context, addr string, onEvent func(gateway.EventFrame), onError func(gateway.ErrorFrame)) (*gateway.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	token, err := clientToken()
	if err != nil {
		// Without a token, most likely no gateway was ever started: if
		// nothing answers, say that, which is what there is to fix first.
		if u, perr := url.Parse(gateway.WebSocketURL(addr)); perr == nil && u.Host != "" {
			var d net.Dialer
			conn, derr := d.DialContext(dctx, "tcp", u.Host)
			if derr != nil {
				if msg := noGateway(addr, derr); msg != "" {
					return nil, &gatewayError{err: derr, msg: msg}
				}
			} else {
				conn.Close()
			}
		}
		return nil, err
	}
	gc, err := gateway.Dial(dctx, addr, gateway.ClientOptions{Token: token, OnEvent: onEvent, OnError: onError})
	if err != nil {
		return nil, &gatewayError{err: err, msg: noGateway(addr, err)}
	}
	return gc, nil
}

// noGateway says, in one line, that nothing answers at addr and how to
// start a gateway there; "" when err is not about reaching one (a
// gateway, or something else, answered).
func noGateway(addr string, err error) string {
	var answered *gateway.DialError
	if errors.As(err, &answered) {
		return ""
	}
	start := "agent gateway"
	if u, perr := url.Parse(gateway.WebSocketURL(addr)); perr == nil && u.Host != "" && u.Host != gateway.DefaultListen {
		start += " --listen " + u.Host
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("no gateway answers at %s (connection refused); start one with: %s", addr, start)
	case errors.As(err, &dns):
		return fmt.Sprintf("no gateway at %s: host %s not found", addr, dns.Name)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no gateway answered at %s within %s; is one running there (%s)?", addr, dialTimeout, start)
	}
	return ""
}

// dialTimeout bounds connecting to the gateway, its handshake included.
const dialTimeout = 10 * time.Second

// gatewayError is a failure to reach or use the gateway: exit 3, like an
// unreachable model provider, unless the gateway says the input was bad.
// msg, when set, says it for people instead of err's chain.
type gatewayError struct {
	err error
	msg string
}

func (e *gatewayError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return "gateway: " + e.err.Error()
}
func (e *gatewayError) Unwrap() error { return e.err }

// gatewayExitCode maps a gateway error code to the CLI's exit codes.
func gatewayExitCode(err error) int {
	switch gateway.ErrorCode(err) {
	case gateway.CodeBadRequest, gateway.CodeInvalidOptions, gateway.CodeNotFound, gateway.CodeUnauthorized, gateway.CodeForbidden,
		gateway.CodeInvalidJob, gateway.CodeSchedulerOff:
		return 2
	case gateway.CodeSessionLocked, gateway.CodeConflict:
		return 4
	}
	return 3
}

func frameToEvent(f gateway.EventFrame) event.Event {
	return event.Event{V: event.Version, Seq: f.Seq, TS: f.TS, RunID: f.RunID, SessionID: f.SessionID,
		PhaseID: f.PhaseID, Attempt: f.Attempt, Type: f.Event, Data: f.Data}
}

// runViaGateway sends a run to the gateway and renders its events exactly
// as a local run would, with the same exit codes. Ctrl-C interrupts the
// run resumably, as it does locally.
func runViaGateway(c *cli.Context, addr, prompt string, opts supervisor.Options) error {
	if opts.Record != "" {
		return usageErrorf("--record is not supported with --gateway: the gateway makes the model calls")
	}
	ws, err := filepath.Abs(config.Pick(c.String("workspace"), "."))
	if err != nil {
		return usageErrorf("--workspace: %v", err)
	}
	f, err := dialFollower(c, addr)
	if err != nil {
		return err
	}
	defer f.gc.Close()
	ctx := c.Context
	sessionID := c.String("session")
	if sessionID == "" {
		// Creating the session attaches this connection to it (docs/PROTOCOL.md#replay-and-attachment).
		var sess gateway.SessionInfo
		if err := f.gc.Call(ctx, gateway.MethodSessionCreate, gateway.SessionCreateParams{Title: oneLine(prompt, 60)}, &sess); err != nil {
			return gatewayCallError(err)
		}
		sessionID = sess.SessionID
	}
	// Starting a run in a session attaches to it from before the run.
	var started gateway.RunStartResult
	if err := f.gc.Call(ctx, gateway.MethodRunStart, gateway.RunStartParams{
		SessionID: sessionID, Input: prompt, Workspace: ws, Options: opts,
	}, &started); err != nil {
		return gatewayCallError(err)
	}
	return f.follow(c, started)
}

// resumeViaGateway asks the gateway to resume one of its sessions' runs,
// and follows it as runViaGateway does.
func resumeViaGateway(c *cli.Context, addr, runID string) error {
	for _, name := range []string{"model", "base-url", "max-turns", "model-attempts", "model-idle-timeout", "model-call-timeout", "timeout", "record", "replay"} {
		if c.IsSet(name) {
			return usageErrorf("--%s with --gateway: the gateway resumes a run with the options it was started with", name)
		}
	}
	f, err := dialFollower(c, addr)
	if err != nil {
		return err
	}
	defer f.gc.Close()
	var started gateway.RunStartResult
	if err := f.gc.Call(c.Context, gateway.MethodRunResume, gateway.RunResumeParams{
		RunID: runID, ResendUnknown: c.Bool("resend-unknown"),
	}, &started); err != nil {
		return gatewayCallError(err)
	}
	return f.follow(c, started)
}

// follower is a connection that shows one run's events as they come.
type follower struct {
	gc       *gateway.Client
	frames   chan gateway.EventFrame
	problems chan gateway.ErrorFrame
}

func dialFollower(c *cli.Context, addr string) (*follower, error) {
	f := &follower{frames: make(chan gateway.EventFrame, 1024), problems: make(chan gateway.ErrorFrame, 4)}
	gc, err := dialGateway(c.Context, addr,
		func(fr gateway.EventFrame) { f.frames <- fr },
		func(fr gateway.ErrorFrame) { f.problems <- fr })
	if err != nil {
		return nil, err
	}
	f.gc = gc
	return f, nil
}

func gatewayCallError(err error) error {
	return &exitError{code: gatewayExitCode(err), msg: "gateway: " + err.Error()}
}

// follow shows the run's events until its terminal event, whose exit code
// it returns. Ctrl-C interrupts the run (run.cancel, mode interrupt); a
// second one stops waiting.
func (f *follower) follow(c *cli.Context, started gateway.RunStartResult) error {
	show := newDisplay(c, false)
	defer show.Close()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	interrupted := false
	var lastSeq int64
	// handle shows one frame; done says the run has ended, with its exit.
	handle := func(fr gateway.EventFrame) (done bool, err error) {
		if fr.SessionID == started.SessionID {
			lastSeq = fr.Seq
		}
		if fr.RunID != started.RunID {
			return false, nil
		}
		e := frameToEvent(fr)
		show.Print(e)
		if !event.IsTerminal(e.Type) {
			return false, nil
		}
		var fin event.RunFinishedData
		_ = e.Decode(&fin)
		return true, finished(c, fin)
	}
	for {
		select {
		case fr := <-f.frames:
			if done, err := handle(fr); done {
				return err
			}
		case p := <-f.problems:
			return &exitError{code: 3, msg: "gateway: " + p.Error.Error()}
		case <-sig:
			if interrupted {
				return &exitError{code: 130, msg: "stopped waiting; the run may still be ending in the gateway"}
			}
			interrupted = true
			ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
			err := f.gc.Call(ctx, gateway.MethodRunCancel, gateway.RunCancelParams{RunID: started.RunID, Mode: gateway.CancelModeInterrupt}, nil)
			stop()
			if err != nil {
				return &exitError{code: 130, msg: "gateway: interrupt: " + err.Error()}
			}
		case <-f.gc.Done():
			// Every frame that came before the close is queued: a draining
			// gateway sends the run's end, then closes. Show them first.
			for len(f.frames) > 0 {
				if done, err := handle(<-f.frames); done {
					return err
				}
			}
			return &gatewayError{err: fmt.Errorf("connection lost before run %s ended: %v; follow it with: agent attach %s --after-seq %d",
				started.RunID, f.gc.Err(), started.SessionID, lastSeq)}
		}
	}
}

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "follow a gateway session's events, replaying what you missed",
		ArgsUsage: "SESSION",
		Description: "Replays every persisted event of the session after --after-seq (default 0: all), then streams\n" +
			"live events until Ctrl-C. Seqs are gapless per session, so re-attaching with the last seq you saw\n" +
			"continues exactly where you left off.\n\n" +
			"Examples:\n" +
			"  agent attach 3f2a\n" +
			"  agent attach 3f2a --after-seq 120 --json",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print events as JSON lines"},
			&cli.Int64Flag{Name: "after-seq", Usage: "replay only events after this seq"},
			&cli.StringFlag{Name: "gateway", Usage: "gateway URL (default $AGENT_GATEWAY or " + defaultGateway + ")"},
		},
		Action: attachAction,
	}
}

func attachAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("attach needs exactly one SESSION; see 'agent sessions list'")
	}
	addr, ok := gatewayAddress(c)
	if !ok {
		addr = defaultGateway
	}
	sessionID, afterSeq := c.Args().First(), c.Int64("after-seq")
	ctx, cancel := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	show := newDisplay(c, false)
	defer show.Close()
	// People see the session's prompts before its answers; --json has
	// them as events.
	printer, human := show.(*console.Printer)
	if human {
		printer.ShowPrompts(true)
	}
	// Frames are shown from this goroutine, so what it says itself comes
	// before the replay rather than somewhere in it.
	frames := make(chan gateway.EventFrame, 1024)
	problems := make(chan gateway.ErrorFrame, 1)
	stopped := make(chan struct{})
	gc, err := dialGateway(ctx, addr,
		func(f gateway.EventFrame) {
			select {
			case frames <- f:
			case <-stopped:
			}
		},
		func(f gateway.ErrorFrame) {
			select {
			case problems <- f:
			default:
			}
		})
	if err != nil {
		return err
	}
	defer gc.Close()
	defer close(stopped) // before Close: the reader must not wait on frames
	var res gateway.SessionResumeResult
	if err := gc.Call(ctx, gateway.MethodSessionResume, gateway.SessionResumeParams{
		SessionID: sessionID, AfterSeq: afterSeq,
	}, &res); err != nil {
		return &exitError{code: gatewayExitCode(err), msg: "gateway: " + err.Error()}
	}
	if human {
		if res.LastSeq > afterSeq {
			printer.Note("replaying session %s after seq %d, then following it; Ctrl-C stops", res.SessionID, afterSeq)
		} else {
			printer.Note("following session %s: nothing after seq %d yet; new events show as they come; Ctrl-C stops", res.SessionID, afterSeq)
		}
	}
	for {
		select {
		case f := <-frames:
			show.Print(frameToEvent(f))
		case <-ctx.Done():
			return nil
		case p := <-problems:
			for len(frames) > 0 { // what came before the problem
				show.Print(frameToEvent(<-frames))
			}
			return &exitError{code: 3, msg: fmt.Sprintf("gateway: %v; re-attach with --after-seq %d", p.Error, p.AfterSeq)}
		case <-gc.Done():
			for len(frames) > 0 { // what came before the close
				show.Print(frameToEvent(<-frames))
			}
			if err := gc.Err(); err != nil && !errors.Is(err, context.Canceled) {
				return &gatewayError{err: fmt.Errorf("connection lost: %w", err)}
			}
			return nil
		}
	}
}
