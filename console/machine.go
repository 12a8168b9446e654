package console

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"agent/mcp"
	"agent/sandbox"
)

// PrintServer is a line of `agent mcp list` for one server: how it is
// reached and configured, and a line per tool, or why it did not start.
func PrintServer(w io.Writer, l mcp.Listing) {
	kind := "required"
	if !l.Server.Required {
		kind = "optional"
	}
	if l.Err != nil {
		fmt.Fprintf(w, "%s (%s, %s, %s): did not start: %s\n", l.Server.Name, l.Transport(), kind, l.Server.Source, l.Err)
		return
	}
	fmt.Fprintf(w, "%s (%s, %s, %s): %d tools\n", l.Server.Name, l.Transport(), kind, l.Server.Source, len(l.Tools))
	for _, t := range l.Tools {
		var notes []string
		if t.ReadOnly {
			notes = append(notes, "read-only")
		}
		if t.Receipt != "" {
			notes = append(notes, "effect, receipt "+t.Receipt)
		}
		note := ""
		if len(notes) > 0 {
			note = " [" + strings.Join(notes, ", ") + "]"
		}
		desc := strings.Join(strings.Fields(t.Description), " ")
		if r := []rune(desc); len(r) > 80 {
			desc = string(r[:77]) + "..."
		}
		fmt.Fprintf(w, "  %s%s  %s\n", t.Name, note, desc)
	}
}

// PrintSandbox says what `agent sandbox check` found.
func PrintSandbox(w io.Writer, sup sandbox.Support) {
	landlock := "none"
	if sup.LandlockV > 0 {
		landlock = fmt.Sprintf("ABI %d", sup.LandlockV)
	}
	modes := make([]string, len(sup.Modes))
	for i, m := range sup.Modes {
		modes[i] = string(m)
	}
	namespaces := "not usable"
	if sup.Namespaces {
		namespaces = "user, PID and network: yes"
	}
	fmt.Fprintf(w, "kernel      %s\n", sup.Kernel)
	fmt.Fprintf(w, "landlock    %s\n", landlock)
	fmt.Fprintf(w, "namespaces  %s\n", namespaces)
	fmt.Fprintf(w, "modes       %s\n", strings.Join(modes, ", "))
	if sup.StartMS > 0 {
		fmt.Fprintf(w, "cost        %.1f ms to start one sandboxed command\n", sup.StartMS)
	}
	for _, p := range sup.Problems {
		fmt.Fprintf(w, "problem     %s\n", p)
	}
}

// Listening is where a gateway listens, as it says once it does.
type Listening struct {
	Addr, Version, TokenFrom string
	Scheduling, Workers      bool
	Store                    string // redacted: the store workers claim its runs from
}

// PrintListening says where a gateway listens, where its token comes
// from, whether it fires scheduled jobs and, when workers drive its runs,
// from which store: on errw, or as one JSON object on out.
func PrintListening(out, errw io.Writer, asJSON bool, l Listening) {
	if asJSON {
		_ = json.NewEncoder(out).Encode(map[string]any{
			"listen": l.Addr, "url": "http://" + l.Addr, "ws": "ws://" + l.Addr + "/ws",
			"version": l.Version, "pid": os.Getpid(), "token_from": l.TokenFrom, "scheduler": l.Scheduling, "workers": l.Workers,
		})
		return
	}
	state := "off (--scheduler turns it on)"
	if l.Scheduling {
		state = "on"
	}
	fmt.Fprintf(errw, "agent gateway listening on http://%s (token: %s), scheduler %s\n", l.Addr, l.TokenFrom, state)
	if l.Workers {
		fmt.Fprintf(errw, "store %s: runs are queued for 'agent worker' processes\n", l.Store)
	}
}

// Check is one check of `agent doctor`: what was checked, whether it is
// well, and what to say of it (what to do, when it is not).
type Check struct {
	Check string `json:"check"`
	OK    bool   `json:"ok"`
	Say   string `json:"say"`
}

// PrintChecks is `agent doctor`'s report, a line per check.
func PrintChecks(w io.Writer, checks []Check) {
	for _, c := range checks {
		mark := "ok     "
		if !c.OK {
			mark = "PROBLEM"
		}
		fmt.Fprintf(w, "%s %-15s %s\n", mark, c.Check, c.Say)
	}
}
