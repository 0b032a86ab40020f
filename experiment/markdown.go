package experiment

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"superego/flow"
)

// Markdown is the report as tables a paper could print (report.md).
func (r *Report) Markdown() string {
	var b strings.Builder
	shown := r.shown()
	fmt.Fprintf(&b, "# %s\n\n", mdText(r.Name))
	fmt.Fprintf(&b, "Experiment `%s`, created %s, %s.  \n", r.ExperimentID, r.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"), r.Status)
	fmt.Fprintf(&b, "%d samples (%d harmful, %d benign) × %d %s × %d %s: %d of %d outcomes recorded.  \n",
		r.Samples[Harmful]+r.Samples[Benign], r.Samples[Harmful], r.Samples[Benign], r.Repeats, plural(r.Repeats, "repeat", "repeats"),
		len(r.Conditions), plural(len(r.Conditions), "condition", "conditions"), r.Outcomes, r.Total)
	fmt.Fprintf(&b, "Refusal judge: %s.  \n", judgeText(r.RefusalJudge, "`"))
	fmt.Fprintf(&b, "Model calls: %d made, %d served from the reply cache or shared with the same call in flight, %d steps reused by replays; %d of them the refusal judge's.  \n",
		r.Calls.Made, r.Calls.Cached, r.Calls.Reused, r.Calls.Judge)
	fmt.Fprintf(&b, "Server: %s. Dataset: %s.  \n", versionText(r.Version), datasetText(r.Dataset))
	fmt.Fprintf(&b, "Statistics: %s\n\n", r.statisticsText())
	b.WriteString("![Rates with their 95% intervals, per condition and category](report.svg)\n\n")

	b.WriteString("## Rates\n\n")
	cols := append([]string{"condition", "flow"}, titlesOf(shown)...)
	var rows [][]string
	for _, c := range r.Conditions {
		row := []string{c.Name, describe(c)}
		for _, m := range shown {
			row = append(row, rateText(*m.rate(&c)))
		}
		rows = append(rows, append(row, errorsText(c)))
	}
	table(&b, append(cols, "errors:"), rows)
	b.WriteString("\nEach rate is k/n over the outcomes that did not fail, with its Wilson 95% interval; errors (provider errors, timeouts) are counted apart.  \n")
	for _, m := range shown {
		if m.key != Harmful && m.key != Benign {
			fmt.Fprintf(&b, "%s: %s.  \n", m.title, statistics[m.key])
		}
	}
	if len(r.Categories) > 0 {
		b.WriteString("\n## Rates by category\n\n")
		rows = nil
		for _, cat := range r.Categories {
			for _, c := range r.Conditions {
				row := []string{categoryName(cat), c.Name}
				for _, m := range shown {
					row = append(row, rateText(c.Categories[cat][m.key]))
				}
				rows = append(rows, row)
			}
		}
		table(&b, append([]string{"category", "condition"}, titlesOf(shown)...), rows)
	}
	if len(r.Comparisons) > 0 {
		b.WriteString("\n## Paired comparisons\n\nEach condition against the one it is paired with: a replay against the condition it replays, any other against the first. " + testText(r.Repeats) + "\n")
		for _, m := range shown {
			var pairs []pairedRow
			for i := range r.Comparisons {
				c := &r.Comparisons[i]
				pairs = append(pairs, pairedRow{c.B, c.A, m.paired(c)})
			}
			pairedTables(&b, m.title, m.verb, r.Repeats, r.Adjust, pairs)
		}
	}
	r.underAttackMarkdown(&b)
	if len(r.Comparisons) > 0 {
		b.WriteString("\n## Agreement\n\nCohen's kappa of the two conditions' refusals, pair by pair over every label (for a replay: two judges on the same runs); 95% interval from the large-sample standard error of Fleiss, Cohen & Everitt (1969), undefined where a condition refused all or none.\n\n")
		rows = nil
		for _, c := range r.Comparisons {
			a := c.Agreement
			rows = append(rows, []string{c.B, c.A, strconv.Itoa(a.N), strconv.Itoa(a.BothRefused), strconv.Itoa(a.OnlyA), strconv.Itoa(a.OnlyB), strconv.Itoa(a.Neither), kappaText(a.Kappa), kappaInterval(a)})
		}
		table(&b, []string{"condition", "against", "pairs:", "both refused:", "only against:", "only the condition:", "neither:", "κ:", "95% CI"}, rows)
	}
	if a := r.JudgeAgreement; a != nil {
		fmt.Fprintf(&b, "\nThe refusal judge against the built-in heuristic, on the %d answers the model judged: both refused %d, only the model %d, only the heuristic %d, neither %d; κ = %s, 95%% CI %s.\n",
			a.N, a.BothRefused, a.OnlyA, a.OnlyB, a.Neither, kappaText(a.Kappa), kappaInterval(*a))
	}
	r.whoRefusedMarkdown(&b, shown)
	r.decisionsMarkdown(&b)
	r.provenanceMarkdown(&b)
	r.costMarkdown(&b)
	for _, c := range r.Comparisons {
		if f := c.flips("###"); f != "" { // of any measure: an agentic sample's harm, utility or attack too
			fmt.Fprintf(&b, "\n## Samples that flipped: %s against %s\n", mdText(c.B), mdText(c.A))
			b.WriteString(f)
		}
	}
	return b.String()
}

// statisticsText says how the report's intervals and p-values are made.
func (r *Report) statisticsText() string {
	diff := "Newcombe's hybrid score interval for paired proportions (method 10)"
	if r.Repeats > 1 {
		diff = fmt.Sprintf("a cluster bootstrap over samples (%d resamples, seed %d)", Resamples, r.BootstrapSeed)
	}
	return fmt.Sprintf("95%% intervals at z = %s; paired differences B − A with %s; p-values two-sided, adjusted (%s) over the family of %d paired tests below.",
		strconv.FormatFloat(r.Z, 'g', -1, 64), diff, adjustName(r.Adjust), r.FamilySize)
}

// pairedRow is one comparison's row of a measure's paired table.
type pairedRow struct {
	b, a string
	p    *Paired
}

// pairedTables writes a measure's paired table: by sample with one
// repeat, and with more also by repeat, a secondary view. adjust names how
// the p-values were adjusted; "" leaves that column out.
func pairedTables(b *strings.Builder, title, verb string, repeats int, adjust string, pairs []pairedRow) {
	fmt.Fprintf(b, "\n### %s\n\n", capital(title))
	head := func(cols ...string) []string { // and the difference and the tests
		cols = append(cols, "difference [95% CI]:", "p:")
		if adjust != "" {
			cols = append(cols, "p ("+adjustName(adjust)+"):")
		}
		return append(cols, "test")
	}
	tail := func(p *Paired) []string {
		t := []string{diffText(p), pValue(p.P)}
		if adjust != "" {
			t = append(t, adjustedText(p))
		}
		return append(t, p.Test)
	}
	var rows [][]string
	if repeats == 1 {
		for _, r := range pairs {
			p := r.p
			rows = append(rows, append([]string{r.b, r.a, strconv.Itoa(p.Both), strconv.Itoa(p.OnlyA), strconv.Itoa(p.OnlyB), strconv.Itoa(p.Neither), strconv.Itoa(p.Excluded)}, tail(p)...))
		}
		table(b, head("condition", "against", "both "+verb+":", "only against:", "only the condition:", "neither:", "left out:"), rows)
		return
	}
	for _, r := range pairs {
		p := r.p
		rows = append(rows, append([]string{r.b, r.a, strconv.Itoa(p.Samples), strconv.Itoa(p.MoreA), strconv.Itoa(p.MoreB), strconv.Itoa(p.Same)}, tail(p)...))
	}
	table(b, head("condition", "against", "paired samples:", verb+" more often under against:", "under the condition:", "as often:"), rows)
	b.WriteString("\nBy repeat (secondary): each sample and repeat as its own pair, with McNemar's exact p on them, which overstates significance; the test above is the one to report.\n\n")
	rows = nil
	for _, r := range pairs {
		p := r.p
		rows = append(rows, []string{r.b, r.a, strconv.Itoa(p.Both), strconv.Itoa(p.OnlyA), strconv.Itoa(p.OnlyB), strconv.Itoa(p.Neither), strconv.Itoa(p.Excluded), pValue(p.PByRepeat)})
	}
	table(b, []string{"condition", "against", "both " + verb + ":", "only against:", "only the condition:", "neither:", "left out:", "p by repeat:"}, rows)
}

// underAttackMarkdown writes each condition's utility under attack against
// its base samples', where samples name a base.
func (r *Report) underAttackMarkdown(b *strings.Builder) {
	var pairs []pairedRow
	for _, c := range r.Conditions {
		if c.UnderAttack != nil {
			pairs = append(pairs, pairedRow{a: c.Name, p: c.UnderAttack})
		}
	}
	if len(pairs) == 0 {
		return
	}
	b.WriteString("\n## Utility with and without attack\n\nIn each condition, each injection sample's utility under attack (B) against its base sample's (A), the same task without the injection, pair by pair, as AgentDojo reports utility and utility under attack.\n\n")
	var rows [][]string
	for _, p := range pairs {
		q := p.p
		n := strconv.Itoa(q.Both + q.OnlyA + q.OnlyB + q.Neither)
		rows = append(rows, []string{p.a, strconv.Itoa(q.Both+q.OnlyA) + "/" + n, strconv.Itoa(q.Both+q.OnlyB) + "/" + n, strconv.Itoa(q.Both), strconv.Itoa(q.OnlyA), strconv.Itoa(q.OnlyB),
			strconv.Itoa(q.Neither), strconv.Itoa(q.Excluded), diffText(q), pValue(q.P), adjustedText(q), q.Test})
	}
	table(b, []string{"condition", "utility (base):", "utility under attack:", "both completed:", "only base:", "only under attack:", "neither:", "left out:",
		"difference [95% CI]:", "p:", "p (" + adjustName(r.Adjust) + "):", "test"}, rows)
}

// whoRefusedMarkdown writes the refusals by who refused.
func (r *Report) whoRefusedMarkdown(b *strings.Builder, shown []measure) {
	refusers := map[string]bool{}
	for _, c := range r.Conditions {
		for k := range c.RefusedBy {
			refusers[k] = true
		}
	}
	by := slices.Sorted(maps.Keys(refusers))
	var rows [][]string
	for _, c := range r.Conditions {
		row, refused := []string{c.Name}, 0
		for _, k := range by {
			row, refused = append(row, strconv.Itoa(c.RefusedBy[k])), refused+c.RefusedBy[k]
		}
		rows = append(rows, append(row, strconv.Itoa(c.Harmful.N+c.Benign.N-refused), strconv.Itoa(c.Errors+c.Diverged)))
	}
	b.WriteString("\n## Who refused\n\n")
	cols := []string{"condition"}
	for _, k := range by {
		cols = append(cols, k+":")
	}
	table(b, append(cols, "not refused:", "errors:"), rows)
	b.WriteString("\n`superego:NODE`: NODE's BLOCK ended the run, or its judgement withheld the final answer. `agent`: the final answer is itself a refusal, as the refusal judge says.")
	if slices.ContainsFunc(shown, func(m measure) bool { return m.key != Harmful && m.key != Benign }) {
		b.WriteString(" Of an agentic sample's actions: `tool_judge:NODE`, NODE refused a call; `result_judge:NODE`, NODE withheld a result; `rule:…`, a permission rule refused a call; `review:NODE`, a call of NODE's waited for a person, and none answers in an experiment.")
	}
	b.WriteString("\n")
}

// decisionsMarkdown writes each node's last decisions, and where stacked
// judges named one, what they rest on (docs/stacks.md).
func (r *Report) decisionsMarkdown(b *strings.Builder) {
	counts := func(m map[string]int) string {
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s %d", d, m[d]))
		}
		return strings.Join(parts, ", ")
	}
	var rows, bases [][]string
	for _, c := range r.Conditions {
		for _, node := range slices.Sorted(maps.Keys(c.Decisions)) {
			rows = append(rows, []string{c.Name, node, counts(c.Decisions[node])})
		}
		for _, node := range slices.Sorted(maps.Keys(c.Bases)) {
			for _, basis := range slices.Sorted(maps.Keys(c.Bases[node])) {
				bases = append(bases, []string{c.Name, node, basis, counts(c.Bases[node][basis])})
			}
		}
	}
	b.WriteString("\n## Decisions per node\n\nThe last decision of each node in each run.\n\n")
	table(b, []string{"condition", "node", "decisions"}, rows)
	if len(bases) > 0 {
		b.WriteString("\n## Decisions by basis\n\nWhat each stacked superego said its last decision in a run rests on: `floor`, its own constitution, binding; a user constitution of the stack, by name; `other`, anything else it said. Runs whose judge named no basis are not counted here.\n\n")
		table(b, []string{"condition", "node", "basis", "decisions"}, bases)
	}
}

