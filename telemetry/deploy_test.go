package telemetry_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"superego/agents"
	"superego/engine"
	"superego/flow"
	"superego/telemetry"
)

// The Grafana dashboard and the alerting rules in deploy/ name only
// metrics superego has, and the dashboard shows every one. (That their
// queries run was checked against a Prometheus scraping a server; see
// docs/operations.md.)
func TestDeployNamesOurMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	tel, err := telemetry.New(reg, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A series of every family, so that each is gathered.
	ctx := context.Background()
	o, a := tel.Flow(), tel.Agents()
	run := engine.RunInfo{FlowID: "f"}
	o.RunEnded(o.RunStarted(ctx, run), run, "completed", "")
	o.Stepped("f", "n", "ACCEPT")
	o.Drafted("f", "n", true)
	o.Wrote(time.Millisecond)
	a.ModelEnded(ctx, agents.ModelCall{Provider: "p", Model: "m", Start: time.Now()}, agents.ModelResult{Outcome: "ok", Duration: time.Millisecond, Usage: &flow.Usage{PromptTokens: 1, CompletionTokens: 1}})
	a.ToolEnded(ctx, agents.ToolCall{Tool: "t", Start: time.Now()}, "ok")
	tel.StreamSubscribers().Inc()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				have[f.GetName()+s] = true
			}
		}
	}
	if len(families) != 11 {
		t.Errorf("%d families gathered, want the 11 docs/operations.md lists", len(families))
	}
	name := regexp.MustCompile(`superego_[a-z_]+`)
	check := func(file, text string) {
		t.Helper()
		found := name.FindAllString(text, -1)
		if len(found) == 0 {
			t.Errorf("%s names no metric", file)
		}
		for _, n := range found {
			if !have[n] {
				t.Errorf("%s names %s, which superego does not have", file, n)
			}
		}
	}

	b, err := os.ReadFile("../deploy/grafana/superego.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name, Definition string
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	check("deploy/grafana/superego.json", strings.Join(exprs, "\n"))
	for _, f := range families {
		if !strings.Contains(strings.Join(exprs, "\n"), f.GetName()) {
			t.Errorf("the dashboard shows nothing of %s", f.GetName())
		}
	}
	b, err = os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	check("deploy/prometheus/alerts.yml", string(b))
}

// The alerting rules do what their tests in deploy/ say, promtool's own
// unit tests: runs pile up against each replica's --max-runs, not a fixed
// number. promtool comes with Prometheus (Debian's prometheus package).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`(?s)alert: SuperegoRunsPilingUp.*?expr: (.*?)\n\s+for:`).FindSubmatch(b)
	if rule == nil || !strings.Contains(string(rule[1]), "superego_runs_max") {
		t.Errorf("SuperegoRunsPilingUp does not follow --max-runs (superego_runs_max): %q", rule)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (it comes with Prometheus): the rules' unit tests did not run")
	}
	out, err := exec.Command(promtool, "test", "rules", "../deploy/prometheus/alerts_test.yml").CombinedOutput()
	if err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
