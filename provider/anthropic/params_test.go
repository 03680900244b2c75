package anthropic

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// TestAppendFloat: a float is written as encoding/json writes it, which the
// SDK's param.Opt[float64] does (the parity tests compare the two on the
// wire).
func TestAppendFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "-0"},
		{1, "1"},
		{0.7, "0.7"},
		{0.30000000000000004, "0.30000000000000004"},
		{1e-6, "0.000001"},
		{9.99e-7, "9.99e-7"},
		{1e-9, "1e-9"},
		{1.5e-10, "1.5e-10"},
		{1e-100, "1e-100"},
		{5e-324, "5e-324"},
		{123456789.125, "123456789.125"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{-2.5e-8, "-2.5e-8"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
	} {
		got := string(appendFloat(nil, tc.f))
		want, err := json.Marshal(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want || got != string(want) {
			t.Errorf("appendFloat(%v) = %s, want %s (encoding/json: %s)", tc.f, got, tc.want, want)
		}
	}
}

// FuzzAppendFloat holds appendFloat to encoding/json for every finite
// float64, and finite to refusing the others as encoding/json does.
func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, 1, 0.7, 1e-6, 9.99e-7, 1e-9, 1e21, 5e-324, math.NaN(), math.Inf(1)} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		want, err := json.Marshal(v)
		if ferr := finite(provider.Sampling{TopP: &v}); (err == nil) != (ferr == nil) {
			t.Fatalf("%v: finite says %v, encoding/json %v", v, ferr, err)
		}
		if err == nil && string(appendFloat(nil, v)) != string(want) {
			t.Fatalf("appendFloat(%v) = %s, encoding/json %s", v, appendFloat(nil, v), want)
		}
	})
}

// TestParamsBodyAllocatesOnce: the body of a request with every parameter,
// at its largest, is allocated once (sizeHint makes room for them).
func TestParamsBodyAllocatesOnce(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	seqs := make([]string, 16)
	for i := range seqs {
		seqs[i] = strings.Repeat("é", 128)
	}
	for name, req := range map[string]*provider.Request{
		"sampling": {Model: "claude-test", MaxTokens: 4096, Messages: []recovery.Message{recovery.UserText("Hi.")},
			Sampling: provider.Sampling{Temperature: f(-1.2345678901234567e-300), TopP: f(-2.2250738585072014e-308), TopK: math.MinInt}},
		"everything": {Model: "claude-test", MaxTokens: 4096, Messages: []recovery.Message{recovery.UserText("Hi.")},
			System: "Be brief.", ThinkingBudget: 2048,
			Sampling:      provider.Sampling{Temperature: f(0.7), TopP: f(1e-9), TopK: 40},
			StopSequences: seqs,
			ToolChoice:    provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: strings.Repeat("z", 64), DisableParallel: true}},
		"stop sequences only": {MaxTokens: 1, StopSequences: []string{"a"}},
	} {
		t.Run(name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, func() {
				if _, _, err := p.body(req); err != nil {
					t.Fatal(err)
				}
			}); n != 1 {
				t.Errorf("%v allocations, want 1", n)
			}
		})
	}
}