// provenanceMarkdown writes what each condition ran with.
func (r *Report) provenanceMarkdown(b *strings.Builder) {
	b.WriteString("\n## Provenance\n\nEach condition's flow, and each node's model as asked and as its provider named it in its replies, the sampling parameters its calls sent (– where a call sent none and the provider's default held), and a superego's constitution; the constitutions' texts are in report.json.\n\n")
	var flows, nodes [][]string
	for _, c := range r.Conditions {
		flows = append(flows, []string{c.Name, c.Flow, orDash(c.FlowSHA256)})
		for _, name := range slices.Sorted(maps.Keys(c.Nodes)) {
			n := c.Nodes[name]
			constitution, sum := "", ""
			if k := n.Constitution; k != nil {
				constitution, sum = cmp.Or(k.Name, "(in the flow)"), k.SHA256
			}
			p := paramsText(n.Parameters)
			nodes = append(nodes, []string{c.Name, name, orDash(n.Provider), orDash(n.Model), orDash(strings.Join(n.ServedModels, ", ")), p[0], p[1], p[2], p[3], orDash(constitution), orDash(sum)})
		}
	}
	table(b, []string{"condition", "flow", "flow sha-256"}, flows)
	b.WriteString("\n")
	table(b, []string{"condition", "node", "provider", "model", "as served", "temperature:", "top_p:", "seed:", "max tokens:", "constitution", "sha-256"}, nodes)
}

