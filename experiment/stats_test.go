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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	for _, c := range []struct {
		both, first, second, neither int
		k, lo, hi                    float64
		ok, interval                 bool
	}{
		{20, 5, 10, 15, 0.4, 0.151092, 0.648908, true, true},
		// κ = (.85 − .42)/(1 − .42) = .693878; se .161935; hi clipped to 1.
		{7, 1, 2, 10, 0.693878, 0.376491, 1, true, true},
		// Perfect agreement: se 0.
		{1, 0, 0, 9, 1, 1, 1, true, true},
		// Worse than chance: κ = (.4 − .5)/(1 − .5) = −.2; se .283972.
		{3, 2, 4, 1, -0.2, -0.756575, 0.356575, true, true},
		// The first judge never said yes: p_o = p_e = .7, κ = 0, and the
		// standard error's formula gives 0, which is no interval.
		{0, 0, 3, 7, 0, 0, 0, true, false},
		// Nor the second.
		{0, 4, 0, 6, 0, 0, 0, true, false},
		// Both judges said no of everything: p_e = 1, κ undefined.
		{0, 0, 0, 12, 0, 0, 0, false, false},
		{0, 0, 0, 0, 0, 0, 0, false, false},
	} {
		k, ci, ok := Kappa(c.both, c.first, c.second, c.neither)
		lo, hi := 0.0, 0.0
		if ci != nil {
			lo, hi = ci[0], ci[1]
		}
		if ok != c.ok || (ci != nil) != c.interval || !near(k, c.k) || !near(lo, c.lo) || !near(hi, c.hi) {
			t.Errorf("Kappa(%d, %d, %d, %d) = %.6f %v %v, want %.6f [%.6f, %.6f] (interval %v) %v",
				c.both, c.first, c.second, c.neither, k, ci, ok, c.k, c.lo, c.hi, c.interval, c.ok)
		}
	}
}

// Newcombe's method 10 against the paper's own Table II, to the four
// decimals it prints (Newcombe 1998, Statistics in Medicine 17:2635–2650;
// the paper's e, f, g, h are both, only the first, only the second,
// neither, and its difference the first minus the second: here the first
// is B). Examples (a)–(d): 36, 12, 2, 0 → [.0569, .3404]; 18, 12, 2, 18 →
// [.0562, .3290]; 53, 0, 0, 1 → [−.0729, .0729]; 0, 30, 0, 0 → [.8395,
// 1].
func TestNewcombePaired(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		both, onlyFirst, onlySecond, neither int
		diff, lo, hi                         float64
	}{
		{36, 12, 2, 0, 0.2, 0.0569, 0.3404},
		{18, 12, 2, 18, 0.2, 0.0562, 0.3290},
		{53, 0, 0, 1, 0, -0.0729, 0.0729},
		{0, 30, 0, 0, 1, 0.8395, 1},
	} {
		// B is the paper's first condition: only B is its f.
		d, lo, hi, ok := NewcombePaired(c.both, c.onlySecond, c.onlyFirst, c.neither)
		if !ok || math.Abs(d-c.diff) > 1e-12 || math.Abs(lo-c.lo) > 5e-5 || math.Abs(hi-c.hi) > 5e-5 {
			t.Errorf("NewcombePaired(%d, %d, %d, %d) = %.4f [%.4f, %.4f], want %.4f [%.4f, %.4f]",
				c.both, c.onlySecond, c.onlyFirst, c.neither, d, lo, hi, c.diff, c.lo, c.hi)
		}
		// A − B is the mirror image.
		d, lo, hi, _ = NewcombePaired(c.both, c.onlyFirst, c.onlySecond, c.neither)
		if math.Abs(d+c.diff) > 1e-12 || math.Abs(lo+c.hi) > 5e-5 || math.Abs(hi+c.lo) > 5e-5 {
			t.Errorf("mirrored: %.4f [%.4f, %.4f], want %.4f [%.4f, %.4f]", d, lo, hi, -c.diff, -c.hi, -c.lo)
		}
	}
	if _, _, _, ok := NewcombePaired(0, 0, 0, 0); ok {
		t.Error("an interval for no pair")
	}
}

