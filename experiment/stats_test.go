package experiment

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 5e-6 }

// Wilson's interval against values worked out by hand from
// centre = (p̂ + z²/2n)/(1 + z²/n), half = z/(1 + z²/n)·√(p̂(1−p̂)/n + z²/4n²),
// z = 1.96 (z² = 3.8415).
func TestWilson(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{
		// 7/9: p̂ = .77778; 1 + z²/9 = 1.42683; centre = (.77778 + .21342)/1.42683
		// = .69469; half = 1.37368·√(.019204 + .011856) = .24210.
		{7, 9, 0.452589, 0.936775},
		// 1/9: centre = (.11111 + .21342)/1.42683 = .22745; half = 1.37368·√(.010974 +
		// .011856) = .20754.
		{1, 9, 0.019891, 0.435000},
		// 5/10: centre = .5 exactly (symmetric); 1 + z²/10 = 1.38415; half =
		// 1.41601·√(.025 + .0096037) = .26341.
		{5, 10, 0.236593, 0.763407},
		// 0/10: lo is 0; hi = 2·(z²/20)/1.38415 = 2·.19207/1.38415 = .27753.
		{0, 10, 0, 0.277533},
		// 10/10 mirrors 0/10.
		{10, 10, 0.722467, 1},
		// 0/32, the sample set's size: hi = 2·(z²/64)/(1 + z²/32) = .12004/1.12004 = .10718.
		{0, 32, 0, 0.107179},
		// No trial: no information.
		{0, 0, 0, 1},
	} {
		lo, hi := Wilson(c.k, c.n)
		if !near(lo, c.lo) || !near(hi, c.hi) {
			t.Errorf("Wilson(%d, %d) = [%.6f, %.6f], want [%.6f, %.6f]", c.k, c.n, lo, hi, c.lo, c.hi)
		}
	}
}

// McNemar's exact p-value against the binomial sums worked out by hand:
// p = min(1, 2·Σ_{i≤min(b,c)} C(b+c, i)/2^(b+c)).
func TestMcNemar(t *testing.T) {
	for _, c := range []struct {
		b, c int
		p    float64
	}{
		{0, 0, 1},               // no discordant pair: no evidence either way
		{0, 6, 2.0 / 64},        // 2·C(6,0)/64 = .03125
		{6, 0, 2.0 / 64},        // symmetric
		{1, 5, 2 * 7.0 / 64},    // 2·(1 + 6)/64 = .21875
		{3, 3, 1},               // 2·(1 + 6 + 15 + 20)/64 = 1.3125, capped at 1
		{1, 1, 1},               // 2·(1 + 2)/4 = 1.5, capped
		{0, 1, 1},               // 2·1/2 = 1
		{0, 10, 2.0 / 1024},     // 2·1/1024 = .001953125
		{2, 8, 2 * 56.0 / 1024}, // 2·(1 + 10 + 45)/1024 = .109375
		{10, 30, 0.0022214338},  // 2·Σ_{i≤10} C(40,i)/2^40 = 2·1221246132/1099511627776
	} {
		if p := McNemar(c.b, c.c); math.Abs(p-c.p) > 1e-10*max(1, 1/c.p) {
			t.Errorf("McNemar(%d, %d) = %.10f, want %.10f", c.b, c.c, p, c.p)
		}
	}
	// Large tables do not overflow: 5 against 5000 discordant pairs is
	// overwhelming evidence (p ≈ 1e-1490, which float64 holds as 0), 2500
	// each none, and 40 against 60 is computed as a sum, not as terms that
	// overflow: 2·Σ_{i≤40} C(100,i)/2^100 = .0568879.
	if p := McNemar(40, 60); math.Abs(p-0.0568879) > 1e-7 {
		t.Errorf("McNemar(40, 60) = %.8f", p)
	}
	if p := McNemar(5, 5000); p < 0 || p > 1e-300 {
		t.Errorf("McNemar(5, 5000) = %g", p)
	}
	if p := McNemar(2500, 2500); p != 1 {
		t.Errorf("McNemar(2500, 2500) = %g", p)
	}
}

// Nearest-rank percentiles: the smallest value with at least p% at or below.
func TestPercentile(t *testing.T) {
	xs := []int64{50, 10, 40, 20, 30, 100, 90, 80, 70, 60}
	// sorted: 10 20 … 100; p50 → rank ⌈5⌉ = 5 → 50; p95 → rank ⌈9.5⌉ = 10 → 100.
	if p50, p95 := percentile(xs, 50), percentile(xs, 95); p50 != 50 || p95 != 100 {
		t.Errorf("p50 %d p95 %d", p50, p95)
	}
	if percentile(nil, 50) != 0 || percentile([]int64{7}, 95) != 7 {
		t.Error("percentile of none or one")
	}
}