// costMarkdown writes each node's tokens by whose calls they were, their
// price as if the condition ran alone, and latency.
func (r *Report) costMarkdown(b *strings.Builder) {
	b.WriteString("\n## Tokens, cost and latency\n\nTokens (input/output) of each node's own calls, of replies the reply cache served, and of calls it shared with another run in flight; the cost in dollars at the experiment's prices, of them all: as if the condition ran alone. Latency percentiles are nearest-rank over the runs, a run's from its start to its end.\n\n")
	var rows [][]string
	for _, c := range r.Conditions {
		for _, node := range slices.Sorted(maps.Keys(c.NodeLatencyMS)) {
			t, l := c.Cost.Nodes[node], c.NodeLatencyMS[node]
			rows = append(rows, []string{c.Name, node, orDash(t.Model), tokensText(t.Own), tokensText(t.Cached), tokensText(t.Shared), dollars(t.USD),
				strconv.FormatInt(l.P50, 10), strconv.FormatInt(l.P95, 10)})
		}
		whole := "whole run"
		if s := c.SpeculativeTokens; s.Prompt+s.Completion > 0 {
			whole += fmt.Sprintf(" (speculative calls discarded: %s)", tokensText(s))
		}
		if len(c.Cost.Unpriced) > 0 {
			whole += " (no price for " + strings.Join(c.Cost.Unpriced, ", ") + ")"
		}
		rows = append(rows, []string{c.Name, whole, "", "", "", "", dollars(c.Cost.USD), strconv.FormatInt(c.LatencyMS.P50, 10), strconv.FormatInt(c.LatencyMS.P95, 10)})
	}
	table(b, []string{"condition", "node", "model", "own:", "cached:", "shared:", "$ alone:", "latency p50 ms:", "p95 ms:"}, rows)
}

