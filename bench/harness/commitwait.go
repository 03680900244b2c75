package harness

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// commitWaitMetric is the histogram a fleet replica keeps of each event's
// time in the group commit, from its append to Redis's acknowledgement of
// its flush (--metrics-addr).
const commitWaitMetric = "completiond_redis_commit_wait_seconds"

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound (seconds), +Inf last, summed over processes.
type histogram struct {
	bounds []float64
	counts []uint64
}

// readCommitWait reads the group commit's waits from each process's
// Prometheus endpoint, summed.
func readCommitWait(ctx context.Context, procs []*proc) (*histogram, error) {
	var sum *histogram
	for _, p := range procs {
		body, err := get(ctx, "http://"+p.metrics+"/metrics")
		if err != nil {
			return nil, err
		}
		h, err := parseHistogram(body, commitWaitMetric)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.metrics, err)
		}
		if sum, err = sum.add(h); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// parseHistogram finds the histogram name in a Prometheus text exposition:
// empty when the process has not observed it yet.
func parseHistogram(body []byte, name string) (*histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := &histogram{}
	f := families[name]
	if f == nil {
		return h, nil
	}
	if f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 1 {
		return nil, fmt.Errorf("%s: want one histogram, got %d of type %v", name, len(f.GetMetric()), f.GetType())
	}
	ph := f.GetMetric()[0].GetHistogram()
	for _, b := range ph.GetBucket() {
		h.bounds = append(h.bounds, b.GetUpperBound())
		h.counts = append(h.counts, b.GetCumulativeCount())
	}
	if len(h.bounds) == 0 || !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
		h.bounds = append(h.bounds, math.Inf(1))
		h.counts = append(h.counts, ph.GetSampleCount())
	}
	return h, nil
}

// add is h and o summed (either may be nil or empty).
func (h *histogram) add(o *histogram) (*histogram, error) {
	switch {
	case h == nil || len(h.bounds) == 0:
		return o, nil
	case o == nil || len(o.bounds) == 0:
		return h, nil
	case !slices.Equal(h.bounds, o.bounds):
		return nil, fmt.Errorf("%s: buckets differ: %v, %v", commitWaitMetric, h.bounds, o.bounds)
	}
	s := &histogram{bounds: h.bounds, counts: slices.Clone(h.counts)}
	for i, c := range o.counts {
		s.counts[i] += c
	}
	return s, nil
}

// sub is what h counted since h0 (an earlier reading of the same
// processes).
func (h *histogram) sub(h0 *histogram) *histogram {
	if h == nil || len(h.bounds) == 0 {
		return nil
	}
	d := &histogram{bounds: h.bounds, counts: slices.Clone(h.counts)}
	if h0 != nil && slices.Equal(h0.bounds, h.bounds) {
		for i, c := range h0.counts {
			d.counts[i] -= c
		}
	}
	return d
}

// total is the number of observations.
func (h *histogram) total() uint64 {
	if h == nil || len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile is the q-quantile (0–1), interpolated linearly within its
// bucket as Prometheus's histogram_quantile does; the last finite bound
// when it falls in +Inf; NaN without observations.
func (h *histogram) quantile(q float64) float64 {
	n := h.total()
	if n == 0 || len(h.bounds) < 2 {
		return math.NaN()
	}
	rank := q * float64(n)
	i, _ := slices.BinarySearchFunc(h.counts, rank, func(c uint64, r float64) int {
		if float64(c) < r {
			return -1
		}
		return 1
	})
	if i >= len(h.bounds)-1 { // +Inf
		return h.bounds[len(h.bounds)-2]
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.bounds[i-1], h.counts[i-1]
	}
	in := h.counts[i] - below
	if in == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-float64(below))/float64(in)
}

// over is the share of observations above bound, which must be one of
// the buckets' bounds.
func (h *histogram) over(bound float64) float64 {
	n := h.total()
	i := slices.Index(h.bounds, bound)
	if n == 0 || i < 0 {
		return math.NaN()
	}
	return float64(n-h.counts[i]) / float64(n)
}
