// Package stats summarizes what a benchmark measured over its rounds: the
// median, which noisy machines leave the most stable, and the range, which
// says how noisy they were.
package stats

import (
	"fmt"
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
	round := func(x float64) float64 { return math.Round(x*10) / 10 }
	return Summary{round(Median(xs)), round(slices.Min(xs)), round(slices.Max(xs))}
}

// Median is the middle of xs, or the mean of the two middles; xs is left
// as it was. It is zero for an empty xs.
func Median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	return (s[(n-1)/2] + s[n/2]) / 2
}

// Spread is "median (min–max)" of xs, each written with verb (as "%.1f"):
// the median alone for one value, "-" for none.
func Spread(xs []float64, verb string) string {
	switch len(xs) {
	case 0:
		return "-"
	case 1:
		return fmt.Sprintf(verb, xs[0])
	}
	return fmt.Sprintf(verb+" ("+verb+"–"+verb+")", Median(xs), slices.Min(xs), slices.Max(xs))
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
