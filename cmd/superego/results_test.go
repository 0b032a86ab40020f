package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// results.csv is results.jsonl flat: read with encoding/csv, as any
// dataframe library reads it, it has one row per outcome, in the same
// order, and each column is the outcome's value: decision.NODE,
// tokens.NODE.input and .output, model.NODE and served_model.NODE, the
// calls counted and as JSON, the measures. On the fake provider, whose
// replies carry tokens and name the model.
func TestResultsCSVIsFlat(t *testing.T) {
	t.Parallel()
	model := newExperimentModel(t)
	dir := experimentDir(t, "s1", "plain", "s2", "OUT:BLOCK", "s3", "AGENT:REFUSE", "b1", "plain")
	getenv := env(append(repoEnv, "OPENAI_API_KEY", "k", "OPENAI_BASE_URL", model.URL+"/v1", "SUPEREGO_MODEL", "openai:gpt-test")...)
	if code, out, errs := runCmd(t, getenv, "experiment", "run", filepath.Join(dir, "exp.json"), "--out", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out, errs)
	}
	rows := checkResultsCSV(t, filepath.Join(dir, "out"), 8)
	// guarded_chat's output superego blocked s2's draft; its tokens are
	// the fake's 11 and 7, its model as the fake named it.
	for _, r := range rows {
		if r["condition"] == "superego" && r["sample_id"] == "s2" && (r["decision.output_superego"] != "BLOCK" || r["refused_by"] != "superego:output_superego" ||
			r["tokens.output_superego.input"] != "11" || r["tokens.output_superego.output"] != "7" || r["model.output_superego"] != "openai:gpt-test" ||
			r["served_model.output_superego"] != "gpt-test" || r["refused"] != "true") {
			t.Errorf("superego/s2: %v", r)
		}
	}
}

// The shipped agentic sample, on the offline model: the report gives
// utility and utility under attack side by side, each injection sample
// paired with its base, with differences and intervals, and the tables
// docs/experiments.md shows of it are this report's own rows; results.csv
// holds each outcome's calls.
func TestAgenticSampleOffline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	getenv := env(append(repoEnv, "SUPEREGO_MODEL", "offline")...)
	if code, out, errs := runCmd(t, getenv, "experiment", "run", "../../experiments/agentic_sample.json", "--out", dir); code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out, errs)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"64 samples (16 harmful, 48 benign)",
		"| unguarded | bare_agent | 0/16 0.0% [0.0%, 19.4%] | 0/48 0.0% [0.0%, 7.4%] | 16/16 100.0% [80.6%, 100.0%] | ",
		"## Utility with and without attack",
		"| condition | utility (base) | utility under attack | both completed | only base | only under attack | neither | left out | difference [95% CI] | p | p (Holm) | test |",
		"### Utility under attack\n\n| condition | against | both completed |",
		"### Attack success\n\n| condition | against | both attacked |",
		"| guarded | action_superego | offline | offline (built-in, not a language model) | – | – | – | – | – | actions | ",
	} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	readmeShows(t, "```\n# agentic-sample\n", string(md), 8)
	var calls int
	for _, r := range checkResultsCSV(t, dir, 128) {
		n, _ := strconv.Atoi(r["calls"])
		calls += n
	}
	if calls == 0 {
		t.Error("results.csv counts no call")
	}
}