// Markdown is the comparison as tables: the paired tables, and the
// samples that flipped.
func (c *Comparison) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s against %s\n\nBy sample, each sample one pair over its repeats run without error under both: McNemar's exact test with one repeat, the exact sign-flip test on the samples' rates with more (the test column names it); differences %s − %s with their 95%% intervals.\n",
		mdText(c.B), mdText(c.A), mdText(c.B), mdText(c.A))
	repeats := 1
	for _, m := range c.shown() {
		p := m.paired(c)
		if p.DiffMethod == DiffBootstrap {
			repeats = 2 // the tables by repeat too
		}
		pairedTables(&b, m.title, m.verb, repeats, "", []pairedRow{{c.B, c.A, p}})
	}
	fmt.Fprintf(&b, "\nAgreement over %d pairs of every label: Cohen's κ = %s, 95%% CI %s.\n", c.Agreement.N, kappaText(c.Agreement.Kappa), kappaInterval(c.Agreement))
	b.WriteString(c.flips("##"))
	return b.String()
}

// flips lists the samples that flipped, a table per measure under
// headings h.
func (c *Comparison) flips(h string) string {
	var b strings.Builder
	for _, m := range measures {
		p := m.paired(c)
		if len(p.Flipped) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s Flipped %s samples\n\n", h, m.key)
		var rows [][]string
		for _, f := range p.Flipped {
			rows = append(rows, []string{f.SampleID, strconv.Itoa(f.Repeat), f.Category, clip(f.Input, 160), sideText(f.A), sideText(f.B)})
		}
		table(&b, []string{"sample", "repeat:", "category", "input", c.A, c.B}, rows)
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
	return fmt.Sprintf("%s (%s, at %s): %s", who, s.Status, at, clip(s.Response, 160))
}

// table writes a Markdown table: cols name its columns, a name ending in
// ":" right-aligned; every cell is made safe for a table (mdText).
func table(b *strings.Builder, cols []string, rows [][]string) {
	var rule strings.Builder
	for _, c := range cols {
		name, right := strings.CutSuffix(c, ":")
		fmt.Fprintf(b, "| %s ", mdText(name))
		rule.WriteString(map[bool]string{false: "|---", true: "|---:"}[right])
	}
	fmt.Fprintf(b, "|\n%s|\n", rule.String())
	for _, row := range rows {
		for _, cell := range row {
			fmt.Fprintf(b, "| %s ", mdText(cell))
		}
		b.WriteString("|\n")
	}
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
		return "Paired by sample; pairs where either side failed are left out. p is McNemar's exact test, two-sided (mcnemar_exact); the difference is the condition's rate less the one's it is against, with Newcombe's hybrid score interval."
	}
	return fmt.Sprintf("Paired by sample: the %d repeats of a sample are not independent pairs, so each sample is one pair, measured by its rate over its repeats run without error under both conditions. "+
		"p is the exact sign-flip (randomisation) test on the samples' differences in rate, two-sided (sign_flip_exact; sign_flip_normal where the exact sum is too large); where every sample that differs differs by as much it is McNemar's exact test on the samples (mcnemar_exact). "+
		"The difference is the condition's rate less the one's it is against, with a cluster bootstrap's interval over samples.", repeats)
}

