package experiment

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Markdown is the report as tables a paper could print (report.md).
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", mdText(r.Name))
	fmt.Fprintf(&b, "Experiment `%s`, created %s, %s.  \n", r.ExperimentID, r.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"), r.Status)
	fmt.Fprintf(&b, "%d samples (%d harmful, %d benign) × %d %s × %d %s: %d of %d outcomes recorded.  \n",
		r.Samples[Harmful]+r.Samples[Benign], r.Samples[Harmful], r.Samples[Benign], r.Repeats, plural(r.Repeats, "repeat", "repeats"),
		len(r.Conditions), plural(len(r.Conditions), "condition", "conditions"), r.Outcomes, r.Total)
	if r.RefusalJudge.Kind == "model" {
		fmt.Fprintf(&b, "Refusal judge: the model `%s` classified each final answer no superego had refused.  \n", r.RefusalJudge.Name)
	} else {
		fmt.Fprintf(&b, "Refusal judge: the built-in heuristic `%s` (a refusal phrase in the answer's first 200 characters), not a model: an answer it calls a refusal or not is not a model's judgement.  \n", r.RefusalJudge.Name)
	}
	fmt.Fprintf(&b, "Model calls: %d made, %d served from the reply cache or shared with the same call in flight, %d steps reused by replays", r.Calls.Made, r.Calls.Cached, r.Calls.Reused)
	if r.Calls.Judge > 0 {
		fmt.Fprintf(&b, "; %d of them the refusal judge's", r.Calls.Judge)
	}
	b.WriteString(".\n\n")
	b.WriteString("![Refusal rates with their 95% intervals, per condition and category](report.svg)\n\n")

	shown := r.shown()
	b.WriteString("## Refusal rates\n\n")
	b.WriteString("| condition | flow |")
	for _, m := range shown {
		fmt.Fprintf(&b, " %s | rate | 95%% CI |", m.title)
	}
	b.WriteString(" errors |\n|---|---|" + strings.Repeat("---:|---:|---|", len(shown)) + "---:|\n")
	for _, c := range r.Conditions {
		errs := strconv.Itoa(c.Errors)
		if c.Diverged > 0 {
			errs += fmt.Sprintf(" (+%d diverged)", c.Diverged)
		}
		fmt.Fprintf(&b, "| %s | %s |", mdText(c.Name), mdText(describe(c)))
		for _, m := range shown {
			rt := *m.rate(&c)
			fmt.Fprintf(&b, " %s | %s | %s |", fraction(rt), percent(rt.Rate), interval(rt.CI95))
		}
		fmt.Fprintf(&b, " %s |\n", errs)
	}
	b.WriteString("\nRates are over the outcomes that did not fail; errors (provider errors, timeouts) are counted apart. Intervals are Wilson score intervals (z = 1.96).\n")
	for _, m := range shown {
		if note := statistics[m.key]; note != "" && m.key != Harmful && m.key != Benign {
			fmt.Fprintf(&b, "%s: %s.  \n", m.title, note)
		}
	}
	b.WriteString("\n")

	if len(r.Categories) > 0 {
		b.WriteString("## Refusal rates by category\n\n| category | condition |")
		for _, m := range shown {
			fmt.Fprintf(&b, " %s | rate | 95%% CI |", m.title)
		}
		b.WriteString("\n|---|---|" + strings.Repeat("---:|---:|---|", len(shown)) + "\n")
		for _, cat := range r.Categories {
			for _, c := range r.Conditions {
				fmt.Fprintf(&b, "| %s | %s |", mdText(categoryName(cat)), mdText(c.Name))
				for _, m := range shown {
					rt := c.Categories[cat][m.key]
					fmt.Fprintf(&b, " %s | %s | %s |", fraction(rt), percent(rt.Rate), interval(rt.CI95))
				}
				b.WriteString("\n")
			}
		}
		b.WriteString("\n")
	}

	if len(r.Comparisons) > 0 {
		b.WriteString("## Paired comparisons\n\n")
		b.WriteString("Each condition against the one it is paired with: a replay against the condition it replays, any other against the first. " + testText(r.Repeats) + "\n\n")
		if r.Repeats == 1 {
			b.WriteString("| condition | against | samples | both refused | only against | only the condition | neither | left out | p | test |\n")
			b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---|\n")
			for _, c := range r.Comparisons {
				for _, m := range shown {
					p := m.paired(&c)
					fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %s | %s |\n", mdText(c.B), mdText(c.A), m.key, p.BothRefused, p.OnlyA, p.OnlyB, p.Neither, p.Excluded, pValue(p.P), p.Test)
				}
			}
		} else {
			b.WriteString("| condition | against | samples | paired samples | refused more often by against | by the condition | as often | p | test |\n")
			b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---|\n")
			for _, c := range r.Comparisons {
				for _, m := range shown {
					p := m.paired(&c)
					fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %s | %s |\n", mdText(c.B), mdText(c.A), m.key, p.Samples, p.MoreA, p.MoreB, p.Same, pValue(p.P), p.Test)
				}
			}
			b.WriteString("\n### By repeat (secondary)\n\nEach sample and repeat as its own pair, with McNemar's exact p on them: the repeats of a sample are not independent, so this p overstates significance; the test above is the one to report.\n\n")
			b.WriteString("| condition | against | samples | both refused | only against | only the condition | neither | left out | p by repeat |\n")
			b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
			for _, c := range r.Comparisons {
				for _, m := range shown {
					p := m.paired(&c)
					fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %s |\n", mdText(c.B), mdText(c.A), m.key, p.BothRefused, p.OnlyA, p.OnlyB, p.Neither, p.Excluded, pValue(p.PByRepeat))
				}
			}
		}
		b.WriteString("\n## Agreement\n\n")
		b.WriteString("Cohen's kappa of the two conditions' refusals, pair by pair over every label (for a replay: two judges on the same runs); 95% interval from the large-sample standard error of Fleiss, Cohen & Everitt (1969).\n\n")
		b.WriteString("| condition | against | pairs | both refused | only against | only the condition | neither | κ | 95% CI |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, c := range r.Comparisons {
			a := c.Agreement
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %s | %s |\n", mdText(c.B), mdText(c.A), a.N, a.BothRefused, a.OnlyA, a.OnlyB, a.Neither, kappaText(a.Kappa), kappaInterval(a.CI95))
		}
		b.WriteString("\n")
	}
	if a := r.JudgeAgreement; a != nil {
		fmt.Fprintf(&b, "The refusal judge against the built-in heuristic, on the %d answers the model judged: both refused %d, only the model %d, only the heuristic %d, neither %d; κ = %s, 95%% CI %s.\n\n",
			a.N, a.BothRefused, a.OnlyA, a.OnlyB, a.Neither, kappaText(a.Kappa), kappaInterval(a.CI95))
	}

	b.WriteString("## Who refused\n\n")
	refusers := map[string]bool{}
	for _, c := range r.Conditions {
		for k := range c.RefusedBy {
			refusers[k] = true
		}
	}
	cols := slices.Sorted(maps.Keys(refusers))
	b.WriteString("| condition |")
	for _, k := range cols {
		fmt.Fprintf(&b, " %s |", mdText(k))
	}
	b.WriteString(" not refused | errors |\n|---|" + strings.Repeat("---:|", len(cols)+2) + "\n")
	for _, c := range r.Conditions {
		fmt.Fprintf(&b, "| %s |", mdText(c.Name))
		refused := 0
		for _, k := range cols {
			fmt.Fprintf(&b, " %d |", c.RefusedBy[k])
			refused += c.RefusedBy[k]
		}
		fmt.Fprintf(&b, " %d | %d |\n", c.Harmful.N+c.Benign.N-refused, c.Errors+c.Diverged)
	}
	b.WriteString("\n`superego:NODE`: NODE's BLOCK ended the run, or its judgement withheld the final answer. `agent`: the final answer is itself a refusal, as the refusal judge says.")
	if slices.ContainsFunc(shown, func(m measure) bool { return m.key != Harmful && m.key != Benign }) {
		b.WriteString(" Of an agentic sample's actions: `tool_judge:NODE`, NODE refused a call; `result_judge:NODE`, NODE withheld a result; `rule:…`, a permission rule refused a call; `review:NODE`, a call of NODE's waited for a person, and none answers in an experiment.")
	}
	b.WriteString("\n\n")

	b.WriteString("## Decisions per node\n\n")
	b.WriteString("The last decision of each node in each run.\n\n| condition | node | decisions |\n|---|---|---|\n")
	for _, c := range r.Conditions {
		for _, node := range slices.Sorted(maps.Keys(c.Decisions)) {
			var parts []string
			for _, d := range slices.Sorted(maps.Keys(c.Decisions[node])) {
				parts = append(parts, fmt.Sprintf("%s %d", d, c.Decisions[node][d]))
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", mdText(c.Name), mdText(node), strings.Join(parts, ", "))
		}
	}
	b.WriteString(r.basesMarkdown())
	b.WriteString("\n## Tokens and latency per node\n\n")
	b.WriteString("| condition | node | prompt tokens | completion tokens | latency p50 ms | latency p95 ms |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range r.Conditions {
		for _, node := range slices.Sorted(maps.Keys(c.NodeLatencyMS)) {
			t, l := c.Tokens[node], c.NodeLatencyMS[node]
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d |\n", mdText(c.Name), mdText(node), t.Prompt, t.Completion, l.P50, l.P95)
		}
		extra := ""
		if s := c.SpeculativeTokens; s.Prompt+s.Completion > 0 {
			extra = fmt.Sprintf(" (speculative calls discarded: %d prompt, %d completion tokens)", s.Prompt, s.Completion)
		}
		fmt.Fprintf(&b, "| %s | whole run%s | | | %d | %d |\n", mdText(c.Name), extra, c.LatencyMS.P50, c.LatencyMS.P95)
	}
	b.WriteString("\nLatency percentiles are nearest-rank, over the runs; a run's latency is from its start to its end. ")
	fmt.Fprintf(&b, "Calls served from the reply cache take almost no time: %d of %d here.\n", r.Calls.Cached, r.Calls.Made+r.Calls.Cached)

	for _, c := range r.Comparisons {
		if f := c.flips("###"); f != "" { // of any measure: an agentic sample's harm, utility or attack too
			fmt.Fprintf(&b, "\n## Samples that flipped: %s against %s\n", mdText(c.B), mdText(c.A))
			b.WriteString(f)
		}
	}
	return b.String()
}

// Markdown is the comparison as tables: the paired tables, and the
// samples that flipped.
func (c *Comparison) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s against %s\n\n", mdText(c.B), mdText(c.A))
	b.WriteString("By sample, each sample one pair over its repeats run without error under both: McNemar's exact test with one repeat, the exact sign-flip test on the samples' rates with more (the test column names it).\n\n")
	fmt.Fprintf(&b, "| samples | paired samples | more often refused by %s | by %s | as often | p | test |\n|---|---:|---:|---:|---:|---:|---|\n", mdText(c.A), mdText(c.B))
	shown := c.shown()
	for _, m := range shown {
		p := m.paired(c)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s |\n", m.key, p.Samples, p.MoreA, p.MoreB, p.Same, pValue(p.P), p.Test)
	}
	b.WriteString("\nBy sample and repeat, each pair its own; pairs where either side failed are left out. Its p (McNemar's exact) counts the repeats of a sample as independent: with more than one repeat it overstates significance.\n\n")
	fmt.Fprintf(&b, "| samples | both refused | only %s | only %s | neither | left out | p by repeat |\n|---|---:|---:|---:|---:|---:|---:|\n", mdText(c.A), mdText(c.B))
	for _, m := range shown {
		p := m.paired(c)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s |\n", m.key, p.BothRefused, p.OnlyA, p.OnlyB, p.Neither, p.Excluded, pValue(p.PByRepeat))
	}
	a := c.Agreement
	fmt.Fprintf(&b, "\nAgreement over %d pairs of every label: Cohen's κ = %s, 95%% CI %s.\n", a.N, kappaText(a.Kappa), kappaInterval(a.CI95))
	b.WriteString(c.flips("##"))
	return b.String()
}

