//go:build !race

package testkit

// RaceEnabled: the race detector is on (see race_on_test.go).
const RaceEnabled = false
