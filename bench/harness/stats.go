package harness

import (
	"slices"
	"time"
)

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of d, or 0
// for no samples. It sorts d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	rank := int(float64(len(d))*p/100+0.999999) - 1
	return d[min(max(rank, 0), len(d)-1)]
}

// spread is the median, least and greatest of some values; ok is false
// when there are none.
type spread struct {
	med, lo, hi float64
	ok          bool
}

// spreadOf is the spread of v.
func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{med: med, lo: s[0], hi: s[len(s)-1], ok: true}
}
