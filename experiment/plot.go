package experiment

import (
	"fmt"
	"html"
	"strings"
)

// The plot's geometry, in SVG user units (pixels at 100%).
const (
	plotWidth  = 720
	plotLabelX = 170 // condition names end here
	plotX0     = 185 // rate 0
	plotX1     = 700 // rate 1
	plotStep   = 13  // between one condition's measures
)

// plotColors are the measures' colours, in order, and plotShapes their
// markers: told apart without colour too.
var (
	plotColors = []string{"#c0581b", "#2b5c9a", "#3a7d44", "#7b4fa0", "#8a6d1f"}
	plotShapes = []string{"circle", "square", "diamond"}
)

// SVG is the report's plot (report.svg): each condition's rates with
// their Wilson 95% intervals, a panel over all samples and one per
// category. It is plain SVG, written here: a browser shows it as it is,
// and a paper takes it through any SVG-to-PDF converter.
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
	rowH := 8 + plotStep*len(shown)
	panelH := 26 + rowH*len(r.Conditions) + 28
	height := 64 + panelH*len(panels)

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="plot-title plot-desc" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		plotWidth, height, plotWidth, height)
	fmt.Fprintf(&b, `<title id="plot-title">%s: refusal rates with 95%% intervals</title>`+"\n", xmlText(r.Name))
	fmt.Fprintf(&b, `<desc id="plot-desc">Each condition's rate of %s, with its Wilson 95%% interval, over all samples%s. Experiment %s.</desc>`+"\n",
		xmlText(titles(shown)), map[bool]string{true: " and per category", false: ""}[len(r.Categories) > 0], xmlText(r.ExperimentID))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", plotWidth, height)
	fmt.Fprintf(&b, `<text x="12" y="24" font-size="15" font-weight="600">%s</text>`+"\n", xmlText(clip(r.Name, 80)))
	x := 12
	for i, m := range shown {
		b.WriteString(marker(i, float64(x+5), 44))
		fmt.Fprintf(&b, `<text x="%d" y="48">%s (95%% CI)</text>`+"\n", x+14, xmlText(m.title))
		x += 30 + 7*len([]rune(m.title)) + 60
	}

	y := 64
	for _, p := range panels {
		fmt.Fprintf(&b, `<text x="12" y="%d" font-weight="600">%s</text>`+"\n", y+16, xmlText(clip(p.title, 90)))
		top, bottom := y+26, y+26+rowH*len(r.Conditions)
		for i := range r.Conditions {
			if i%2 == 1 {
				fmt.Fprintf(&b, `<rect x="12" y="%d" width="%d" height="%d" fill="#f5f5f5"/>`+"\n", top+i*rowH, plotX1+8-12, rowH)
			}
		}
		for _, tick := range []float64{0, 0.25, 0.5, 0.75, 1} {
			tx := plotX(tick)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d0d0d0"/>`+"\n", tx, top, tx, bottom)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%d%%</text>`+"\n", tx, bottom+15, int(100*tick))
		}
		for i := range r.Conditions {
			c := &r.Conditions[i]
			rowTop := top + i*rowH
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", plotLabelX, rowTop+rowH/2+4, xmlText(clip(c.Name, 24)))
			for j, m := range shown {
				rt := p.rate(c, m)
				my := float64(rowTop + 4 + plotStep*j + plotStep/2)
				if rt.Rate == nil {
					fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#777" font-size="11">%s: no outcome</text>`+"\n", plotX0+4, my+4, xmlText(m.title))
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

// plotX is where a rate is on the plot's axis.
func plotX(rate float64) float64 { return plotX0 + rate*(plotX1-plotX0) }

// marker is measure i's marker, centred on (x, y).
func marker(i int, x, y float64) string {
	color := plotColors[i%len(plotColors)]
	switch plotShapes[i%len(plotShapes)] {
	case "square":
		return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s" stroke="#fff"/>`, x-4, y-4, color)
	case "diamond":
		return fmt.Sprintf(`<path d="M%.1f %.1fl5 5l-5 5l-5 -5z" fill="%s" stroke="#fff"/>`, x, y-5, color)
	}
	return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="#fff"/>`, x, y, color)
}

// titles lists the measures' titles: "a and b", "a, b and c".
func titles(ms []measure) string {
	var t []string
	for _, m := range ms {
		t = append(t, m.title)
	}
	if len(t) < 2 {
		return strings.Join(t, "")
	}
	return strings.Join(t[:len(t)-1], ", ") + " and " + t[len(t)-1]
}

// xmlText escapes text for an SVG document: a report's names are the
// experiment author's, and the plot is served from the server's origin.
func xmlText(s string) string { return html.EscapeString(strings.Join(strings.Fields(s), " ")) }
