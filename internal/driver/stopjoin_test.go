package driver

import (
	"strings"
	"testing"
)

func TestJoinStop(t *testing.T) {
	tests := []struct {
		name    string
		before  string
		seqs    []string
		chunks  []string
		passed  string // what went on to the caller, flush included
		matched string // "" when no sequence completed
	}{
		{name: "no sequence can split", before: "the end", seqs: []string{"STOP"}, chunks: []string{"ST", "OP"}, passed: "STOP"},
		{name: "split in one chunk", before: "a b EN", seqs: []string{"END"}, chunks: []string{"D more"}, matched: "END"},
		{name: "split over two chunks", before: "x <|e", seqs: []string{"<|end|>"}, chunks: []string{"nd", "|> rest"}, matched: "<|end|>"},
		{name: "held, then not a match", before: "x <|e", seqs: []string{"<|end|>"}, chunks: []string{"nd", "ing"}, passed: "nding"},
		{name: "held to the end of the attempt", before: "x <|e", seqs: []string{"<|end|>"}, chunks: []string{"n"}, passed: "n"},
		{name: "first output byte decides", before: "E", seqs: []string{"EN"}, chunks: []string{"X", "N"}, passed: "XN"},
		{name: "the shorter rest completes first", before: "aXY", seqs: []string{"XYZW", "YZ"}, chunks: []string{"Z", "W"}, matched: "YZ"},
		{name: "a tie goes to the first listed", before: "ab", seqs: []string{"bc", "abc"}, chunks: []string{"c"}, matched: "bc"},
		{name: "several splits of one sequence", before: "..aa", seqs: []string{"aaab"}, chunks: []string{"ab"}, matched: "aaab"},
		{name: "multibyte sequence split inside a rune", before: "fin \xe2\x80", seqs: []string{"\u2014"}, chunks: []string{"\x94!"}, matched: "\u2014"},
		{name: "nothing before", before: "", seqs: []string{"END"}, chunks: []string{"END"}, passed: "END"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newJoinStop(tt.before, tt.seqs)
			var passed strings.Builder
			matched := ""
			for _, c := range tt.chunks {
				if j == nil {
					passed.WriteString(c)
					continue
				}
				p, done := j.feed(c)
				passed.WriteString(p)
				if done {
					matched = j.matched
					break
				}
			}
			if j != nil && matched == "" {
				passed.WriteString(j.flush())
			}
			if passed.String() != tt.passed || matched != tt.matched {
				t.Errorf("passed %q, matched %q; want %q, %q", passed.String(), matched, tt.passed, tt.matched)
			}
		})
	}
}

func TestJoinStopIsNilWhenNoSequenceCanSplit(t *testing.T) {
	if j := newJoinStop("an answer", []string{"STOP", "###"}); j != nil {
		t.Errorf("newJoinStop = %+v, want nil: no sequence starts at the end of the answer", j)
	}
}
