package experiment

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// LaTeX is the report as tables a paper can \input (report.tex): the
// rates of each condition, a row per measure, with the paired difference
// and test against the condition it is compared with, and a note of what
// each condition ran with; and, where the samples have categories, a table
// of each measure's rates by category. Every table fits a 6.5 in text: it
// has few columns, and shrinks to the line's width where long names would
// widen it. The file needs only graphicx (for that), which pdflatex has
// with any TeX installation; with booktabs loaded, its rules are
// booktabs'.
func (r *Report) LaTeX() string {
	var b strings.Builder
	shown := r.shown()
	label := labelOf(r.Name)
	fmt.Fprintf(&b, "%% superego experiment %s (%s), %d of %d outcomes.\n", r.ExperimentID, strings.Join(strings.Fields(r.Name), " "), r.Outcomes, r.Total)
	b.WriteString("% \\input this file; its tables need \\usepackage{graphicx}, and use booktabs' rules where \\usepackage{booktabs} is loaded.\n")
	b.WriteString("\\providecommand{\\toprule}{\\hline}\\providecommand{\\midrule}{\\hline}\\providecommand{\\bottomrule}{\\hline}\\providecommand{\\addlinespace}{\\noalign{\\smallskip}}\n")

	diff := "Newcombe's hybrid score interval for paired proportions"
	if r.Repeats > 1 {
		diff = fmt.Sprintf("a cluster bootstrap over samples (%d resamples, seed %d)", Resamples, r.BootstrapSeed)
	}
	caption := fmt.Sprintf("Rates of %s: $k$ of $n$, and the rate in \\%% with its Wilson 95\\%% interval; $\\Delta$, the difference from the condition it is against in percentage points, with %s; $p$: %s; $p_{\\mathrm{adj}}$: adjusted (%s) over the %d paired tests.",
		texText(r.Name), texText(diff), texText(testCaption(r.Repeats)), texText(adjustName(r.Adjust)), r.FamilySize)
	var rows [][]string
	for ci, c := range r.Conditions {
		for i, m := range shown {
			name, delta, p, adj := "", "", "", ""
			if i == 0 {
				name = c.Name
			}
			if ci > 0 {
				paired := m.paired(&r.Comparisons[ci-1])
				delta, p, adj = texDiff(paired), texP(paired.P), texP(*paired.PAdjusted)
			}
			rt := *m.rate(&c)
			rows = append(rows, []string{texText(name), texText(strings.ReplaceAll(m.key, "_", " ")), fraction(rt), texRate(rt), delta, p, adj})
		}
		rows = append(rows, nil) // a space between conditions
	}
	texTable(&b, caption, label+"-rates", "llrlrrr", []string{"Condition", "Measure", "$k/n$", "\\% [95\\% CI]", "$\\Delta$ [95\\% CI]", "$p$", "$p_{\\mathrm{adj}}$"}, rows[:len(rows)-1], r.provenanceNote())

	if len(r.Categories) == 0 {
		return b.String()
	}
	for _, m := range shown {
		cols := []string{"Category"}
		for _, c := range r.Conditions {
			cols = append(cols, texText(c.Name))
		}
		rows = nil
		for _, cat := range r.Categories {
			row, any := []string{texText(categoryName(cat))}, false
			for _, c := range r.Conditions {
				rt := c.Categories[cat][m.key]
				row, any = append(row, fraction(rt)+" "+texRate(rt)), any || rt.N > 0
			}
			if any {
				rows = append(rows, row)
			}
		}
		caption := fmt.Sprintf("%s of %s by category: $k/n$, and the rate in \\%% with its Wilson 95\\%% interval.", texText(capital(m.title)), texText(r.Name))
		texTable(&b, caption, label+"-"+labelOf(m.key), "l"+strings.Repeat("l", len(r.Conditions)), cols, rows, "")
	}
	return b.String()
}

// texTable writes a table float: its caption and label, a tabular of cols
// and rows (a nil row is a little space), shrunk to the line's width only
// where it would be wider, and a note under it.
func texTable(b *strings.Builder, caption, label, spec string, cols []string, rows [][]string, note string) {
	fmt.Fprintf(b, "\n\\begin{table}[htbp]\n\\centering\n\\small\n\\setlength{\\tabcolsep}{3.5pt}\n\\caption{%s}\n\\label{tab:%s}\n", caption, label)
	fmt.Fprintf(b, "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%%\n\\begin{tabular}{%s}\n\\toprule\n%s \\\\\n\\midrule\n", spec, strings.Join(cols, " & "))
	for _, row := range rows {
		if row == nil {
			b.WriteString("\\addlinespace\n")
			continue
		}
		fmt.Fprintf(b, "%s \\\\\n", strings.Join(row, " & "))
	}
	b.WriteString("\\bottomrule\n\\end{tabular}}\n")
	if note != "" {
		fmt.Fprintf(b, "\n\\smallskip\n\\footnotesize\n%s\n", note)
	}
	b.WriteString("\\end{table}\n")
}

