package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"agent/config"
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
		return "", usageErrorf("no gateway token: %v", err)
	}
	return t, err
}

// dialGateway connects and authenticates; events go to onEvent.
func dialGateway(ctx context.Context, addr string, onEvent func(gateway.EventFrame), onError func(gateway.ErrorFrame)) (*gateway.Client, error) {
	token, err := clientToken()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	gc, err := gateway.Dial(dctx, addr, gateway.ClientOptions{Token: token, OnEvent: onEvent, OnError: onError})
	if err != nil {
		return nil, &gatewayError{err: err}
	}
	return gc, nil
}

// gatewayError is a failure to reach or use the gateway: exit 3, like an
// unreachable model provider, unless the gateway says the input was bad.
type gatewayError struct{ err error }

func (e *gatewayError) Error() string { return "gateway: " + e.err.Error() }
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
		// Creating the session attaches this connection to it (DESIGN.md §9).
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
	for {
		select {
		case fr := <-f.frames:
			if fr.SessionID == started.SessionID {
				lastSeq = fr.Seq
			}
			if fr.RunID != started.RunID {
				continue
			}
			e := frameToEvent(fr)
			show.Print(e)
			if event.IsTerminal(e.Type) {
				var fin event.RunFinishedData
				_ = e.Decode(&fin)
				return finished(c, fin)
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
	ctx, cancel := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	show := newDisplay(c, false)
	defer show.Close()
	problems := make(chan gateway.ErrorFrame, 1)
	gc, err := dialGateway(ctx, addr, func(f gateway.EventFrame) { show.Print(frameToEvent(f)) },
		func(f gateway.ErrorFrame) { problems <- f })
	if err != nil {
		return err
	}
	defer gc.Close()
	var res gateway.SessionResumeResult
	if err := gc.Call(ctx, gateway.MethodSessionResume, gateway.SessionResumeParams{
		SessionID: c.Args().First(), AfterSeq: c.Int64("after-seq"),
	}, &res); err != nil {
		return &exitError{code: gatewayExitCode(err), msg: "gateway: " + err.Error()}
	}
	select {
	case <-ctx.Done():
		return nil
	case p := <-problems:
		return &exitError{code: 3, msg: fmt.Sprintf("gateway: %v; re-attach with --after-seq %d", p.Error, p.AfterSeq)}
	case <-gc.Done():
		if err := gc.Err(); err != nil && !errors.Is(err, context.Canceled) {
			return &gatewayError{err: fmt.Errorf("connection lost: %w", err)}
		}
		return nil
	}
}