// Holm's and Benjamini–Hochberg's adjustments of the textbook family:
// the 15 p-values of Benjamini & Hochberg (1995, §4), of which BH at
// q = .05 rejects the four smallest and Holm's procedure, as Bonferroni's,
// the three smallest (the paper's own conclusion). The adjusted values are
// R's p.adjust(p, "holm") and p.adjust(p, "BH"), computed apart in Python
// from those definitions.
func TestAdjust(t *testing.T) {
	t.Parallel()
	ps := []float64{0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1}
	want := map[string][]float64{
		AdjustHolm: {0.0015, 0.0056, 0.0247, 0.114, 0.2211, 0.278, 0.278, 0.278, 0.3213, 1, 1, 1, 1, 1, 1},
		AdjustBH:   {0.0015, 0.003, 0.0095, 0.035625, 0.0603, 0.063857, 0.063857, 0.0645, 0.0765, 0.486, 0.581182, 0.714875, 0.753231, 0.813214, 1},
		AdjustNone: ps,
	}
	rejects := map[string]int{AdjustHolm: 3, AdjustBH: 4, AdjustNone: 9}
	// Shuffled, the family keeps its order.
	perm := []int{7, 3, 14, 0, 9, 1, 12, 5, 2, 11, 8, 4, 13, 6, 10}
	shuffled := make([]float64, len(ps))
	for i, j := range perm {
		shuffled[i] = ps[j]
	}
	for method, w := range want {
		got := Adjust(shuffled, method)
		n := 0
		for i, j := range perm {
			if math.Abs(got[i]-w[j]) > 5e-7 {
				t.Errorf("%s: p = %v adjusted to %v, want %v", method, ps[j], got[i], w[j])
			}
			if got[i] <= 0.05 {
				n++
			}
		}
		if n != rejects[method] {
			t.Errorf("%s rejects %d at .05, want %d", method, n, rejects[method])
		}
	}
}