// provenanceNote says under the rates table what each condition ran with:
// its flow, and each node's model, parameters and constitution, the
// sha-256 sums shortened to 12 digits (report.json has them whole); and
// the experiment's dataset, refusal judge and version.
func (r *Report) provenanceNote() string {
	short := func(sum string) string {
		if len(sum) > 12 {
			sum = sum[:12]
		}
		return "\\texttt{" + orDash(sum) + "}"
	}
	var parts []string
	for _, c := range r.Conditions {
		s := fmt.Sprintf("\\emph{%s}: flow %s (%s)", texText(c.Name), texText(c.Flow), short(c.FlowSHA256))
		if c.ComparedWith != "" {
			s += ", against " + texText(c.ComparedWith)
		}
		// Nodes that ran on the same model and parameters are named together.
		var models, constitutions []string
		byModel := map[string][]string{}
		for _, node := range slices.Sorted(maps.Keys(c.Nodes)) {
			n := c.Nodes[node]
			if k := n.Constitution; k != nil {
				constitutions = append(constitutions, fmt.Sprintf("%s %s (%s)", texText(node), texText(cmp.Or(k.Name, "in the flow")), short(k.SHA256)))
			}
			if n.Model == "" {
				continue
			}
			p := paramsText(n.Parameters)
			m := texText(n.Model)
			if len(n.ServedModels) > 0 {
				m += " served as " + texText(strings.Join(n.ServedModels, ", "))
			}
			m += fmt.Sprintf(" (temperature %s, top-p %s, seed %s, max tokens %s)", p[0], p[1], p[2], p[3])
			if byModel[m] == nil {
				models = append(models, m)
			}
			byModel[m] = append(byModel[m], texText(node))
		}
		for _, m := range models {
			s += "; " + strings.Join(byModel[m], ", ") + ": " + m
		}
		if len(constitutions) > 0 {
			s += "; constitutions " + strings.Join(constitutions, ", ")
		}
		parts = append(parts, s+".")
	}
	var dataset []string
	for _, f := range r.Dataset {
		dataset = append(dataset, texText(f.Path)+" ("+short(f.SHA256)+")")
	}
	return fmt.Sprintf("Conditions: %s Dataset: %s. Refusal judge: %s. %s. sha-256 sums to 12 digits; report.json has them whole, with the constitutions' texts.",
		strings.Join(parts, " "), orDash(strings.Join(dataset, ", ")), texText(judgeText(r.RefusalJudge, "")), texText(capital(versionText(r.Version))))
}

// testCaption names the paired test for a caption.
func testCaption(repeats int) string {
	if repeats == 1 {
		return "McNemar's exact test by sample, two-sided"
	}
	return fmt.Sprintf("the paired test by sample over its %d repeats, two-sided: the exact sign-flip test on the samples' rates, McNemar's exact test where every sample that differs differs by as much", repeats)
}

// judgeText names the refusal judge in a sentence, its name between
// quote marks.
func judgeText(j JudgeInfo, quote string) string {
	if j.Kind == "model" {
		return "the model " + quote + j.Name + quote
	}
	return "the built-in heuristic " + quote + j.Name + quote + " (a refusal phrase in the answer's first 200 characters), not a model"
}

// texRate is a rate and its interval in percent: "77.8 [45.3, 93.7]".
func texRate(r Rate) string {
	if r.Rate == nil {
		return "--"
	}
	return fmt.Sprintf("%.1f [%.1f, %.1f]", 100**r.Rate, 100*r.CI95[0], 100*r.CI95[1])
}

// texDiff is a paired difference in percentage points: "+22.2 [$-$4.1, 45.6]".
func texDiff(p *Paired) string {
	if p.Diff == nil {
		return "--"
	}
	return strings.ReplaceAll(fmt.Sprintf("%+.1f [%.1f, %.1f]", 100**p.Diff, 100*p.DiffCI95[0], 100*p.DiffCI95[1]), "-", "$-$")
}

func texP(p float64) string {
	s := pValue(p)
	if rest, ok := strings.CutPrefix(s, "< "); ok {
		return "$<$" + rest
	}
	return s
}

// texText escapes text for LaTeX's text mode, on one line.
func texText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return texEscaper.Replace(s)
}

var texEscaper = strings.NewReplacer(
	`\`, `\textbackslash{}`, "&", `\&`, "%", `\%`, "$", `\$`, "#", `\#`, "_", `\_`, "{", `\{`, "}", `\}`,
	"~", `\textasciitilde{}`, "^", `\textasciicircum{}`, "<", `\textless{}`, ">", `\textgreater{}`, "|", `\textbar{}`)

// labelOf makes a \label key of a name: lower case, letters, digits and
// hyphens.
func labelOf(name string) string {
	l := strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if l == "" {
		return "experiment"
	}
	return l
}

var nonLabel = regexp.MustCompile(`[^a-z0-9]+`)

func capital(s string) string {
	r := []rune(s)
	if len(r) == 0 {
		return s
	}
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
