//go:build !race

package e2etest

// race: the tests are built with -race, and so is the agent they run.
const race = false
