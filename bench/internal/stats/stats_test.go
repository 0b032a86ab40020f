package stats

import (
	"testing"
	"time"
)

func TestMedianAndSpread(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("odd: %v", m)
	}
	if m := Median([]time.Duration{4, 1, 3, 2}); m != 2 { // (2+3)/2, in whole nanoseconds
		t.Errorf("even durations: %v", m)
	}
	xs := []float64{0.25, 4, 1.5, 2}
	if s := Spread(xs, "%.2f"); s != "1.75 (0.25–4.00)" {
		t.Errorf("spread %q", s)
	}
	if xs[0] != 0.25 || xs[1] != 4 {
		t.Errorf("xs was sorted in place: %v", xs)
	}
	if s := Spread(nil, "%.1f") + Spread([]float64{7}, "%.1fs"); s != "-7.0s" {
		t.Errorf("none and one: %q", s)
	}
	if s := Summarize([]float64{1.04, 2.06, 9}); s.String() != "2.1 (1–9)" {
		t.Errorf("summary %q", s)
	}
}
