//go:build !linux

package e2etest

import (
	"errors"
	"testing"
)

const PeakRSSMethod = "not measured on this system (%.1f): it needs Linux"

func ReapOrphans(tb testing.TB) { tb.Skip("peak RSS is measured on Linux only") }

func PeakRSS(env []string, name string, args ...string) (int64, []byte, error) {
	return 0, nil, errors.New("peak RSS is measured on Linux only")
}

func SelfPeakMiB() float64 { return 0 }

func ProcStatusMiB(pid int, field string) float64 { return 0 }
