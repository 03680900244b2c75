package anthropic

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/jsonenc"
	"github.com/completiond/completiond/recovery"
)

// FuzzFinite holds Sampling.Finite to refusing the floats encoding/json refuses
// (the SDK's encoder, its fork, refused the params and sent nothing), and
// jsonenc.AppendFloat to encoding/json for the others.
func FuzzFinite(f *testing.F) {
	for _, v := range []float64{0, 1, 0.7, 1e-6, 9.99e-7, 1e-9, 1e21, 5e-324, math.NaN(), math.Inf(1)} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		want, err := json.Marshal(v)
		if ferr := (provider.Sampling{TopP: &v}).Finite(); (err == nil) != (ferr == nil) {
			t.Fatalf("%v: finite says %v, encoding/json %v", v, ferr, err)
		}
		if got := jsonenc.AppendFloat(nil, v); err == nil && string(got) != string(want) {
			t.Fatalf("AppendFloat(%v) = %s, encoding/json %s", v, got, want)
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
		"cache marks and media": {Model: "claude-test", MaxTokens: 4096, System: "Be brief.", CacheSystem: true,
			Messages: []recovery.Message{
				{Role: recovery.RoleUser, Blocks: []recovery.Block{
					{Kind: recovery.BlockText, Text: "Look.", CacheBreakpoint: true},
					{Kind: recovery.BlockImage, URL: "https://example.com/" + strings.Repeat("i", 2000), CacheBreakpoint: true},
					{Kind: recovery.BlockDocument, Data: []byte(strings.Repeat("%PDF", 300)), Title: strings.Repeat("t", 256)},
				}},
				{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
					{Kind: recovery.BlockText, Text: "So"}, {Kind: recovery.BlockText, Text: " \n", CacheBreakpoint: true},
				}},
			}},
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
