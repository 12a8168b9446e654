//go:build linux

package cli

import (
	"os"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
)

// TestPeakRSSIsTheChilds: peakRSS reports the process's own peak, not
// this test process's, which a direct child's ru_maxrss starts at. Not
// parallel: while it runs, orphans anywhere below this process become its
// children, and parallel tests wait until sequential ones end.
func TestPeakRSSIsTheChilds(t *testing.T) {
	for _, p := range []string{"/bin/sh", "/bin/true"} {
		if _, err := os.Stat(p); err != nil {
			t.Skip(err)
		}
	}
	e2etest.ReapOrphans(t)
	self := e2etest.SelfPeakMiB()
	small, out, err := e2etest.PeakRSS(nil, "/bin/true")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if mib := float64(small) / 1024; mib <= 0 || mib > 4 || mib >= self {
		t.Errorf("peak RSS of /bin/true = %.1f MiB (this process's peak: %.1f MiB), want its own, about 1 MiB", mib, self)
	}
	// A child that holds 24 MiB reports at least that.
	big, out, err := e2etest.PeakRSS(nil, "/bin/sh", "-c", `x=$(head -c 25165824 /dev/zero | tr '\0' a); echo ${#x}`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if mib := float64(big) / 1024; mib < 24 {
		t.Errorf("peak RSS of a shell holding 24 MiB = %.1f MiB", mib)
	}
	if strings.TrimSpace(string(out)) != "25165824" {
		t.Errorf("output %q, want the output of the process measured", out)
	}
}
