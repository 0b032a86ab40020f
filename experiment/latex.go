package experiment

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// LaTeX is the report as tables a paper can \input (report.tex): the
// rates of each condition, with the paired test against the condition it
// is compared with, and, where the samples have categories, the rates of
// each category. The tables use booktabs' rules.
func (r *Report) LaTeX() string {
	var b strings.Builder
	shown := r.shown()
	label := labelOf(r.Name)
	fmt.Fprintf(&b, "%% superego experiment %s (%s), %d of %d outcomes.\n", r.ExperimentID, strings.Join(strings.Fields(r.Name), " "), r.Outcomes, r.Total)
	b.WriteString("% \\input this file; its tables need \\usepackage{booktabs}.\n")

	b.WriteString("\\begin{table}[htbp]\n\\centering\n\\small\n\\setlength{\\tabcolsep}{3.5pt}\n")
	fmt.Fprintf(&b, "\\caption{Refusal rates of %s: refused of $n$, and the rate in \\%% with its Wilson 95\\%% interval. $p$: %s, against the condition in \\emph{Against}.}\n",
		texText(r.Name), texText(testCaption(r.Repeats)))
	fmt.Fprintf(&b, "\\label{tab:%s-rates}\n", label)
	fmt.Fprintf(&b, "\\begin{tabular}{ll%sr}\n\\toprule\n & ", strings.Repeat("rlr", len(shown)))
	for _, m := range shown {
		fmt.Fprintf(&b, "& \\multicolumn{3}{c}{%s} ", texText(capital(m.title)))
	}
	b.WriteString("& \\\\\n")
	for i := range shown {
		fmt.Fprintf(&b, "\\cmidrule(lr){%d-%d}", 3+3*i, 5+3*i)
	}
	b.WriteString("\nCondition & Against ")
	for range shown {
		b.WriteString("& $k/n$ & \\% [95\\% CI] & $p$ ")
	}
	b.WriteString("& Errors \\\\\n\\midrule\n")
	for _, c := range r.Conditions {
		fmt.Fprintf(&b, "%s & %s ", texText(c.Name), texText(c.ComparedWith))
		for _, m := range shown {
			rt, p := *m.rate(&c), ""
			if v, ok := c.McNemarP[m.key]; ok {
				p = texP(v)
			}
			fmt.Fprintf(&b, "& %s & %s & %s ", fraction(rt), texRate(rt), p)
		}
		fmt.Fprintf(&b, "& %d \\\\\n", c.Errors+c.Diverged)
	}
	b.WriteString("\\bottomrule\n\\end{tabular}\n\n\\smallskip\n\\footnotesize\nConditions: ")
	for i, c := range r.Conditions {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", texText(c.Name), texText(describe(c)))
	}
	fmt.Fprintf(&b, ". Refusal judge: %s.\n\\end{table}\n", texText(judgeText(r.RefusalJudge)))

	if len(r.Categories) > 0 {
		b.WriteString("\n\\begin{table}[htbp]\n\\centering\n\\small\n\\setlength{\\tabcolsep}{3.5pt}\n")
		fmt.Fprintf(&b, "\\caption{Refusal rates of %s by category: refused of $n$, and the rate in \\%% with its Wilson 95\\%% interval.}\n", texText(r.Name))
		fmt.Fprintf(&b, "\\label{tab:%s-categories}\n", label)
		fmt.Fprintf(&b, "\\begin{tabular}{ll%s}\n\\toprule\n & ", strings.Repeat("rl", len(shown)))
		for _, m := range shown {
			fmt.Fprintf(&b, "& \\multicolumn{2}{c}{%s} ", texText(capital(m.title)))
		}
		b.WriteString("\\\\\n")
		for i := range shown {
			fmt.Fprintf(&b, "\\cmidrule(lr){%d-%d}", 3+2*i, 4+2*i)
		}
		b.WriteString("\nCategory & Condition ")
		for range shown {
			b.WriteString("& $k/n$ & \\% [95\\% CI] ")
		}
		b.WriteString("\\\\\n\\midrule\n")
		for i, cat := range r.Categories {
			if i > 0 {
				b.WriteString("\\addlinespace\n")
			}
			for j, c := range r.Conditions {
				name := ""
				if j == 0 {
					name = texText(categoryName(cat))
				}
				fmt.Fprintf(&b, "%s & %s ", name, texText(c.Name))
				for _, m := range shown {
					rt := c.Categories[cat][m.key]
					fmt.Fprintf(&b, "& %s & %s ", fraction(rt), texRate(rt))
				}
				b.WriteString("\\\\\n")
			}
		}
		b.WriteString("\\bottomrule\n\\end{tabular}\n\\end{table}\n")
	}
	return b.String()
}

// testCaption names the paired test for a caption.
func testCaption(repeats int) string {
	if repeats == 1 {
		return "McNemar's exact test by sample, two-sided"
	}
	return fmt.Sprintf("the paired test by sample over its %d repeats, two-sided: the exact sign-flip test on the samples' rates, McNemar's exact test where every sample that differs differs by as much", repeats)
}

func judgeText(j JudgeInfo) string {
	if j.Kind == "model" {
		return "the model " + j.Name
	}
	return "the built-in heuristic " + j.Name + ", not a model"
}

// texRate is a rate and its interval in percent: "77.8 [45.3, 93.7]".
func texRate(r Rate) string {
	if r.Rate == nil {
		return "--"
	}
	return fmt.Sprintf("%.1f [%.1f, %.1f]", 100**r.Rate, 100*r.CI95[0], 100*r.CI95[1])
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
