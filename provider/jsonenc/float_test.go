package jsonenc

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAppendFloat: a float is written as encoding/json writes it, which the
// SDKs' param.Opt[float64] do (the providers' parity tests compare the two
// on the wire).
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
		got := string(AppendFloat(nil, tc.f))
		want, err := json.Marshal(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want || got != string(want) {
			t.Errorf("AppendFloat(%v) = %s, want %s (encoding/json: %s)", tc.f, got, tc.want, want)
		}
	}
}

// FuzzAppendFloat holds AppendFloat to encoding/json for every finite
// float64.
func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, 1, 0.7, 1e-6, 9.99e-7, 1e-9, 1e21, 5e-324} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		want, err := json.Marshal(v)
		if err == nil && string(AppendFloat(nil, v)) != string(want) {
			t.Fatalf("AppendFloat(%v) = %s, encoding/json %s", v, AppendFloat(nil, v), want)
		}
	})
}

// TestAppendFloatOfRandomBits: encoding/json's text around both cutoffs
// of the exponent form, at the extremes, and for random bit patterns.
func TestAppendFloatOfRandomBits(t *testing.T) {
	values := []float64{math.Nextafter(1e-6, 0), 1e-7, math.Nextafter(1e21, 0), 123456789e-15,
		math.SmallestNonzeroFloat64, -1e-300, 1e300}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		if v := math.Float64frombits(rng.Uint64()); !math.IsNaN(v) && !math.IsInf(v, 0) {
			values = append(values, v)
		}
	}
	for _, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendFloat([]byte("x"), v); string(got) != "x"+string(want) {
			t.Fatalf("AppendFloat(%v) = %s, want x%s", v, got, want)
		}
	}
}
