package main

import (
	"strings"
	"testing"
	"time"
)

// stream is `go test -json ./...` of a module where x/a fails in one
// subtest, x/b does not build, x/c passes and x/d has no tests.
const stream = `{"ImportPath":"x/b [x/b.test]","Action":"build-output","Output":"# x/b [x/b.test]\n"}
{"ImportPath":"x/b [x/b.test]","Action":"build-output","Output":"b/b_test.go:3:28: undefined: undefined\n"}
{"ImportPath":"x/b [x/b.test]","Action":"build-fail"}
{"Action":"start","Package":"x/a"}
{"Action":"start","Package":"x/b"}
{"Action":"output","Package":"x/b","Output":"FAIL\tx/b [build failed]\n"}
{"Action":"fail","Package":"x/b","Elapsed":0,"FailedBuild":"x/b [x/b.test]"}
{"Action":"run","Package":"x/a","Test":"TestOK"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"    a_test.go:3: fine\n"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"x/a","Test":"TestOK","Elapsed":0}
{"Action":"run","Package":"x/a","Test":"TestBad"}
{"Action":"output","Package":"x/a","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"run","Package":"x/a","Test":"TestBad/sub1"}
{"Action":"output","Package":"x/a","Test":"TestBad/sub1","Output":"=== RUN   TestBad/sub1\n"}
{"Action":"output","Package":"x/a","Test":"TestBad/sub1","Output":"    a_test.go:4: sub1 ok\n"}
{"Action":"output","Package":"x/a","Test":"TestBad/sub1","Output":"--- PASS: TestBad/sub1 (0.00s)\n"}
{"Action":"pass","Package":"x/a","Test":"TestBad/sub1","Elapsed":0}
{"Action":"run","Package":"x/a","Test":"TestBad/sub2"}
{"Action":"output","Package":"x/a","Test":"TestBad/sub2","Output":"=== RUN   TestBad/sub2\n"}
{"Action":"output","Package":"x/a","Test":"TestBad/sub2","Output":"    a_test.go:4: sub2 broke\n"}
{"Action":"output","Package":"x/a","Test":"TestBad/sub2","Output":"--- FAIL: TestBad/sub2 (0.00s)\n"}
{"Action":"fail","Package":"x/a","Test":"TestBad/sub2","Elapsed":0}
{"Action":"output","Package":"x/a","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"x/a","Test":"TestBad","Elapsed":0}
{"Action":"output","Package":"x/a","Output":"FAIL\n"}
{"Action":"output","Package":"x/a","Output":"FAIL\tx/a\t0.004s\n"}
{"Action":"fail","Package":"x/a","Elapsed":0.004}
{"Action":"start","Package":"x/c"}
{"Action":"run","Package":"x/c","Test":"TestC"}
{"Action":"output","Package":"x/c","Test":"TestC","Output":"=== RUN   TestC\n"}
{"Action":"output","Package":"x/c","Test":"TestC","Output":"--- PASS: TestC (0.00s)\n"}
{"Action":"pass","Package":"x/c","Test":"TestC","Elapsed":0}
{"Action":"output","Package":"x/c","Output":"PASS\n"}
{"Action":"output","Package":"x/c","Output":"ok  \tx/c\t1.500s\n"}
{"Action":"pass","Package":"x/c","Elapsed":1.5}
{"Action":"start","Package":"x/d"}
{"Action":"output","Package":"x/d","Output":"?   \tx/d\t[no test files]\n"}
{"Action":"skip","Package":"x/d","Elapsed":0}
`

// clock is a settable now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func run(t *testing.T, in string) (string, int) {
	t.Helper()
	var out strings.Builder
	c := &clock{t: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	code := report(strings.NewReader(in), &out, nil, c.now)
	return out.String(), code
}

// A failed package prints what go test prints without -v: its failed
// tests' output and its own, not its passing tests'; the others their
// go test line; build errors as they come; exit 1.
func TestReportFailures(t *testing.T) {
	t.Parallel()
	out, code := run(t, stream)
	want := "# x/b [x/b.test]\n" +
		"b/b_test.go:3:28: undefined: undefined\n" +
		"FAIL\tx/b [build failed]\n" +
		"    a_test.go:4: sub2 broke\n" +
		"--- FAIL: TestBad/sub2 (0.00s)\n" +
		"--- FAIL: TestBad (0.00s)\n" +
		"FAIL\n" +
		"FAIL\tx/a\t0.004s\n" +
		"ok  \tx/c\t1.500s\n" +
		"?   \tx/d\t[no test files]\n" +
		"test.sh: go test ran for 0s: 1 packages ok, 1 without tests, 2 failed (x/b, x/a), 1 test binaries did not build\n"
	if out != want || code != 1 {
		t.Errorf("exit %d, printed\n%s\nwant exit 1 and\n%s", code, out, want)
	}
}

func TestReportAllPass(t *testing.T) {
	t.Parallel()
	var passing []string
	for _, l := range strings.Split(stream, "\n") {
		if strings.Contains(l, `"x/c"`) || strings.Contains(l, `"x/d"`) {
			passing = append(passing, l)
		}
	}
	out, code := run(t, strings.Join(passing, "\n"))
	if want := "ok  \tx/c\t1.500s\n?   \tx/d\t[no test files]\ntest.sh: go test ran for 0s: 1 packages ok, 1 without tests\n"; out != want || code != 0 {
		t.Errorf("exit %d, printed\n%s\nwant exit 0 and\n%s", code, out, want)
	}
}

// When go test stops in the middle of a package (killed, or its
// -timeout's panic never reached the end), the package's output is all
// printed, and the exit code says so.
func TestReportStoppedInTheMiddle(t *testing.T) {
	t.Parallel()
	in := `{"Action":"start","Package":"x/e"}
{"Action":"run","Package":"x/e","Test":"TestSlow"}
{"Action":"output","Package":"x/e","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"x/e","Test":"TestSlow","Output":"    e_test.go:9: waiting\n"}
not json: the go command said something
`
	out, code := run(t, in)
	want := "not json: the go command said something\n" +
		"test.sh: go test ended while x/e ran; what it printed:\n=== RUN   TestSlow\n    e_test.go:9: waiting\n" +
		"test.sh: go test ran for 0s: 0 packages ok, 0 without tests, 1 stopped in the middle\n"
	if out != want || code != 1 {
		t.Errorf("exit %d, printed\n%s\nwant exit 1 and\n%s", code, out, want)
	}
}

// Each tick names what runs, the longest running first, and how long;
// before any package runs, that the binaries compile.
func TestTick(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	c := &clock{t: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	p := newProgress(&out, c.now)
	c.t = c.t.Add(time.Minute)
	p.tick()
	p.line(`{"Action":"start","Package":"x/slow"}`)
	c.t = c.t.Add(30 * time.Second)
	p.line(`{"Action":"start","Package":"x/b"}`)
	p.line(`{"Action":"start","Package":"x/a"}`)
	c.t = c.t.Add(90 * time.Second)
	p.tick()
	p.line(`{"Action":"output","Package":"x/a","Output":"ok  \tx/a\t0.100s\n"}`)
	p.line(`{"Action":"pass","Package":"x/a","Elapsed":0.1}`)
	c.t = c.t.Add(time.Minute)
	p.tick()
	want := "test.sh: 1m0s: compiling test binaries; 0 packages done\n" +
		"test.sh: 3m0s: still running x/slow (2m0s), x/a (1m30s), x/b (1m30s); 0 packages done\n" +
		"ok  \tx/a\t0.100s\n" +
		"test.sh: 4m0s: still running x/slow (3m0s), x/b (2m30s); 1 packages done\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
}
