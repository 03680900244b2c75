//go:build race

package testkit

// RaceEnabled: the race detector is on. sync.Pool drops items at random
// under it, so allocation counts of pooled paths mean nothing then.
const RaceEnabled = true
