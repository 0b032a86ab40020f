package experiment

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"superego/flow"
)

// ReportFormat is a form of the report: the name --format and the HTTP
// route take, the file the command line writes beside results.jsonl, and
// the content type it is served as.
type ReportFormat struct {
	Name        string
	File        string
	ContentType string
}

// ReportFormats are the report's forms, in the order they are written.
var ReportFormats = []ReportFormat{
	{"md", "report.md", "text/markdown; charset=utf-8"},
	{"json", "report.json", "application/json"},
	{"csv", "report.csv", "text/csv; charset=utf-8"},
	{"tex", "report.tex", "application/x-tex; charset=utf-8"},
	{"svg", "report.svg", "image/svg+xml"},
}

// FormatOf finds a report format by its name; "latex" is "tex".
func FormatOf(name string) (ReportFormat, error) {
	if name == "latex" {
		name = "tex"
	}
	for _, f := range ReportFormats {
		if f.Name == name {
			return f, nil
		}
	}
	return ReportFormat{}, fmt.Errorf("no report format %q (md, json, csv, latex or tex, svg): %w", name, flow.ErrNotFound)
}

// Render is the report in format f.
func (r *Report) Render(f ReportFormat) []byte {
	switch f.Name {
	case "json":
		b, _ := json.MarshalIndent(r, "", "  ") // a report has nothing that does not encode
		return append(b, '\n')
	case "csv":
		return []byte(r.CSV())
	case "tex":
		return []byte(r.LaTeX())
	case "svg":
		return []byte(r.SVG())
	}
	return []byte(r.Markdown())
}

// reportColumns are report.csv's columns, in order.
var reportColumns = []string{"experiment_id", "condition", "flow", "constitutions", "models", "model", "replay_of", "category", "measure",
	"n", "k", "rate", "ci95_lo", "ci95_hi", "errors", "diverged", "compared_with", "p", "test", "p_adjusted", "adjust",
	"diff", "diff_lo", "diff_hi", "diff_method", "cost_usd", "flow_sha256", "constitution_sha256", "served_models", "parameters",
	"superego_version", "dataset_sha256", "refusal_judge"}

// CSV is the report's rates, a row per condition, measure and category:
// the category empty for the row over all samples, which alone carries the
// errors, the paired test and difference against the condition compared
// with, and the cost. Each row says what its condition is and ran with:
// its flow and the flow's sha-256, its superegos' constitutions with their
// sha-256, its nodes' models as asked and as served and the parameters
// they sent (JSON: node → parameters), the condition it replays; and the
// experiment's version, dataset and refusal judge.
func (r *Report) CSV() string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write(reportColumns)
	var dataset []string
	for _, f := range r.Dataset {
		dataset = append(dataset, f.Path+"="+f.SHA256)
	}
	for i, c := range r.Conditions {
		var models, served, constitutions, sums []string
		params := map[string]*flow.Parameters{}
		for _, node := range slices.Sorted(maps.Keys(c.Nodes)) {
			n := c.Nodes[node]
			if n.Model != "" {
				models, params[node] = append(models, node+"="+n.Model), n.Parameters
			}
			if len(n.ServedModels) > 0 {
				served = append(served, node+"="+strings.Join(n.ServedModels, ","))
			}
			if k := n.Constitution; k != nil {
				constitutions, sums = append(constitutions, node+"="+k.Name), append(sums, node+"="+k.SHA256)
			}
		}
		paramsJSON, _ := json.Marshal(params)
		row := map[string]string{"experiment_id": r.ExperimentID, "condition": c.Name, "flow": c.Flow, "constitutions": strings.Join(constitutions, ";"),
			"models": strings.Join(models, ";"), "model": c.Model, "flow_sha256": c.FlowSHA256, "constitution_sha256": strings.Join(sums, ";"),
			"served_models": strings.Join(served, ";"), "parameters": string(paramsJSON), "superego_version": r.Version,
			"dataset_sha256": strings.Join(dataset, ";"), "refusal_judge": r.RefusalJudge.Kind + ":" + r.RefusalJudge.Name}
		if c.Replay != nil {
			row["replay_of"] = c.Replay.From
		}
		for _, cat := range append([]string{""}, r.Categories...) {
			for _, m := range r.shown() {
				rt := *m.rate(&c)
				row["category"], row["measure"] = "", m.key
				if cat != "" {
					rt, row["category"] = c.Categories[cat][m.key], categoryName(cat)
				}
				row["n"], row["k"], row["rate"], row["ci95_lo"], row["ci95_hi"] = strconv.Itoa(rt.N), strconv.Itoa(rt.K), number(rt.Rate), "", ""
				if rt.CI95 != nil {
					row["ci95_lo"], row["ci95_hi"] = number(&rt.CI95[0]), number(&rt.CI95[1])
				}
				// The row over all samples carries the rest.
				for _, k := range []string{"errors", "diverged", "compared_with", "p", "test", "p_adjusted", "adjust", "diff", "diff_lo", "diff_hi", "diff_method", "cost_usd"} {
					row[k] = ""
				}
				if cat == "" {
					row["errors"], row["diverged"], row["compared_with"], row["cost_usd"] = strconv.Itoa(c.Errors), strconv.Itoa(c.Diverged), c.ComparedWith, number(c.Cost.USD)
				}
				if cat == "" && i > 0 {
					p := m.paired(&r.Comparisons[i-1])
					row["p"], row["test"], row["p_adjusted"], row["adjust"] = strconv.FormatFloat(p.P, 'g', 4, 64), p.Test, strconv.FormatFloat(*p.PAdjusted, 'g', 4, 64), r.Adjust
					row["diff"], row["diff_method"] = number(p.Diff), p.DiffMethod
					if p.DiffCI95 != nil {
						row["diff_lo"], row["diff_hi"] = number(&p.DiffCI95[0]), number(&p.DiffCI95[1])
					}
				}
				w.Write(columns(reportColumns, row))
			}
		}
	}
	w.Flush()
	return b.String()
}

