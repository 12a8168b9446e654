package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/event"
	"agent/gateway"
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

// clientToken is AGENT_GATEWAY_TOKEN, else $AGENT_HOME/gateway.token,
// which a client reads but never creates.
func clientToken() (string, error) {
	if t := strings.TrimSpace(os.Getenv("AGENT_GATEWAY_TOKEN")); t != "" {
		return t, nil
	}
	home, err := config.Home()
	if err != nil {
		return "", err
	}
	path := filepath.Join(home, "gateway.token")
	t, err := readTokenFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", usageErrorf("no gateway token: set AGENT_GATEWAY_TOKEN or start 'agent gateway' once to create %s", path)
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
// as a local run would, with the same exit codes. Ctrl-C cancels the run.
func runViaGateway(c *cli.Context, addr, prompt string, cfg runConfig) error {
	if c.String("record") != "" {
		return usageErrorf("--record is not supported with --gateway: the gateway makes the model calls")
	}
	ws := c.String("workspace")
	if ws == "" {
		ws = "."
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		return usageErrorf("workspace: %v", err)
	}
	opts := gateway.RunOptions{
		Model: c.String("model"), BaseURL: c.String("base-url"), MaxTurns: cfg.MaxTurns, ModelAttempts: cfg.ModelAttempts,
		AllowTools: cfg.AllowTools, DenyTools: cfg.DenyTools, Until: cfg.Until, MaxIterations: cfg.MaxIterations,
	}
	if d := c.Duration("timeout"); d > 0 {
		opts.Timeout = d.String()
	}
	if p := c.String("replay"); p != "" {
		if opts.Replay, err = filepath.Abs(p); err != nil {
			return usageErrorf("--replay: %v", err)
		}
	}

	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	frames := make(chan gateway.EventFrame, 1024)
	problems := make(chan gateway.ErrorFrame, 4)
	gc, err := dialGateway(ctx, addr,
		func(f gateway.EventFrame) { frames <- f },
		func(f gateway.ErrorFrame) { problems <- f })
	if err != nil {
		return err
	}
	defer gc.Close()

	var sess gateway.SessionInfo
	if id := c.String("session"); id != "" {
		var detail gateway.SessionDetail
		err = gc.Call(ctx, gateway.MethodSessionGet, gateway.SessionParams{SessionID: id}, &detail)
		sess = detail.Session
	} else {
		err = gc.Call(ctx, gateway.MethodSessionCreate, gateway.SessionCreateParams{Title: oneLine(prompt, 60)}, &sess)
	}
	if err != nil {
		return &exitError{code: gatewayExitCode(err), msg: "gateway: " + err.Error()}
	}
	// Attach before starting, so no event of the run can be missed.
	var attached gateway.SessionResumeResult
	if err := gc.Call(ctx, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sess.SessionID, AfterSeq: sess.LastSeq}, &attached); err != nil {
		return &exitError{code: gatewayExitCode(err), msg: "gateway: " + err.Error()}
	}
	var started gateway.RunStartResult
	if err := gc.Call(ctx, gateway.MethodRunStart, gateway.RunStartParams{
		SessionID: sess.SessionID, Input: prompt, Workspace: ws, Options: opts,
	}, &started); err != nil {
		return &exitError{code: gatewayExitCode(err), msg: "gateway: " + err.Error()}
	}

	show := newDisplay(c, false)
	defer show.Close()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	cancelled := false
	for {
		select {
		case f := <-frames:
			if f.RunID != started.RunID {
				continue
			}
			e := frameToEvent(f)
			show.Print(e)
			if event.IsTerminal(e.Type) {
				var fin event.RunFinishedData
				_ = e.Decode(&fin)
				if fin.ExitCode == 0 {
					return nil
				}
				msg := ""
				if c.Bool("json") {
					msg = fin.Reason
				}
				return &exitError{code: fin.ExitCode, msg: msg}
			}
		case p := <-problems:
			return &exitError{code: 3, msg: "gateway: " + p.Error.Error()}
		case <-sig:
			if cancelled {
				return &exitError{code: 130, msg: "stopped waiting; the run may still be ending in the gateway"}
			}
			cancelled = true
			cctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
			err := gc.Call(cctx, gateway.MethodRunCancel, gateway.RunParams{RunID: started.RunID}, nil)
			stop()
			if err != nil {
				return &exitError{code: 130, msg: "gateway: cancel: " + err.Error()}
			}
		case <-gc.Done():
			return &gatewayError{err: fmt.Errorf("connection lost before run %s ended: %v; follow it with: agent attach %s --after-seq %d",
				started.RunID, gc.Err(), sess.SessionID, attached.LastSeq)}
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
