package gateway

import (
	"testing"

	"agent/e2e/internal/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m, nil) }
