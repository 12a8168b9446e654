//go:build !linux

package main

import (
	"errors"
	"testing"
)

const peakRSSMethod = "not measured on this system (%.1f): it needs Linux"

func reapOrphans(tb testing.TB) { tb.Skip("peak RSS is measured on Linux only") }

func peakRSS(env []string, name string, args ...string) (int64, []byte, error) {
	return 0, nil, errors.New("peak RSS is measured on Linux only")
}

func selfPeakMiB() float64 { return 0 }

func procStatusMiB(pid int, field string) float64 { return 0 }