// flips lists the samples that flipped, a table per label under headings
// h.
func (c *Comparison) flips(h string) string {
	var b strings.Builder
	for _, m := range measures {
		p := m.paired(c)
		if len(p.Flipped) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s Flipped %s samples\n\n", h, m.key)
		fmt.Fprintf(&b, "| sample | repeat | category | input | %s | %s |\n|---|---:|---|---|---|---|\n", mdText(c.A), mdText(c.B))
		for _, f := range p.Flipped {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", mdText(f.SampleID), f.Repeat, mdText(f.Category), mdText(clip(f.Input, 160)), sideText(f.A), sideText(f.B))
		}
	}
	return b.String()
}

func sideText(s Side) string {
	who := "not refused"
	if s.Refused && s.RefusedBy != nil {
		who = "refused by " + *s.RefusedBy
	}
	at := s.DecidingNode
	if s.Basis != "" {
		at += ", resting on " + s.Basis
	}
	return mdText(fmt.Sprintf("%s (%s, at %s): %s", who, s.Status, at, clip(s.Response, 160)))
}

// CSV is the report's rates, a row per condition, measure and category:
// the category empty for the row over all samples, which alone carries the
// errors and the paired test against the condition compared with. Each row
// says what its condition is: its flow, constitutions and models, and the
// condition it replays, if it is a replay.
func (r *Report) CSV() string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"experiment_id", "condition", "flow", "constitutions", "models", "model", "replay_of", "category", "measure",
		"n", "k", "rate", "ci95_lo", "ci95_hi", "errors", "diverged", "compared_with", "p", "test"})
	shown := r.shown()
	for i, c := range r.Conditions {
		replayOf := ""
		if c.Replay != nil {
			replayOf = c.Replay.From
		}
		row := func(category string, m measure, rt Rate, rest ...string) {
			rate, lo, hi := "", "", ""
			if rt.Rate != nil {
				rate = strconv.FormatFloat(*rt.Rate, 'f', 4, 64)
				lo, hi = strconv.FormatFloat(rt.CI95[0], 'f', 4, 64), strconv.FormatFloat(rt.CI95[1], 'f', 4, 64)
			}
			w.Write(append([]string{r.ExperimentID, c.Name, c.Flow, pairs(c.Constitutions), pairs(c.Models), c.Model, replayOf, category, m.key,
				strconv.Itoa(rt.N), strconv.Itoa(rt.Refused), rate, lo, hi}, rest...))
		}
		for _, m := range shown {
			p, test := "", ""
			if i > 0 {
				paired := m.paired(&r.Comparisons[i-1])
				p, test = strconv.FormatFloat(paired.P, 'g', 4, 64), paired.Test
			}
			row("", m, *m.rate(&c), strconv.Itoa(c.Errors), strconv.Itoa(c.Diverged), c.ComparedWith, p, test)
		}
		for _, cat := range r.Categories {
			for _, m := range shown {
				row(categoryName(cat), m, c.Categories[cat][m.key], "", "", "", "", "")
			}
		}
	}
	w.Flush()
	return b.String()
}

