package driver

import (
	"errors"
	"slices"
	"strings"
)

// errJoinStop stops an attempt whose first output completed a stop
// sequence begun by the answer it continues.
var errJoinStop = errors.New("a stop sequence split across the cut ended the answer")

// joinStop finds a stop sequence split across a cut: begun at the end of
// the answer kept so far and completed by the first output of the attempt
// that continues it, by prefill or after a continuation prompt. The
// upstream matches stop sequences only in its own output, so it cannot
// see such a one; without this, a resumed answer would run past a
// sequence the caller asked to stop at.
//
// While the attempt's first output could still complete one, that output
// is held back (never more than the longest sequence's length); once none
// can, it is passed on and the attempt streams as any other. The part of
// a sequence the caller already received stays in the answer: it was
// sent, and the text deltas add up to exactly the answer.
type joinStop struct {
	cands   []joinCandidate // in order of the output length that completes them
	held    string          // output held back while a candidate may complete
	matched string          // the sequence that completed, once one did
}

// joinCandidate is a sequence whose first part ends the kept answer: rest
// is the part the output must start with.
type joinCandidate struct {
	seq, rest string
}

// newJoinStop returns the matcher of an attempt that continues before,
// nil when no sequence of seqs can be split across the cut (the common
// case, which then costs nothing per chunk).
func newJoinStop(before string, seqs []string) *joinStop {
	if before == "" || len(seqs) == 0 {
		return nil
	}
	var cands []joinCandidate
	for _, s := range seqs {
		for k := 1; k < len(s); k++ { // s[:k] ends before, s[k:] must start the output
			if strings.HasSuffix(before, s[:k]) {
				cands = append(cands, joinCandidate{seq: s, rest: s[k:]})
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	// The shortest rest completes first: it is where an upstream reading
	// the whole text would have stopped. The sort is stable, so a tie
	// goes to the sequence the request lists first.
	slices.SortStableFunc(cands, func(a, b joinCandidate) int { return len(a.rest) - len(b.rest) })
	return &joinStop{cands: cands}
}

// feed takes the next text of the attempt and returns what may be passed
// on now; done reports that a sequence completed (matched says which), and
// nothing more of the attempt is to be passed on.
func (j *joinStop) feed(text string) (pass string, done bool) {
	if len(j.cands) == 0 {
		return text, false
	}
	j.held += text
	live := j.cands[:0]
	for _, c := range j.cands {
		switch {
		case strings.HasPrefix(j.held, c.rest):
			j.matched, j.cands = c.seq, nil
			return "", true
		case strings.HasPrefix(c.rest, j.held):
			live = append(live, c) // may still complete
		}
	}
	j.cands = live
	if len(live) > 0 {
		return "", false
	}
	pass, j.held = j.held, ""
	return pass, false
}

// flush returns the output still held back when the attempt ends: no
// candidate completed, so it is the answer's.
func (j *joinStop) flush() string {
	pass := j.held
	j.held, j.cands = "", nil
	return pass
}
