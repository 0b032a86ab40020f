package experiment

import (
	"fmt"
	"html"
	"strings"
	"unicode"
)

// The plot's geometry, in SVG user units (pixels at 100%).
const (
	plotMinWidth = 720
	plotAxis     = 515 // from rate 0 to rate 1, at least
	plotStep     = 13  // between one condition's measures
	plotMargin   = 12
	maxLabel     = 24 // characters of a condition's name
)

// textWidth is how wide s is at size pixels, estimated high: no glyph is
// measured where the plot is written, so each is taken as wide as it is in
// DejaVu Sans, the widest of the sans-serif faces a browser falls back on,
// rounded up. bold adds a tenth.
func textWidth(s string, size float64, bold bool) float64 {
	em := 0.0
	for _, r := range s {
		switch {
		case strings.ContainsRune("WMmw@%", r) || r > 0x2000:
			em += 1.0
		case unicode.IsUpper(r) || strings.ContainsRune("#&", r):
			em += 0.8
		case strings.ContainsRune("ijlI.,:;'|!", r):
			em += 0.32
		case r == ' ':
			em += 0.35
		default:
			em += 0.66
		}
	}
	if bold {
		em *= 1.1
	}
	return em * size
}

// fit clips s to fit width at size pixels.
func fit(s string, width, size float64, bold bool) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	for n := len(r); n > 0; n-- {
		if t := clip(string(r), n); textWidth(t, size, bold) <= width {
			return t
		}
	}
	return ""
}

// plotColors are the measures' colours, in order, and plotShapes their
// markers, one each: told apart without colour too.
var (
	plotColors = []string{"#c0581b", "#2b5c9a", "#3a7d44", "#7b4fa0", "#8a6d1f", "#1d7874"}
	plotShapes = []string{"circle", "square", "diamond", "triangle", "triangle-down", "hexagon"}
)