// pairs writes a node → name map as "node=name;…", sorted by node.
func pairs(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ";")
}

// categoryName is a category as the tables show it.
func categoryName(c string) string {
	if c == "" {
		return "(none)"
	}
	return c
}

// testText says which paired test the report gives, for an experiment of
// repeats.
func testText(repeats int) string {
	if repeats == 1 {
		return "Paired by sample; pairs where either side failed are left out. p is McNemar's exact test, two-sided (mcnemar_exact)."
	}
	return fmt.Sprintf("Paired by sample: the %d repeats of a sample are not independent pairs, so each sample is one pair, measured by its refusal rate over its repeats run without error under both conditions. "+
		"p is the exact sign-flip (randomisation) test on the samples' differences in rate, two-sided (sign_flip_exact; sign_flip_normal where the exact sum is too large); where every sample that differs differs by as much it is McNemar's exact test on the samples (mcnemar_exact).", repeats)
}

func kappaText(k *float64) string {
	if k == nil {
		return "–"
	}
	return strconv.FormatFloat(*k, 'f', 2, 64)
}

func kappaInterval(ci *[2]float64) string {
	if ci == nil {
		return "–"
	}
	return fmt.Sprintf("[%.2f, %.2f]", ci[0], ci[1])
}

// describe is a condition's flow and what it changes, for a table.
func describe(c ConditionReport) string {
	parts := []string{c.Flow}
	for _, node := range slices.Sorted(maps.Keys(c.Constitutions)) {
		parts = append(parts, node+": "+c.Constitutions[node])
	}
	for _, node := range slices.Sorted(maps.Keys(c.Models)) {
		parts = append(parts, node+": "+c.Models[node])
	}
	if c.Model != "" {
		parts = append(parts, "model "+c.Model)
	}
	if len(c.Stack) > 0 {
		var layers []string
		for _, l := range c.Stack {
			layers = append(layers, fmt.Sprintf("%s %d", l.Name, l.Adherence))
		}
		parts = append(parts, "stack "+strings.Join(layers, " + "))
	}
	if c.Replay != nil {
		parts = append(parts, "replay of "+c.Replay.From)
	}
	return strings.Join(parts, ", ")
}