// The cluster bootstrap's interval holds its point, is the same again from
// the same seed, and moves a little with another; with every sample alike it is the
// point itself, and it widens as the samples disagree more.
func TestClusterBootstrap(t *testing.T) {
	t.Parallel()
	var samples []SampleDiff
	for i := range 40 {
		samples = append(samples, SampleDiff{A: i % 3, B: (i*7)%4 - i%4/3, K: 3})
	}
	d, lo, hi, ok := ClusterBootstrap(samples, 7)
	sumD, sumK := 0, 0
	for _, s := range samples {
		sumD, sumK = sumD+s.B-s.A, sumK+s.K
	}
	if !ok || d != float64(sumD)/float64(sumK) || lo > d || d > hi || lo == hi {
		t.Fatalf("ClusterBootstrap = %v [%v, %v] %v, want the point %v inside a proper interval", d, lo, hi, ok, float64(sumD)/float64(sumK))
	}
	if d2, lo2, hi2, _ := ClusterBootstrap(samples, 7); d2 != d || lo2 != lo || hi2 != hi {
		t.Errorf("seed 7 again: %v [%v, %v], first %v [%v, %v]", d2, lo2, hi2, d, lo, hi)
	}
	// Another seed draws other resamples: the interval's ends, order
	// statistics of a discrete statistic, move by a step at most.
	moved := false
	for seed := range uint64(10) {
		_, lo3, hi3, _ := ClusterBootstrap(samples, seed)
		moved = moved || lo3 != lo || hi3 != hi
		if math.Abs(lo3-lo) > 0.03 || math.Abs(hi3-hi) > 0.03 {
			t.Errorf("seed %d: [%v, %v], seed 7's [%v, %v]", seed, lo3, hi3, lo, hi)
		}
	}
	if !moved {
		t.Error("ten seeds give seed 7's interval: the seed is not used")
	}
	same := []SampleDiff{{A: 1, B: 2, K: 2}, {A: 1, B: 2, K: 2}, {A: 0, B: 1, K: 2}}
	if d, lo, hi, _ := ClusterBootstrap(same, 1); d != 0.5 || lo != 0.5 || hi != 0.5 {
		t.Errorf("samples alike: %v [%v, %v], want .5 [.5, .5]", d, lo, hi)
	}
	if _, _, _, ok := ClusterBootstrap([]SampleDiff{{K: 0}}, 1); ok {
		t.Error("an interval for no sample paired")
	}
	// Its width against the normal approximation's, for the sample mean of
	// the clusters' differences (with equal K, the statistic is that mean):
	// 2·1.96·sd/√m within a tenth.
	var sum, sq float64
	for _, s := range samples {
		x := float64(s.B-s.A) / 3
		sum += x
		sq += x * x
	}
	m := float64(len(samples))
	sd := math.Sqrt((sq - sum*sum/m) / m)
	if w, want := hi-lo, 2*z95*sd/math.Sqrt(m); math.Abs(w-want) > 0.1*want {
		t.Errorf("interval width %.4f, want about %.4f", w, want)
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

// For any paired table, Newcombe's interval holds its difference and lies
// within [−1, 1], and A − B is its mirror image; the cluster bootstrap's
// holds its point too.
func FuzzNewcombePaired(f *testing.F) {
	for _, c := range [][4]uint16{{36, 12, 2, 0}, {0, 30, 0, 0}, {0, 0, 0, 1}, {1, 1, 1, 1}, {500, 3, 900, 2}} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, both, onlyA, onlyB, neither uint16) {
		d, lo, hi, ok := NewcombePaired(int(both), int(onlyA), int(onlyB), int(neither))
		if !ok {
			if both+onlyA+onlyB+neither != 0 {
				t.Fatalf("no interval for %d %d %d %d", both, onlyA, onlyB, neither)
			}
			return
		}
		if math.IsNaN(lo) || math.IsNaN(hi) || lo < -1 || hi > 1 || lo > d+1e-12 || d > hi+1e-12 {
			t.Fatalf("%d %d %d %d: %v [%v, %v]", both, onlyA, onlyB, neither, d, lo, hi)
		}
		md, mlo, mhi, _ := NewcombePaired(int(both), int(onlyB), int(onlyA), int(neither))
		if math.Abs(md+d) > 1e-12 || math.Abs(mlo+hi) > 1e-9 || math.Abs(mhi+lo) > 1e-9 {
			t.Fatalf("%d %d %d %d: %v [%v, %v], mirrored %v [%v, %v]", both, onlyA, onlyB, neither, d, lo, hi, md, mlo, mhi)
		}
		samples := make([]SampleDiff, 0, 8)
		for i, n := range []uint16{both % 8, onlyA % 8, onlyB % 8, neither % 8} {
			for range n {
				samples = append(samples, SampleDiff{A: map[bool]int{true: 1}[i < 2], B: map[bool]int{true: 1}[i == 0 || i == 2], K: 1})
			}
		}
		if bd, blo, bhi, ok := ClusterBootstrap(samples, 1); ok && (blo > bd || bd > bhi) {
			t.Fatalf("bootstrap of %v: %v [%v, %v]", samples, bd, blo, bhi)
		}
	})
}

// The cluster bootstrap of a comparison of 1,000 samples with 3 repeats:
// a report computes one a measure a comparison, each time it is asked for.
func BenchmarkClusterBootstrap(b *testing.B) {
	samples := make([]SampleDiff, 1000)
	for i := range samples {
		samples[i] = SampleDiff{A: i % 4 % 3, B: i % 3, K: 3}
	}
	for b.Loop() {
		ClusterBootstrap(samples, 1)
	}
}
