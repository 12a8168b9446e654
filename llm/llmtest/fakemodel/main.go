// Command fakemodel serves an llmtest script as a fake OpenAI-compatible
// endpoint, for benchmarks and manual demos:
//
//	fakemodel -script turns.json [-addr 127.0.0.1:0] [-log requests.jsonl]
//
// The first line on stdout is the base URL (ending in /v1). It serves
// until killed.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"agent/llm/llmtest"
)

func main() {
	script := flag.String("script", "", "script file (JSON): {\"turns\":[…],\"loop\":false} or [turns…]")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	logPath := flag.String("log", "", "append each request body to this file as a JSON line")
	flag.Parse()
	if *script == "" {
		fmt.Fprintln(os.Stderr, "fakemodel: -script is required")
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*script, *addr, *logPath); err != nil {
		fmt.Fprintln(os.Stderr, "fakemodel:", err)
		os.Exit(1)
	}
}

func run(scriptPath, addr, logPath string) error {
	s, err := llmtest.LoadScript(scriptPath)
	if err != nil {
		return err
	}
	if logPath != "" {
		s.LogPath = logPath
	}
	srv, err := llmtest.Listen(addr, s)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Println(srv.URL())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	return nil
}