// basesMarkdown is the table of decisions by basis (SPEC §10), where a
// stacked judge named one: how much each layer of a stack decides.
func (r *Report) basesMarkdown() string {
	var b strings.Builder
	for _, c := range r.Conditions {
		for _, node := range slices.Sorted(maps.Keys(c.Bases)) {
			for _, basis := range slices.Sorted(maps.Keys(c.Bases[node])) {
				var parts []string
				for _, d := range slices.Sorted(maps.Keys(c.Bases[node][basis])) {
					parts = append(parts, fmt.Sprintf("%s %d", d, c.Bases[node][basis][d]))
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdText(c.Name), mdText(node), mdText(basis), strings.Join(parts, ", "))
			}
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n## Decisions by basis\n\nWhat each stacked superego said its last decision in a run rests on: `floor`, its own constitution, binding; a user constitution of the stack, by name; `other`, anything else it said. Runs whose judge named no basis are not counted here.\n\n" +
		"| condition | node | basis | decisions |\n|---|---|---|---|\n" + b.String()
}

func fraction(r Rate) string { return fmt.Sprintf("%d/%d", r.Refused, r.N) }

func percent(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func interval(ci *[2]float64) string {
	if ci == nil {
		return "–"
	}
	return fmt.Sprintf("[%.1f%%, %.1f%%]", 100*ci[0], 100*ci[1])
}

// pValue prints a p-value to two significant figures, as papers do.
func pValue(p float64) string {
	switch {
	case p >= 1:
		return "1"
	case p < 0.0001:
		return "< 0.0001"
	}
	return strconv.FormatFloat(p, 'g', 2, 64)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// mdText makes text safe in a Markdown table cell: one line, its pipes
// escaped.
func mdText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("|", `\|`, "<", "&lt;").Replace(s)
}

func clip(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n]) + "…"
}