// The by-sample test against p-values counted independently, by
// enumerating every one of the 2^m sign assignments with Python's
// fractions (the script is below), not by the sum SignFlip makes:
//
//	from fractions import Fraction; import itertools
//	def signflip(d):  # d: (A refused, B refused, K repeats) per sample
//	    d = [Fraction(b - a, k) for a, b, k in d if a != b]
//	    T, m = abs(sum(d)), len(d)
//	    hits = sum(abs(sum(s * abs(x) for s, x in zip(signs, d))) >= T
//	               for signs in itertools.product([1, -1], repeat=m))
//	    return Fraction(hits, 2 ** m)
func TestSignFlip(t *testing.T) {
	rep := func(n int, d SampleDiff) []SampleDiff {
		out := make([]SampleDiff, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	for _, c := range []struct {
		name    string
		samples []SampleDiff
		p       float64
		test    string
	}{
		// The case: 7 samples refused under B in both of 2 repeats,
		// none under A. As 14 independent pairs McNemar's p is 2/2^14 =
		// .000122; as 7 samples, 2/2^7 = 1/64.
		{"seven samples, two repeats", rep(7, SampleDiff{0, 2, 2}), 1.0 / 64, PairedMcNemar},
		// One repeat: McNemar's exact test on the samples, 6 against 0.
		{"one repeat", append(rep(6, SampleDiff{0, 1, 1}), rep(3, SampleDiff{1, 1, 1})...), 2.0 / 64, PairedMcNemar},
		// Differences of 1 and ½: enumeration gives 5/256.
		{"halves", append(append(rep(5, SampleDiff{0, 2, 2}), rep(3, SampleDiff{0, 1, 2})...), SampleDiff{1, 0, 2}), 5.0 / 256, PairedSignFlip},
		// Thirds and halves (a sample with an error in one of its three
		// repeats has K = 2): enumeration gives 3/32.
		{"thirds and halves", []SampleDiff{{0, 3, 3}, {0, 2, 3}, {1, 3, 3}, {0, 1, 3}, {2, 0, 3}, {0, 1, 2}, {0, 2, 2}}, 3.0 / 32, PairedSignFlip},
		// Opposite differences cancel: T = 0.
		{"cancelling", []SampleDiff{{0, 1, 2}, {1, 0, 2}}, 1, PairedMcNemar},
		{"no difference", rep(4, SampleDiff{1, 1, 2}), 1, PairedMcNemar},
		{"none", nil, 1, PairedMcNemar},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, test := SignFlip(c.samples)
			if math.Abs(p-c.p) > 1e-12 || test != c.test {
				t.Errorf("SignFlip = %.12f (%s), want %.12f (%s)", p, test, c.p, c.test)
			}
		})
	}
	// Past the exact sum's bound, the normal approximation: 3,000 samples
	// with a difference of ½ and 3,000 of 1/3, all one way, is beyond
	// doubt; as many each way is no evidence at all.
	many := append(rep(3000, SampleDiff{0, 1, 2}), rep(3000, SampleDiff{0, 1, 3})...)
	if p, test := SignFlip(many); test != PairedSignFlipNormal || p > 1e-300 {
		t.Errorf("many one way: %g (%s)", p, test)
	}
	balanced := append(rep(3000, SampleDiff{0, 1, 2}), rep(3000, SampleDiff{1, 0, 2})...)
	balanced = append(balanced, append(rep(3000, SampleDiff{0, 1, 3}), rep(3000, SampleDiff{1, 0, 3})...)...)
	if p, _ := SignFlip(balanced); p != 1 {
		t.Errorf("many each way: %g", p)
	}
}

// Cohen's kappa and its interval against values computed independently,
// with the delta-method variance in Congalton's form (θ₁…θ₄), not the
// Fleiss–Cohen–Everitt form Kappa uses; the two are algebraically one.
// In Python, t[i][j] the count the first judge said i and the second j:
//
//	t = [[20, 5], [10, 15]]; row = [25, 25]; col = [30, 20]; n = 50
//	th1 = (20 + 15)/n = .7; th2 = (25·30 + 25·20)/n² = .5
//	th3 = (20·(25 + 30) + 15·(25 + 20))/n² = .71
//	th4 = Σ t[i][j]·(row[j] + col[i])²/n³ = (20·55² + 5·55² + 10·45² + 15·45²)/n³ = 1.01
//	κ = (th1 − th2)/(1 − th2) = .4
//	var = (th1(1 − th1)/(1 − th2)² + 2(1 − th1)(2·th1·th2 − th3)/(1 − th2)³
//	       + (1 − th1)²(th4 − 4·th2²)/(1 − th2)⁴)/n; se = .126996
//	[κ − 1.96·se, κ + 1.96·se] = [.151092, .648908]
func TestKappa(t *testing.T) {
	for _, c := range []struct {
		both, first, second, neither int
		k, lo, hi                    float64
		ok                           bool
	}{
		{20, 5, 10, 15, 0.4, 0.151092, 0.648908, true},
		// κ = (.85 − .42)/(1 − .42) = .693878; se .161935; hi clipped to 1.
		{7, 1, 2, 10, 0.693878, 0.376491, 1, true},
		// Perfect agreement: se 0.
		{1, 0, 0, 9, 1, 1, 1, true},
		// Worse than chance: κ = (.4 − .5)/(1 − .5) = −.2; se .283972.
		{3, 2, 4, 1, -0.2, -0.756575, 0.356575, true},
		// Both judges said no of everything: p_e = 1, κ undefined.
		{0, 0, 0, 12, 0, 0, 0, false},
		{0, 0, 0, 0, 0, 0, 0, false},
	} {
		k, lo, hi, ok := Kappa(c.both, c.first, c.second, c.neither)
		if ok != c.ok || !near(k, c.k) || !near(lo, c.lo) || !near(hi, c.hi) {
			t.Errorf("Kappa(%d, %d, %d, %d) = %.6f [%.6f, %.6f] %v, want %.6f [%.6f, %.6f] %v",
				c.both, c.first, c.second, c.neither, k, lo, hi, ok, c.k, c.lo, c.hi, c.ok)
		}
	}
}

// The exact sign-flip sum half way to its bound (signFlipWork): 4,166
// samples that differ, by ½ or by 1 over 2 repeats, the weights summing to
// 5,833: 2.4e7 of the bound's terms.
func BenchmarkSignFlipAtItsBound(b *testing.B) {
	samples := make([]SampleDiff, 5000)
	for i := range samples {
		samples[i] = SampleDiff{A: i % 2, B: 2 - i%3%2, K: 2}
	}
	var p float64
	for b.Loop() {
		p, _ = SignFlip(samples)
	}
	if p < 0 || p > 1 {
		b.Fatal(p)
	}
}
