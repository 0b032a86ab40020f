package experiment

import (
	"cmp"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
)

// z95 is the standard normal quantile of a two-sided 95% interval,
// Φ⁻¹(0.975) to the precision of a float64: every interval of the report
// uses it, and every report states it.
const z95 = 1.959963984540054

// Wilson is the Wilson score interval of k successes in n trials at
// z = z95 (Wilson 1927; Agresti & Coull 1998 on why it beats the Wald
// interval at small n and rates near 0 or 1). With p̂ = k/n:
//
//	centre = (p̂ + z²/2n) / (1 + z²/n)
//	half   = z/(1 + z²/n) · √(p̂(1−p̂)/n + z²/4n²)
//	[lo, hi] = [centre − half, centre + half]
//
// It is [0, 1] for n = 0: no trial says nothing. lo is exactly 0 for
// k = 0 and hi exactly 1 for k = n, which the formula gives up to
// rounding.
func Wilson(k, n int) (lo, hi float64) {
	if n <= 0 {
		return 0, 1
	}
	p := float64(k) / float64(n)
	nf := float64(n)
	z2 := z95 * z95
	denom := 1 + z2/nf
	centre := (p + z2/(2*nf)) / denom
	half := z95 / denom * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	lo, hi = centre-half, centre+half
	if k == 0 {
		lo = 0
	}
	if k == n {
		hi = 1
	}
	return max(lo, 0), min(hi, 1)
}

// McNemar is the two-sided exact McNemar test of a paired 2×2 table from
// its discordant cells: b pairs where only the first condition refused, c
// where only the second did. Under the null hypothesis each of the
// n = b + c discordant pairs goes either way with probability ½, so
//
//	p = min(1, 2 · Σ_{i=0}^{min(b,c)} C(n, i) / 2ⁿ)
//
// the two-sided binomial test (doubling the smaller tail). With no
// discordant pairs there is no evidence either way: p = 1. The sum is
// exact, in integers, up to exactMcNemar discordant pairs, so that a
// p-value worked out by hand is the one reported to the last digit; past
// that it is taken in log space, where no term overflows.
func McNemar(b, c int) float64 {
	n := b + c
	if n == 0 {
		return 1
	}
	k := min(b, c)
	if n > exactMcNemar {
		return mcnemarLog(n, k)
	}
	sum, term := new(big.Int), big.NewInt(1) // term = C(n, i)
	for i := 0; i <= k; i++ {
		sum.Add(sum, term)
		term.Mul(term, big.NewInt(int64(n-i)))
		term.Quo(term, big.NewInt(int64(i+1)))
	}
	p, _ := new(big.Rat).SetFrac(sum.Lsh(sum, 1), new(big.Int).Lsh(big.NewInt(1), uint(n))).Float64()
	return min(1, p)
}

// exactMcNemar bounds the tables McNemar sums exactly: 20,000 discordant
// pairs take a few tens of milliseconds.
const exactMcNemar = 20000

// mcnemarLog is McNemar's p for n discordant pairs, k the smaller cell,
// summed by log-sum-exp around the largest term.
func mcnemarLog(n, k int) float64 {
	lnHalfN := float64(n) * math.Ln2
	lnN1, _ := math.Lgamma(float64(n + 1))
	terms := make([]float64, k+1)
	top := math.Inf(-1)
	for i := 0; i <= k; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		d, _ := math.Lgamma(float64(n - i + 1))
		terms[i] = lnN1 - a - d - lnHalfN
		top = max(top, terms[i])
	}
	sum := 0.0
	for _, t := range terms {
		sum += math.Exp(t - top)
	}
	return min(1, 2*math.Exp(top+math.Log(sum)))
}

