package harness

import (
	"math"
	"slices"
	"testing"
)

// exposition is a replica's /metrics with the group commit's waits: two
// in the first bucket, one up to 2.5 ms, one past the last bound.
const exposition = `# HELP completiond_redis_commit_wait_seconds the time each event spent in the group commit
# TYPE completiond_redis_commit_wait_seconds histogram
completiond_redis_commit_wait_seconds_bucket{le="0.001"} 2
completiond_redis_commit_wait_seconds_bucket{le="0.0025"} 3
completiond_redis_commit_wait_seconds_bucket{le="2.5"} 3
completiond_redis_commit_wait_seconds_bucket{le="+Inf"} 4
completiond_redis_commit_wait_seconds_sum 3.004
completiond_redis_commit_wait_seconds_count 4
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
`

// TestCommitWaitHistogram: the replicas' histograms are read from their
// exposition (none yet: empty), summed over replicas, taken since an
// earlier reading, and read as quantiles interpolated within a bucket
// and as the share over a bound.
func TestCommitWaitHistogram(t *testing.T) {
	h, err := parseHistogram([]byte(exposition), commitWaitMetric)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{0.001, 0.0025, 2.5, math.Inf(1)}; !slices.Equal(h.bounds, want) || !slices.Equal(h.counts, []uint64{2, 3, 3, 4}) {
		t.Fatalf("parsed %v %v", h.bounds, h.counts)
	}
	none, err := parseHistogram([]byte("go_goroutines 12\n"), commitWaitMetric)
	if err != nil || none.total() != 0 {
		t.Fatalf("a replica that has not observed one: %+v, %v", none, err)
	}
	sum, err := none.add(h)
	if err != nil {
		t.Fatal(err)
	}
	if sum, err = sum.add(h); err != nil || sum.total() != 8 {
		t.Fatalf("two replicas: %+v, %v", sum, err)
	}
	since := sum.sub(h)
	if !slices.Equal(since.counts, []uint64{2, 3, 3, 4}) {
		t.Fatalf("since one reading: %v", since.counts)
	}
	for _, c := range []struct {
		q, want float64
	}{
		{0.25, 0.0005}, // rank 1 of the first bucket's 2: half of it
		{0.5, 0.001},   // its top
		{0.75, 0.0025}, // the second bucket's one
		{0.99, 2.5},    // in +Inf: the last finite bound
	} {
		if got := since.quantile(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile %v: %v, want %v", c.q, got, c.want)
		}
	}
	if got := since.over(0.0025); got != 0.25 {
		t.Errorf("over 2.5 ms: %v, want 0.25", got)
	}
	if !math.IsNaN(since.over(0.002)) || !math.IsNaN((&histogram{}).quantile(0.5)) {
		t.Error("a bound that is not a bucket's, or no observation, must give NaN")
	}
	other := &histogram{bounds: []float64{1, math.Inf(1)}, counts: []uint64{1, 1}}
	if _, err := h.add(other); err == nil {
		t.Error("histograms of different buckets summed")
	}
}
