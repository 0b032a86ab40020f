package experiment_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"superego/experiment"
)

// No hidden field reaches what an experiment shows: the judges' thinking,
// the guidance given to the assistant, and the draft the output superego
// withheld appear in no outcome, results.csv, report (in any of its forms,
// provenance and costs included), comparison, event or log line.
func TestNothingHiddenLeaks(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{cache: true})
	set := samples("h1", "OUT:BLOCK", "h2", "IN:CAUTION", "h3", "AGENT:REFUSE", "h4", "IN:BLOCK", "b1", "OUT:BLOCK", "b2", "STRICT:BLOCK")
	d, _ := experiment.Parse(strings.NewReader(`{"samples": ` + set + `, "conditions": [{"name": "superego", "flow": "guarded_chat"},
		{"name": "strict", "flow": "guarded_chat", "constitutions": {"input_superego": "strict"}}], "refusal_judge": {"model": "openai:judge"}}`))
	plan, err := d.Check(r.lab.Env)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := r.lab.Create(context.Background(), plan)
	var seen strings.Builder
	collect := func(id string, opts experiment.Options) {
		if err := r.lab.Start(context.Background(), id, opts); err != nil {
			t.Fatal(err)
		}
		w, err := r.lab.Subscribe(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for ev := range w.C {
			b, _ := json.Marshal(ev.Data)
			seen.WriteString(ev.Name + " " + string(b) + "\n")
		}
		r.lab.Wait(context.Background(), id)
	}
	collect(rec.ID, experiment.Options{})
	if _, err := r.lab.Replay(context.Background(), rec.ID, experiment.ReplayRequest{From: "superego", As: "replayed",
		Constitutions: map[string]string{"output_superego": "strict"}}); err != nil {
		t.Fatal(err)
	}
	collect(rec.ID, experiment.Options{})

	results, err := r.lab.Results(context.Background(), rec.ID)
	if err != nil || len(results) != 18 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	for _, o := range results {
		b, _ := json.Marshal(o)
		seen.Write(b)
	}
	seen.Write(experiment.ResultsCSV(results))
	rep := r.report(t, rec.ID)
	b, _ := json.Marshal(rep)
	seen.Write(b)
	seen.WriteString(rep.Markdown() + rep.CSV() + rep.LaTeX() + rep.SVG())
	for _, pair := range [][2]string{{"superego", "strict"}, {"superego", "replayed"}} {
		c, err := r.lab.Compare(context.Background(), rec.ID, pair[0], pair[1])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(c)
		seen.Write(b)
		seen.WriteString(c.Markdown())
	}
	v, _ := r.lab.Get(context.Background(), rec.ID)
	b, _ = json.Marshal(v)
	seen.Write(b)
	seen.WriteString(r.logs.String())

	all := seen.String()
	for _, mark := range []string{thinkMark, guideMark, draftMark} {
		if i := strings.Index(all, mark); i >= 0 {
			t.Errorf("%s leaks: …%s…", mark, all[max(0, i-200):min(len(all), i+100)])
		}
	}
	// The draft was there to leak: h1's assistant wrote it, and the
	// outcome's response is the superego's refusal in its place.
	for _, o := range results {
		if o.SampleID == "h1" && o.Condition == "superego" && (o.Response != "The draft was not fit to send." || o.RefusedBy == nil || *o.RefusedBy != "superego:output_superego") {
			t.Errorf("h1: %+v", o)
		}
	}
	if !strings.Contains(all, "event outcome") && !strings.Contains(all, "outcome {") {
		t.Error("no outcome event was seen")
	}
}