// SVG is the report's plot (report.svg): each condition's rates with
// their Wilson 95% intervals, a panel over all samples and one per
// category. It is plain SVG, written here: a browser shows it as it is,
// and a paper takes it through any SVG-to-PDF converter. Its legend wraps
// and its canvas widens to hold its labels: every mark and word is inside
// it.
func (r *Report) SVG() string {
	shown := r.shown()
	type panel struct {
		title string
		rate  func(c *ConditionReport, m measure) Rate
	}
	panels := []panel{{"All samples", func(c *ConditionReport, m measure) Rate { return *m.rate(c) }}}
	for _, cat := range r.Categories {
		panels = append(panels, panel{"Category: " + categoryName(cat), func(c *ConditionReport, m measure) Rate { return c.Categories[cat][m.key] }})
	}
	label := 0.0 // the widest condition name, clipped
	for _, c := range r.Conditions {
		label = max(label, textWidth(clip(c.Name, maxLabel), 12, false))
	}
	x0 := float64(plotMargin) + label + 15 // rate 0
	width := max(plotMinWidth, int(x0)+plotAxis+20)
	axis := float64(width) - x0 - 20
	room := float64(width - 2*plotMargin)

	// The legend, wrapped to the canvas's width.
	var legend strings.Builder
	x, y := plotMargin, 44
	for i, m := range shown {
		text := m.title + " (95% CI)"
		w := 14 + int(textWidth(text, 12, false)) + 24
		if x > plotMargin && x+w > width-plotMargin {
			x, y = plotMargin, y+20
		}
		fmt.Fprintf(&legend, `<g data-measure="%s">%s<text x="%d" y="%d">%s</text></g>`+"\n", m.key, marker(i, float64(x+5), float64(y)), x+14, y+4, xmlText(text))
		x += w
	}
	top := y + 20

	rowH := 8 + plotStep*len(shown)
	panelH := 26 + rowH*len(r.Conditions) + 28
	height := top + panelH*len(panels)
	plotX := func(rate float64) float64 { return x0 + rate*axis }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="plot-title plot-desc" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<title id="plot-title">%s: rates with 95%% intervals</title>`+"\n", xmlText(r.Name))
	fmt.Fprintf(&b, `<desc id="plot-desc">Each condition's rate of %s, with its Wilson 95%% interval, over all samples%s. Experiment %s.</desc>`+"\n",
		xmlText(titles(shown)), map[bool]string{true: " and per category", false: ""}[len(r.Categories) > 0], xmlText(r.ExperimentID))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="600">%s</text>`+"\n", plotMargin, xmlText(fit(r.Name, room, 15, true)))
	b.WriteString(legend.String())

	y = top
	for _, p := range panels {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="600">%s</text>`+"\n", plotMargin, y+16, xmlText(fit(p.title, room, 12, true)))
		rows, bottom := y+26, y+26+rowH*len(r.Conditions)
		for i := range r.Conditions {
			if i%2 == 1 {
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f5f5f5"/>`+"\n", plotMargin, rows+i*rowH, width-2*plotMargin, rowH)
			}
		}
		for _, tick := range []float64{0, 0.25, 0.5, 0.75, 1} {
			tx := plotX(tick)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d0d0d0"/>`+"\n", tx, rows, tx, bottom)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%d%%</text>`+"\n", tx, bottom+15, int(100*tick))
		}
		for i := range r.Conditions {
			c := &r.Conditions[i]
			rowTop := rows + i*rowH
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end">%s</text>`+"\n", x0-15, rowTop+rowH/2+4, xmlText(clip(c.Name, maxLabel)))
			for j, m := range shown {
				rt := p.rate(c, m)
				my := float64(rowTop + 4 + plotStep*j + plotStep/2)
				if rt.Rate == nil {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#777" font-size="11">%s: no outcome</text>`+"\n", x0+4, my+4, xmlText(m.title))
					continue
				}
				color := plotColors[j%len(plotColors)]
				lo, hi := plotX(rt.CI95[0]), plotX(rt.CI95[1])
				fmt.Fprintf(&b, `<g><title>%s, %s: %s, %s %s</title>`, xmlText(c.Name), xmlText(m.title), fraction(rt), percent(rt.Rate), interval(rt.CI95))
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, lo, my, hi, my, color)
				for _, end := range []float64{lo, hi} {
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, end, my-4, end, my+4, color)
				}
				b.WriteString(marker(j, plotX(*rt.Rate), my))
				b.WriteString("</g>\n")
			}
		}
		y += panelH
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// marker is measure i's marker, centred on (x, y), within 5 units of it.
func marker(i int, x, y float64) string {
	color := plotColors[i%len(plotColors)]
	var d string
	switch plotShapes[i%len(plotShapes)] {
	case "circle":
		return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="#fff"/>`, x, y, color)
	case "square":
		return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s" stroke="#fff"/>`, x-4, y-4, color)
	case "diamond":
		d = "m0 -5l5 5l-5 5l-5 -5z"
	case "triangle":
		d = "m0 -5l5 9h-10z"
	case "triangle-down":
		d = "m0 5l5 -9h-10z"
	case "hexagon":
		d = "m-2.5 -4.5h5l2.5 4.5l-2.5 4.5h-5l-2.5 -4.5z"
	}
	return fmt.Sprintf(`<path d="M%.1f %.1f%s" fill="%s" stroke="#fff"/>`, x, y, d, color)
}

// titlesOf are the measures' titles.
func titlesOf(ms []measure) []string {
	var t []string
	for _, m := range ms {
		t = append(t, m.title)
	}
	return t
}

// titles lists the measures' titles: "a and b", "a, b and c".
func titles(ms []measure) string {
	t := titlesOf(ms)
	if len(t) < 2 {
		return strings.Join(t, "")
	}
	return strings.Join(t[:len(t)-1], ", ") + " and " + t[len(t)-1]
}

// xmlText escapes text for an SVG document: a report's names are the
// experiment author's, and the plot is served from the server's origin.
func xmlText(s string) string { return html.EscapeString(strings.Join(strings.Fields(s), " ")) }
