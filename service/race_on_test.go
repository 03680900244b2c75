//go:build race

package service

// raceEnabled: the race detector is on. sync.Pool drops items at random
// under it, so allocation counts of pooled paths mean nothing then.
const raceEnabled = true