func kappaText(k *float64) string {
	if k == nil {
		return "–"
	}
	return strconv.FormatFloat(*k, 'f', 2, 64)
}

// kappaInterval is an agreement's interval: "–" where kappa is not
// defined, "undefined" where kappa is and its interval not.
func kappaInterval(a Agreement) string {
	switch {
	case a.Kappa == nil:
		return "–"
	case a.CI95 == nil:
		return "undefined (a condition constant)"
	}
	return fmt.Sprintf("[%.2f, %.2f]", a.CI95[0], a.CI95[1])
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

func fraction(r Rate) string { return fmt.Sprintf("%d/%d", r.K, r.N) }

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

// rateText is a rate in a cell: "7/9 77.8% [45.3%, 93.7%]"; "–" for no
// outcome.
func rateText(r Rate) string {
	if r.Rate == nil {
		return "–"
	}
	return fraction(r) + " " + percent(r.Rate) + " " + interval(r.CI95)
}

// diffText is a paired difference in percentage points with its interval:
// "+22.2 pp [-4.1, 45.6]".
func diffText(p *Paired) string {
	if p.Diff == nil {
		return "–"
	}
	return fmt.Sprintf("%+.1f pp [%.1f, %.1f]", 100**p.Diff, 100*p.DiffCI95[0], 100*p.DiffCI95[1])
}

func adjustedText(p *Paired) string {
	if p.PAdjusted == nil {
		return "–"
	}
	return pValue(*p.PAdjusted)
}

// adjustNames name the ways of adjusting p-values in a sentence.
var adjustNames = map[string]string{AdjustHolm: "Holm", AdjustBH: "Benjamini–Hochberg", AdjustNone: "none"}

// adjustName names a way of adjusting p-values in a sentence; "" none.
func adjustName(method string) string { return adjustNames[method] }

// KnownAdjust reports whether method is a way of adjusting p-values:
// AdjustHolm, AdjustBH or AdjustNone.
func KnownAdjust(method string) bool {
	_, ok := adjustNames[method]
	return ok
}

func errorsText(c ConditionReport) string {
	if c.Diverged > 0 {
		return fmt.Sprintf("%d (+%d diverged)", c.Errors, c.Diverged)
	}
	return strconv.Itoa(c.Errors)
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

// paramsText are the sampling parameters as a table shows them:
// temperature, top_p, seed, max tokens, "–" for one not sent.
func paramsText(p *flow.Parameters) [4]string {
	out := [4]string{"–", "–", "–", "–"}
	if p == nil {
		return out
	}
	if p.Temperature != nil {
		out[0] = strconv.FormatFloat(*p.Temperature, 'g', -1, 64)
	}
	if p.TopP != nil {
		out[1] = strconv.FormatFloat(*p.TopP, 'g', -1, 64)
	}
	if p.Seed != nil {
		out[2] = strconv.FormatInt(*p.Seed, 10)
	}
	if p.MaxTokens != nil {
		out[3] = strconv.FormatInt(*p.MaxTokens, 10)
	}
	return out
}

func tokensText(t Tokens) string { return fmt.Sprintf("%d/%d", t.Prompt, t.Completion) }

func dollars(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.4f", *v)
}

// versionText is the server's version as the report says it.
func versionText(v string) string {
	if v == "" {
		return "version not recorded (an experiment planned before versions were)"
	}
	return "superego " + v
}

// datasetText lists the dataset's files with their sha-256.
func datasetText(files []DatasetFile) string {
	if len(files) == 0 {
		return "not recorded"
	}
	var parts []string
	for _, f := range files {
		parts = append(parts, fmt.Sprintf("%s (sha-256 %s)", f.Path, f.SHA256))
	}
	return strings.Join(parts, ", ")
}

func orDash(s string) string { return cmp.Or(s, "–") }

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
