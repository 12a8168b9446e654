package cli

import (
	"strings"

	"github.com/urfave/cli/v2"

	"agent/gateway/api"
)

// normalizeArgs moves flags that follow positional arguments in front of
// them, because urfave/cli v2 stops parsing flags at the first positional
// and users type `agent runs show ID --json`. A flag's value stays with it;
// everything after "--" stays positional.
func normalizeArgs(app *cli.App, args []string) ([]string, error) {
	if len(args) < 2 {
		return args, nil
	}
	out := []string{args[0]}
	rest := args[1:]
	if findCommand(app.Commands, rest[0]) == nil {
		return args, nil // help, unknown commands and root flags: urfave decides
	}
	cmds, flags := app.Commands, app.Flags
	// Walk down the command path: agent runs show …
	for len(rest) > 0 {
		cmd := findCommand(cmds, rest[0])
		if cmd == nil {
			break
		}
		out = append(out, rest[0])
		rest = rest[1:]
		cmds, flags = cmd.Subcommands, cmd.Flags
		if len(cmds) > 0 && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") &&
			rest[0] != "help" && rest[0] != "h" && findCommand(cmds, rest[0]) == nil {
			return nil, usageErrorf("unknown command %q for 'agent %s'; choose one of: %s",
				rest[0], strings.Join(out[1:], " "), commandNames(cmds))
		}
	}

	var root, flagArgs, positional []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			positional = append(positional, rest[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		// --gateway may stand alone: the default gateway. Only an
		// address-like next word is its value; anything else is the prompt.
		if name == "gateway" && (i+1 >= len(rest) || !api.IsAddress(rest[i+1])) {
			flagArgs = append(flagArgs, "--gateway="+gatewayDefaultValue)
			continue
		}
		if base, _, _ := strings.Cut(name, "="); base == "database" && !takesValue(flags, base) {
			// The store's address, a root flag, is taken after any
			// command that opens the store, as gateway and worker take it.
			root = append(root, a)
			if !strings.Contains(name, "=") && i+1 < len(rest) {
				i++
				root = append(root, rest[i])
			}
			continue
		}
		flagArgs = append(flagArgs, a)
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue(flags, name) && i+1 < len(rest) {
			i++
			flagArgs = append(flagArgs, rest[i])
		}
	}
	out = append(append([]string{out[0]}, append(root, out[1:]...)...), flagArgs...)
	for _, p := range positional {
		if len(p) > 1 && p[0] == '-' {
			out = append(out, "--")
			break
		}
	}
	return append(out, positional...), nil
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func commandNames(cmds []*cli.Command) string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, ", ")
}

func takesValue(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if v, ok := f.(cli.DocGenerationFlag); ok {
				return v.TakesValue()
			}
			return false
		}
	}
	return false
}