// percentile is the p-th percentile (0–100) of xs by the nearest-rank
// method: the smallest value with at least p% of the values at or below
// it, one of the values measured, never an interpolation. 0 for none.
func percentile(xs []int64, p float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

// Names of the paired tests a comparison reports (Paired.Test).
const (
	// PairedMcNemar is McNemar's exact test on the samples, each sample one
	// pair: what SignFlip is when every sample that differs differs by as
	// much (always so with one repeat).
	PairedMcNemar = "mcnemar_exact"
	// PairedSignFlip is the exact sign-flip test on the samples' differences
	// in their rates over their repeats.
	PairedSignFlip = "sign_flip_exact"
	// PairedSignFlipNormal is the sign-flip test by its normal approximation,
	// where the exact distribution is too large to sum.
	PairedSignFlipNormal = "sign_flip_normal"
)

// SampleDiff is one sample of a paired comparison: of its K repeats run
// without error under both conditions, A were refused under the first and
// B under the second.
type SampleDiff struct{ A, B, K int }

// SignFlip is the two-sided paired test of two conditions by sample, with
// repeats: the repeats of a sample are not independent pairs, so the
// sample is the unit, and its difference in refusal rate over its repeats,
// d = (B − A)/K, the measurement. Under the null hypothesis that the two
// conditions do not differ, each sample's difference is as likely to
// have either sign, so the test statistic T = Σ d is referred to the
// 2^m equally likely sums Σ ±|d| of the m samples that differ (Fisher's
// randomisation test for paired data, or the sign-flip test):
//
//	p = P(|S| ≥ |T|) = 2 · P(S ≤ −|T|), S = Σ εᵢ|dᵢ|, εᵢ = ±1 with probability ½
//
// and p = 1 when T = 0. The distribution of S is summed exactly, the
// differences put on a common denominator as integers. Where every |d|
// is the same, S counts the samples whose difference is positive, and
// the test is McNemar's exact test on the samples (McNemar): with one
// repeat the two are the same test. Past signFlipWork terms, or a common
// denominator past maxDenominator, S is taken as normal with its exact
// variance Σ d², with a continuity correction of half a step.
func SignFlip(samples []SampleDiff) (p float64, test string) {
	den := 1 // the least common multiple of the Ks of the samples that differ
	for _, s := range samples {
		if s.A != s.B && s.K > 0 {
			if den = den / gcd(den, s.K) * s.K; den > maxDenominator {
				break
			}
		}
	}
	if den > maxDenominator {
		return signFlipNormal(samples), PairedSignFlipNormal
	}
	var w []int // |d| · den
	t, g := 0, 0
	for _, s := range samples {
		if s.A == s.B || s.K <= 0 {
			continue
		}
		d := (s.B - s.A) * (den / s.K)
		w = append(w, abs(d))
		t += d
		g = gcd(g, abs(d))
	}
	if len(w) == 0 {
		return 1, PairedMcNemar
	}
	total, pos := 0, 0
	for i := range w {
		w[i] /= g
		total += w[i]
	}
	t /= g
	if total == len(w) { // every |d| the same: McNemar's test on the samples
		pos = (t + len(w)) / 2
		return McNemar(len(w)-pos, pos), PairedMcNemar
	}
	if t == 0 {
		return 1, PairedSignFlip
	}
	if len(w)*total > signFlipWork {
		return signFlipNormal(samples), PairedSignFlipNormal
	}
	// dist[x] = P(X = x), X the sum of the weights whose sign is +; S =
	// 2X − total, so S ≤ −|T| where X ≤ (total − |T|)/2.
	dist := make([]float64, total+1)
	dist[0] = 1
	top := 0
	for _, wi := range w {
		for x := top; x >= 0; x-- {
			dist[x+wi] += dist[x] / 2
			dist[x] /= 2
		}
		top += wi
	}
	tail := 0.0
	for x := 0; x <= (total-abs(t))/2; x++ {
		tail += dist[x]
	}
	return min(1, 2*tail), PairedSignFlip
}

// Bounds of the exact sign-flip sum: 50 million terms (samples × the sum
// of their weights) take some 20 ms on a 2-core VM, 24 million 10–11 ms
// (BenchmarkSignFlipAtItsBound); a common denominator past 2,520 (that of
// 1 to 10 repeats) comes only of samples with errors in some repeats.
const (
	signFlipWork   = 50_000_000
	maxDenominator = 2520
)

// signFlipNormal is SignFlip's p by the normal approximation: T over the
// square root of its variance Σ d² under the null hypothesis, less a
// continuity correction of half the smallest step of S (each step of S is
// 2·min|d|, so half of one is min|d|).
func signFlipNormal(samples []SampleDiff) float64 {
	t, v, step := 0.0, 0.0, math.Inf(1)
	for _, s := range samples {
		if s.A == s.B || s.K <= 0 {
			continue
		}
		d := float64(s.B-s.A) / float64(s.K)
		t += d
		v += d * d
		step = min(step, math.Abs(d))
	}
	if v == 0 {
		return 1
	}
	z := max(0, math.Abs(t)-step) / math.Sqrt(v)
	return min(1, math.Erfc(z/math.Sqrt2))
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Kappa is Cohen's kappa of two judges' yes-or-no verdicts on the same n
// items, from their 2×2 table: both said yes, only the first, only the
// second, neither. With p_o the share they agree on and p_e the share
// they would agree on by chance, from their margins,
//
//	κ = (p_o − p_e) / (1 − p_e)
//
// and its 95% interval is κ ± z·SE, with the large-sample standard error
// of Fleiss, Cohen & Everitt (1969), which does not assume κ = 0:
//
//	SE² = [ Σᵢ pᵢᵢ (1 − (pᵢ. + p.ᵢ)(1 − κ))² + (1 − κ)² Σᵢ≠ⱼ pᵢⱼ (p.ᵢ + pⱼ.)² − (κ − p_e(1 − κ))² ] / (n (1 − p_e)²)
//
// clipped to [−1, 1]. ok is false where κ is not defined: no item, or
// p_e = 1 (both judges said the same of every item, so chance explains
// all their agreement). ci is nil where κ is defined and its interval is
// not: where one judge said the same of every item, κ is 0 and the formula
// gives SE = 0, an interval [0, 0] that claims a certainty no data gives.
func Kappa(both, onlyFirst, onlySecond, neither int) (k float64, ci *[2]float64, ok bool) {
	n := float64(both + onlyFirst + onlySecond + neither)
	if n == 0 {
		return 0, nil, false
	}
	// p[i][j]: the first judge said i, the second j; 0 is yes, 1 is no.
	p := [2][2]float64{{float64(both) / n, float64(onlyFirst) / n}, {float64(onlySecond) / n, float64(neither) / n}}
	row := [2]float64{p[0][0] + p[0][1], p[1][0] + p[1][1]} // the first judge's margins
	col := [2]float64{p[0][0] + p[1][0], p[0][1] + p[1][1]} // the second's
	po := p[0][0] + p[1][1]
	pe := row[0]*col[0] + row[1]*col[1]
	if pe >= 1 {
		return 0, nil, false
	}
	k = (po - pe) / (1 - pe)
	if row[0] == 0 || row[1] == 0 || col[0] == 0 || col[1] == 0 {
		return k, nil, true
	}
	v := 0.0
	for i := range 2 {
		v += p[i][i] * math.Pow(1-(row[i]+col[i])*(1-k), 2)
		j := 1 - i
		v += (1 - k) * (1 - k) * p[i][j] * math.Pow(col[i]+row[j], 2)
	}
	v -= math.Pow(k-pe*(1-k), 2)
	se := math.Sqrt(max(0, v) / (n * (1 - pe) * (1 - pe)))
	return k, &[2]float64{max(-1, k-z95*se), min(1, k+z95*se)}, true
}

// NewcombePaired is the difference B − A between two paired proportions,
// from their 2×2 table (both, only A, only B, neither), with its 95%
// interval: Newcombe's hybrid score interval for paired data, method 10 of
// Newcombe (1998), "Improved confidence intervals for the difference
// between binomial proportions based on paired data", Statistics in
// Medicine 17:2635–2650. With pA = (both + onlyA)/n, pB = (both + onlyB)/n,
// θ = pB − pA, (lA, uA) and (lB, uB) their Wilson intervals (Wilson), and
// φ the correlation of the two margins,
//
//	L = θ − √((pB − lB)² − 2φ(pB − lB)(uA − pA) + (uA − pA)²)
//	U = θ + √((uB − pB)² − 2φ(uB − pB)(pA − lA) + (pA − lA)²)
//
// where φ = (ad − bc)/√((a+b)(c+d)(a+c)(b+d)) with a = both, b = only A,
// c = only B, d = neither, its numerator taken down by n/2 when positive
// (to 0 when that crosses 0), as Newcombe's paper, Altman et al.'s
// Statistics with Confidence (2nd ed., ch. 6) and Fagerland, Lydersen &
// Laake's contingencytables (Newcombe_square_and_add_CI_paired_2x2) do;
// φ = 0 where a margin is empty. ok is false for no pair.
func NewcombePaired(both, onlyA, onlyB, neither int) (diff, lo, hi float64, ok bool) {
	n := both + onlyA + onlyB + neither
	if n == 0 {
		return 0, 0, 0, false
	}
	nf := float64(n)
	pA, pB := float64(both+onlyA)/nf, float64(both+onlyB)/nf
	lA, uA := Wilson(both+onlyA, n)
	lB, uB := Wilson(both+onlyB, n)
	phi := 0.0
	if margins := float64(both+onlyA) * float64(onlyB+neither) * float64(both+onlyB) * float64(onlyA+neither); margins > 0 {
		num := float64(both)*float64(neither) - float64(onlyA)*float64(onlyB)
		switch {
		case num > nf/2:
			num -= nf / 2
		case num > 0:
			num = 0
		}
		phi = num / math.Sqrt(margins)
	}
	diff = pB - pA
	dl, du := pB-lB, uA-pA
	lo = diff - math.Sqrt(max(0, dl*dl-2*phi*dl*du+du*du))
	dl, du = uB-pB, pA-lA
	hi = diff + math.Sqrt(max(0, dl*dl-2*phi*dl*du+du*du))
	return diff, max(-1, lo), min(1, hi), true
}

// Resamples is how many times ClusterBootstrap resamples the samples.
const Resamples = 10_000

// ClusterBootstrap is the difference in rate B − A of a paired comparison
// with repeats, Σ(B − A)/ΣK over the samples, with its 95% percentile
// bootstrap interval: the samples, each with all its repeats (a cluster),
// are drawn with replacement Resamples times, the difference worked out
// on each draw, and the interval is the 2.5th and 97.5th percentiles of
// those differences (nearest rank). Resampling whole samples keeps the
// dependence of a sample's repeats, which resampling pairs would ignore
// (Davison & Hinkley 1997, §3.8; Field & Welsh 2007 on cluster
// bootstraps). The draws come from a PCG generator seeded with seed: the
// same seed gives the same interval. ok is false where no sample was
// paired.
func ClusterBootstrap(samples []SampleDiff, seed uint64) (diff, lo, hi float64, ok bool) {
	var kept []SampleDiff
	d, k := 0, 0
	for _, s := range samples {
		if s.K > 0 {
			kept = append(kept, s)
			d, k = d+s.B-s.A, k+s.K
		}
	}
	if len(kept) == 0 {
		return 0, 0, 0, false
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	diffs := make([]float64, Resamples)
	for r := range diffs {
		rd, rk := 0, 0
		for range kept {
			s := kept[rng.IntN(len(kept))]
			rd, rk = rd+s.B-s.A, rk+s.K
		}
		diffs[r] = float64(rd) / float64(rk)
	}
	slices.Sort(diffs)
	at := func(p float64) float64 { return diffs[max(int(math.Ceil(p*Resamples)), 1)-1] }
	return float64(d) / float64(k), at(0.025), at(0.975), true
}

// Ways to adjust a family of p-values for multiple comparisons (Adjust).
const (
	AdjustHolm = "holm"
	AdjustBH   = "bh"
	AdjustNone = "none"
)

// Adjust adjusts a family of p-values for the number of them, by method.
// Holm's step-down procedure (Holm 1979, "A simple sequentially rejective
// multiple test procedure", Scand. J. Statist. 6:65–70) controls the
// family-wise error rate under any dependence: with the m p-values in
// ascending order p₍₁₎ ≤ … ≤ p₍ₘ₎,
//
//	adj₍ᵢ₎ = max_{j ≤ i} min(1, (m − j + 1) p₍ⱼ₎)
//
// Benjamini & Hochberg's step-up procedure (1995, JRSS B 57:289–300)
// controls the false discovery rate for independent or positively
// dependent tests:
//
//	adj₍ᵢ₎ = min_{j ≥ i} min(1, m p₍ⱼ₎ / j)
//
// as R's p.adjust gives them. "none" returns the p-values as they are.
// The result is in the order of ps.
func Adjust(ps []float64, method string) []float64 {
	m := len(ps)
	out := slices.Clone(ps)
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ps[a], ps[b]) })
	switch method {
	case AdjustHolm:
		running := 0.0
		for rank, i := range order {
			running = max(running, min(1, float64(m-rank)*ps[i]))
			out[i] = running
		}
	case AdjustBH:
		running := 1.0
		for rank := m - 1; rank >= 0; rank-- {
			i := order[rank]
			running = min(running, min(1, float64(m)*ps[i]/float64(rank+1)))
			out[i] = running
		}
	}
	return out
}
