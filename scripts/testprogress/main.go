// Command testprogress reads `go test -json` on its stdin and prints what
// a person waiting for the suite wants to know, as it happens: each
// package as it finishes (its go test line, ok or FAIL with its time), at
// least once a minute a line naming the packages still running, for each
// package that failed the whole output of its failed tests and its own (as
// go test prints without -v), build errors at once, and a count at the
// end. It exits 1 if a package or a build failed or go test stopped in the
// middle of a package, else 0. scripts/test.sh runs the suite through it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	os.Exit(report(os.Stdin, os.Stdout, tick.C, time.Now))
}

// event is a line of `go test -json` (cmd/test2json), with the go
// command's build events (ImportPath, build-output and build-fail).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// report prints what r's events say, and a line on every tick while
// packages run; it returns the exit code.
func report(r io.Reader, w io.Writer, tick <-chan time.Time, now func() time.Time) int {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 16<<20) // a line of test output may be long
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	p := newProgress(w, now)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return p.end()
			}
			p.line(l)
		case <-tick:
			p.tick()
		}
	}
}

// progress is what has been seen of the suite.
type progress struct {
	w       io.Writer
	now     func() time.Time
	began   time.Time
	running map[string]*pkg
	ok      int
	noTests int
	failed  []string // packages, in the order they failed
	builds  int      // test binaries that did not build
}

// pkg is a package whose tests run.
type pkg struct {
	name    string
	started time.Time
	out     []output
	passed  map[string]bool // tests that passed or were skipped
}

// output is a line of a package's output, and the test it belongs to
// ("" for the package's own).
type output struct{ test, text string }

func newProgress(w io.Writer, now func() time.Time) *progress {
	return &progress{w: w, now: now, began: now(), running: map[string]*pkg{}}
}

func (p *progress) line(l string) {
	var e event
	if err := json.Unmarshal([]byte(l), &e); err != nil || e.Action == "" {
		fmt.Fprintln(p.w, l) // not go test's JSON: pass it on
		return
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(p.w, e.Output)
		return
	case "build-fail":
		p.builds++
		return
	}
	if e.Package == "" {
		return
	}
	k := p.running[e.Package]
	if k == nil {
		k = &pkg{name: e.Package, started: p.now(), passed: map[string]bool{}}
		p.running[e.Package] = k
	}
	switch {
	case e.Action == "output":
		k.out = append(k.out, output{e.Test, e.Output})
	case e.Test != "":
		if e.Action == "pass" || e.Action == "skip" {
			k.passed[e.Test] = true
		}
	case e.Action == "pass" || e.Action == "skip":
		delete(p.running, e.Package)
		summary := k.summary()
		switch {
		case strings.HasPrefix(summary, "?"):
			p.noTests++
		case summary == "":
			summary = fmt.Sprintf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
			fallthrough
		default:
			p.ok++
		}
		fmt.Fprint(p.w, summary)
	case e.Action == "fail":
		delete(p.running, e.Package)
		p.failed = append(p.failed, e.Package)
		k.printFailure(p.w)
	}
}

// summary is the package's go test line: "ok  \tPKG\t1.2s" or
// "?   \tPKG\t[no test files]"; "" if it printed none.
func (k *pkg) summary() string {
	for i := len(k.out) - 1; i >= 0; i-- {
		if o := k.out[i]; o.test == "" && (strings.HasPrefix(o.text, "ok") || strings.HasPrefix(o.text, "?")) {
			return o.text
		}
	}
	return ""
}

// printFailure prints the package's own output and that of every test
// that did not pass (failed, or never ended), as they came, without the
// === lines -v adds: what go test prints for a failed package.
func (k *pkg) printFailure(w io.Writer) {
	for _, o := range k.out {
		if o.test != "" && (k.passed[o.test] || strings.HasPrefix(o.text, "=== ")) {
			continue
		}
		fmt.Fprint(w, o.text)
	}
	if n := len(k.out); n == 0 || !strings.HasPrefix(k.out[n-1].text, "FAIL") {
		fmt.Fprintf(w, "FAIL\t%s\n", k.name)
	}
}

// tick says what still runs, oldest first.
func (p *progress) tick() {
	now := p.now()
	if len(p.running) == 0 {
		fmt.Fprintf(p.w, "test.sh: %s: compiling test binaries; %d packages done\n", since(p.began, now), p.done())
		return
	}
	ks := make([]*pkg, 0, len(p.running))
	for _, k := range p.running {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b *pkg) int {
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var names []string
	for _, k := range ks {
		names = append(names, fmt.Sprintf("%s (%s)", k.name, since(k.started, now)))
	}
	fmt.Fprintf(p.w, "test.sh: %s: still running %s; %d packages done\n", since(p.began, now), strings.Join(names, ", "), p.done())
}

func (p *progress) done() int { return p.ok + p.noTests + len(p.failed) }

// end says how the suite went, and what go test left running if it
// stopped in the middle, with all they printed; it returns the exit code.
func (p *progress) end() int {
	var stopped []string
	for name := range p.running {
		stopped = append(stopped, name)
	}
	slices.Sort(stopped)
	for _, name := range stopped {
		k := p.running[name]
		fmt.Fprintf(p.w, "test.sh: go test ended while %s ran; what it printed:\n", name)
		for _, o := range k.out {
			fmt.Fprint(p.w, o.text)
		}
	}
	msg := fmt.Sprintf("test.sh: go test ran for %s: %d packages ok, %d without tests", since(p.began, p.now()), p.ok, p.noTests)
	if len(p.failed) > 0 {
		msg += fmt.Sprintf(", %d failed (%s)", len(p.failed), strings.Join(p.failed, ", "))
	}
	if p.builds > 0 {
		msg += fmt.Sprintf(", %d test binaries did not build", p.builds)
	}
	if len(stopped) > 0 {
		msg += fmt.Sprintf(", %d stopped in the middle", len(stopped))
	}
	fmt.Fprintln(p.w, msg)
	if len(p.failed) > 0 || p.builds > 0 || len(stopped) > 0 {
		return 1
	}
	return 0
}

// since is how long from a to b, to the second.
func since(a, b time.Time) string { return b.Sub(a).Round(time.Second).String() }