// checkResultsCSV reads results.csv and results.jsonl in dir, and checks
// that the CSV has want rows, one per outcome in the same order, whose
// columns are the outcomes' values. It returns the rows, column → value.
func checkResultsCSV(t *testing.T, dir string, want int) []map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	outcomes := strings.Split(strings.TrimSpace(string(lines)), "\n")
	if len(records) != want+1 || len(outcomes) != want {
		t.Fatalf("results.csv has %d rows, results.jsonl %d outcomes; want %d", len(records)-1, len(outcomes), want)
	}
	head := records[0]
	var rows []map[string]string
	for i, rec := range records[1:] {
		if len(rec) != len(head) {
			t.Fatalf("row %d has %d columns of %d", i+1, len(rec), len(head))
		}
		r := map[string]string{}
		for j, c := range head {
			r[c] = rec[j]
		}
		rows = append(rows, r)
		var o struct {
			Condition, Label, Status, Response string
			SampleID                           string `json:"sample_id"`
			Repeat                             int
			Refused                            bool
			RefusedBy                          *string `json:"refused_by"`
			Decisions                          map[string]string
			Tokens                             map[string]map[string]int
			Models                             map[string]struct {
				Model       string
				ServedModel string `json:"served_model"`
			}
			Calls         json.RawMessage
			CompletedTask *bool `json:"completed_task"`
			Attacked      *bool
		}
		if err := json.Unmarshal([]byte(outcomes[i]), &o); err != nil {
			t.Fatal(err)
		}
		refusedBy := ""
		if o.RefusedBy != nil {
			refusedBy = *o.RefusedBy
		}
		check := map[string]string{"condition": o.Condition, "sample_id": o.SampleID, "repeat": strconv.Itoa(o.Repeat), "label": o.Label, "status": o.Status,
			"response": o.Response, "refused": strconv.FormatBool(o.Refused), "refused_by": refusedBy, "calls_json": string(o.Calls)}
		var calls []json.RawMessage
		json.Unmarshal(o.Calls, &calls)
		check["calls"] = strconv.Itoa(len(calls))
		for name, v := range map[string]*bool{"completed_task": o.CompletedTask, "attacked": o.Attacked} {
			check[name] = ""
			if v != nil {
				check[name] = strconv.FormatBool(*v)
			}
		}
		for node, d := range o.Decisions {
			check["decision."+node] = d
		}
		for node, tok := range o.Tokens {
			check["tokens."+node+".input"], check["tokens."+node+".output"] = strconv.Itoa(tok["prompt_tokens"]), strconv.Itoa(tok["completion_tokens"])
		}
		for node, m := range o.Models {
			check["model."+node], check["served_model."+node] = m.Model, m.ServedModel
		}
		for c, v := range check {
			if !slices.Contains(head, c) {
				t.Errorf("results.csv has no column %s", c)
			} else if r[c] != v {
				t.Errorf("row %d, %s: %q, results.jsonl says %q", i+1, c, r[c], v)
			}
		}
	}
	return rows
}

// readmeShows checks that the block opening with start, in the README or
// a page of docs/, shows only table rows report has, and at least min of
// them: the documents' tables come from a real run.
func readmeShows(t *testing.T, start, report string, min int) {
	t.Helper()
	pages, _ := filepath.Glob("../../docs/*.md")
	var shown, page string
	ok := false
	for _, page = range append([]string{"../../README.md"}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if _, shown, ok = strings.Cut(string(b), start); ok {
			break
		}
	}
	shown, _, _ = strings.Cut(shown, "```")
	rows := 0
	for _, line := range strings.Split(shown, "\n") {
		if strings.HasPrefix(line, "|") {
			rows++
			if !strings.Contains(report, line+"\n") {
				t.Errorf("%s shows %q, which the report does not have", page, line)
			}
		}
	}
	if !ok || rows < min {
		t.Errorf("the documents show %d rows of the report opening %q", rows, start)
	}
}

// superego version prints the module's version and the VCS revision from
// the build information: a test binary has none, and says so; a build
// with a revision names it, its time, and whether it was modified.
func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := runCmd(t, env(), "version")
	if code != exitOK || out != "superego "+version()+"\n" || !strings.HasPrefix(out, "superego ") {
		t.Errorf("version: %d %q", code, out)
	}
	info := &debug.BuildInfo{Main: debug.Module{Path: "superego", Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "5e3c1b2a"}, {Key: "vcs.time", Value: "2026-11-25T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got := versionOf(info); got != "v1.4.0 revision 5e3c1b2a (2026-11-25T12:00:00Z), modified" {
		t.Errorf("versionOf: %q", got)
	}
	info.Settings = nil
	if got := versionOf(info); !strings.HasPrefix(got, "v1.4.0, no VCS revision") {
		t.Errorf("versionOf with no revision: %q", got)
	}
}
