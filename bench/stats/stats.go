// Package stats summarizes what a benchmark measured over its rounds: the
// median, which noisy machines leave the most stable, and the range, which
// says how noisy they were.
package stats

import (
	"math"
	"slices"
	"strconv"
	"time"
)

// Summary is a sample's median and range, rounded to a tenth; -1 for a
// sample with nothing in it.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize is the median and range of xs.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{-1, -1, -1}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	round := func(x float64) float64 { return math.Round(x*10) / 10 }
	return Summary{round((s[(n-1)/2] + s[n/2]) / 2), round(s[0]), round(s[n-1])}
}

// String is "median (min–max)", or "-" for an empty sample.
func (s Summary) String() string {
	if s.Median < 0 {
		return "-"
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	return f(s.Median) + " (" + f(s.Min) + "–" + f(s.Max) + ")"
}

// Ms is d in milliseconds, to the microsecond.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
