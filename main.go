// Command agent runs LLM agents durably: a fast path for one-shot tasks and
// durable runs that survive crashes and resume where they stopped.
package main

import (
	"os"

	"agent/cli"
)

func main() {
	os.Exit(cli.Run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