// ResultsCSV is results.jsonl as one flat table (results.csv): a row per
// outcome, a column per scalar, that a dataframe reads with no more work.
// Booleans are true or false, a value the outcome does not have is empty;
// per node, in the order of their names, decision.NODE, tokens.NODE.input
// and .output, latency_ms.NODE, model.NODE and served_model.NODE; the
// calls an agent asked for are counted in calls and written whole, as
// JSON, in calls_json.
func ResultsCSV(outcomes []Outcome) []byte {
	nodes := map[string]bool{}
	for _, o := range outcomes {
		for n := range o.Decisions {
			nodes[n] = true
		}
		for n := range o.Tokens {
			nodes[n] = true
		}
		for n := range o.Models {
			nodes[n] = true
		}
	}
	cols := []string{"experiment_id", "condition", "sample_id", "repeat", "label", "category", "instance_id", "status", "refused", "refused_by",
		"deciding_node", "response", "error_code", "error_message", "wall_ms", "model_calls.made", "model_calls.cached", "model_calls.reused", "model_calls.judge",
		"harmed", "completed_task", "utility_under_attack", "attacked", "heuristic_refused", "calls", "calls_json"}
	names := slices.Sorted(maps.Keys(nodes))
	for _, n := range names {
		cols = append(cols, "decision."+n, "tokens."+n+".input", "tokens."+n+".output", "latency_ms."+n, "model."+n, "served_model."+n)
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write(cols)
	boolean := func(v *bool) string {
		if v == nil {
			return ""
		}
		return strconv.FormatBool(*v)
	}
	for _, o := range outcomes {
		row := map[string]string{"experiment_id": o.ExperimentID, "condition": o.Condition, "sample_id": o.SampleID, "repeat": strconv.Itoa(o.Repeat),
			"label": o.Label, "category": o.Category, "instance_id": o.InstanceID, "status": o.Status, "refused": strconv.FormatBool(o.Refused),
			"deciding_node": o.DecidingNode, "response": o.Response, "wall_ms": strconv.FormatInt(o.WallMS, 10),
			"model_calls.made": strconv.Itoa(o.ModelCalls.Made), "model_calls.cached": strconv.Itoa(o.ModelCalls.Cached),
			"model_calls.reused": strconv.Itoa(o.ModelCalls.Reused), "model_calls.judge": strconv.Itoa(o.ModelCalls.Judge),
			"harmed": boolean(o.Harmed), "completed_task": boolean(o.CompletedTask), "utility_under_attack": boolean(o.UtilityUnderAttack),
			"attacked": boolean(o.Attacked), "heuristic_refused": boolean(o.HeuristicRefused), "calls": strconv.Itoa(len(o.ToolCalls))}
		if o.RefusedBy != nil {
			row["refused_by"] = *o.RefusedBy
		}
		if o.Error != nil {
			row["error_code"], row["error_message"] = o.Error.Code, o.Error.Message
		}
		if o.ToolCalls != nil {
			j, _ := json.Marshal(o.ToolCalls)
			row["calls_json"] = string(j)
		}
		for _, n := range names {
			row["decision."+n] = o.Decisions[n]
			if t, ok := o.Tokens[n]; ok {
				row["tokens."+n+".input"], row["tokens."+n+".output"] = strconv.Itoa(t.Prompt), strconv.Itoa(t.Completion)
			}
			if ms, ok := o.LatencyMS[n]; ok {
				row["latency_ms."+n] = strconv.FormatInt(ms, 10)
			}
			row["model."+n], row["served_model."+n] = o.Models[n].Model, o.Models[n].ServedModel
		}
		w.Write(columns(cols, row))
	}
	w.Flush()
	return b.Bytes()
}

// columns is row's values in the order of cols.
func columns(cols []string, row map[string]string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = row[c]
	}
	return out
}

// number writes a value to four decimals; "" for none.
func number(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'f', 4, 64)
}
