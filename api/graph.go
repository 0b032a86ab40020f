package api

import (
	"fmt"
	"html"
	"net/http"
	"sort"
	"strings"

	"github.com/go-chi/chi/v5"

	"superego/flow"
)

// edge is every transition from one node to one target, labelled with its
// decisions. to is "" for the end of the run.
type edge struct {
	from, to string
	label    string
}

// edges lists a graph's transitions, one edge per (node, target), in a
// stable order.
func edges(g *flow.Graph) []edge {
	var out []edge
	for _, name := range sortedKeys(g.Nodes) {
		n := g.Nodes[name]
		byTarget := map[string][]string{}
		for decision := range n.Transitions {
			to, _ := n.Target(decision)
			byTarget[to] = append(byTarget[to], decision)
		}
		for _, to := range sortedKeys(byTarget) {
			ds := byTarget[to]
			sort.Strings(ds)
			out = append(out, edge{name, to, strings.Join(ds, ", ")})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// mermaid draws a flow as a Mermaid flowchart: superegos as hexagons,
// inner agents as boxes, the start and the end as circles.
func mermaid(def *flow.Definition) string {
	var b strings.Builder
	id := func(name string) string { return "n_" + strings.NewReplacer(".", "_", "-", "_").Replace(name) }
	fmt.Fprintf(&b, "flowchart TD\n  start((start)) --> %s\n", id(def.Graph.Start))
	for _, name := range sortedKeys(def.Graph.Nodes) {
		shape := "[%q]"
		if def.Graph.Nodes[name].Type == flow.Superego {
			shape = "{{%q}}"
		}
		fmt.Fprintf(&b, "  %s"+shape+"\n", id(name), name)
	}
	for _, e := range edges(&def.Graph) {
		to := "stop((end))"
		if e.to != "" {
			to = id(e.to)
		}
		fmt.Fprintf(&b, "  %s -- %q --> %s\n", id(e.from), e.label, to)
	}
	return b.String()
}

// Geometry of the SVG picture.
const (
	nodeW, nodeH = 170, 44
	gapX, gapY   = 60, 80
	margin       = 30
)

// svg draws a flow as a layered picture: nodes in rows by their distance
// from the start, transitions as arrows labelled with their decisions,
// self-loops as loops on the node's right, the end as a circle at the bottom.
func svg(def *flow.Definition) string {
	g := &def.Graph
	es := edges(g)
	// Rows by breadth-first distance from the start; unreachable nodes last.
	rank := map[string]int{g.Start: 0}
	queue := []string{g.Start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, e := range es {
			if _, seen := rank[e.to]; e.from == cur && e.to != "" && !seen {
				rank[e.to] = rank[cur] + 1
				queue = append(queue, e.to)
			}
		}
	}
	rows := 0
	for _, r := range rank {
		rows = max(rows, r+1)
	}
	for _, name := range sortedKeys(g.Nodes) {
		if _, ok := rank[name]; !ok {
			rank[name] = rows
		}
	}
	rows = 0
	byRow := map[int][]string{}
	for _, name := range sortedKeys(g.Nodes) {
		byRow[rank[name]] = append(byRow[rank[name]], name)
		rows = max(rows, rank[name]+1)
	}
	widest := 1
	for _, names := range byRow {
		widest = max(widest, len(names))
	}
	// Room on the left for arrows to the end, on the right for loops and
	// arrows back up.
	const left, right = 110, 230
	inner := widest*nodeW + (widest-1)*gapX
	width := 2*margin + left + inner + right
	center := func(name string) (x, y int) {
		row := byRow[rank[name]]
		i := sort.SearchStrings(row, name)
		rowW := len(row)*nodeW + (len(row)-1)*gapX
		x = margin + left + (inner-rowW)/2 + i*(nodeW+gapX) + nodeW/2
		y = margin + 40 + rank[name]*(nodeH+gapY) + nodeH/2
		return x, y
	}
	endX, endY := margin+left+inner/2, margin+40+rows*(nodeH+gapY)+16
	height := endY + 16 + margin

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="system-ui, sans-serif" font-size="13" role="img" aria-label="%s">`+"\n",
		width, height, width, height, html.EscapeString("Graph of the flow "+def.Name))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>` + "\n")
	b.WriteString(`<style>.label{fill:#333}.lbg{fill:#fff;opacity:.9}.se{fill:#fde8d7;stroke:#c0581b}.ia{fill:#dbe8f7;stroke:#2b5c9a}.term{fill:#eee;stroke:#555}</style>` + "\n")

	// Start marker.
	sx, sy := center(g.Start)
	fmt.Fprintf(&b, `<circle class="term" cx="%d" cy="%d" r="12"/><text x="%d" y="%d" text-anchor="middle" font-size="11">start</text>`+"\n", sx, margin, sx+34, margin+4)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" marker-end="url(#arrow)"/>`+"\n", sx, margin+12, sx, sy-nodeH/2)

	// label centres text at x, y; a negative x puts its left end at -x.
	label := func(x, y int, text string) {
		w := 7*len(text) + 8
		if x < 0 {
			x = -x + w/2
		}
		fmt.Fprintf(&b, `<rect class="lbg" x="%d" y="%d" width="%d" height="16" rx="3"/><text class="label" x="%d" y="%d" text-anchor="middle" font-size="11">%s</text>`+"\n",
			x-w/2, y-11, w, x, y+1, html.EscapeString(text))
	}
	for _, e := range es {
		fx, fy := center(e.from)
		switch {
		case e.to == e.from: // a loop on the node's right side
			x := fx + nodeW/2
			fmt.Fprintf(&b, `<path d="M%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#555" marker-end="url(#arrow)"/>`+"\n", x-8, fy-nodeH/2, x+30, fy-nodeH, x+40, fy-8, x, fy)
			label(-(x + 14), fy-nodeH/2-2, e.label)
		case e.to == "" && rank[e.from] == rows-1: // the last row: straight down
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-dasharray="4 3" marker-end="url(#arrow)"/>`+"\n", fx, fy+nodeH/2, endX, endY-16)
			label((fx+endX)/2, (fy+nodeH/2+endY-16)/2, e.label)
		case e.to == "": // round the left side, clear of the rows below
			bend := margin + left - 40 - 8*rank[e.from]
			fmt.Fprintf(&b, `<path d="M%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#555" stroke-dasharray="4 3" marker-end="url(#arrow)"/>`+"\n", fx-nodeW/2, fy, bend, fy, bend, endY, endX-16, endY)
			label(bend+10, fy+nodeH/2+14, e.label)
		default:
			tx, ty := center(e.to)
			if ty > fy { // down the page
				fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" marker-end="url(#arrow)"/>`+"\n", fx, fy+nodeH/2, tx, ty-nodeH/2)
				label((fx+tx)/2, (fy+nodeH/2+ty-nodeH/2)/2, e.label)
			} else { // back up, or across: a curve out to the right
				bend := max(fx, tx) + nodeW/2 + 90 + 12*rank[e.to]
				fmt.Fprintf(&b, `<path d="M%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#555" marker-end="url(#arrow)"/>`+"\n", fx+nodeW/2, fy, bend, fy, bend, ty, tx+nodeW/2, ty)
				label(-(bend - 20), (fy+ty)/2, e.label)
			}
		}
	}
	for _, name := range sortedKeys(g.Nodes) {
		n := g.Nodes[name]
		x, y := center(name)
		if n.Type == flow.Superego {
			fmt.Fprintf(&b, `<polygon class="se" points="%d,%d %d,%d %d,%d %d,%d %d,%d %d,%d"/>`,
				x-nodeW/2+14, y-nodeH/2, x+nodeW/2-14, y-nodeH/2, x+nodeW/2, y, x+nodeW/2-14, y+nodeH/2, x-nodeW/2+14, y+nodeH/2, x-nodeW/2, y)
		} else {
			fmt.Fprintf(&b, `<rect class="ia" x="%d" y="%d" width="%d" height="%d" rx="6"/>`, x-nodeW/2, y-nodeH/2, nodeW, nodeH)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-weight="600">%s</text><text x="%d" y="%d" text-anchor="middle" font-size="10" fill="#555">%s</text>`+"\n",
			x, y-2, html.EscapeString(name), x, y+13, strings.ReplaceAll(n.Type, "_", " "))
	}
	fmt.Fprintf(&b, `<circle class="term" cx="%d" cy="%d" r="16"/><text x="%d" y="%d" text-anchor="middle" font-size="11">end</text>`+"\n", endX, endY, endX, endY+4)
	b.WriteString("</svg>\n")
	return b.String()
}

// graph serves GET /flow/{flow_id}/graph.svg and graph.mmd.
func (s *Server) graph(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "flow_id")
	f := s.Engine.Flows[id]
	if f == nil {
		return fmt.Errorf("flow %q: %w", id, flow.ErrNotFound)
	}
	if strings.HasSuffix(r.URL.Path, ".mmd") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, err := w.Write([]byte(mermaid(f.Def)))
		return err
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	_, err := w.Write([]byte(svg(f.Def)))
	return err
}
