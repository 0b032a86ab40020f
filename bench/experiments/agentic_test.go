package experiments

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/bench/internal/stats"
	"superego/engine"
	"superego/experiment"
	"superego/flow"
	"superego/memstore"
	"superego/tools"
)

// BenchmarkAgenticBookkeeping measures what an agentic outcome costs:
// the shipped agentic sample through bare_agent, by the lab
// (the lab plays the client, and records each outcome with its calls and
// measures), against the same runs made straight on the engine with the
// same canned answers and nothing recorded beside the runs. Both run in
// this process on one engine and one fake model answering each call after
// 20 ms, 8 at a time; the two alternate, in rounds, and the benchmark
// reports the medians and the ratio.
//
//	go test -run '^$' -bench AgenticBookkeeping -benchtime 1x ./bench/experiments
func BenchmarkAgenticBookkeeping(b *testing.B) {
	samples := agenticSamples(b)
	fake := agentstest.OpenAI(b, func(r agentstest.Request) agentstest.Answer {
		a := agentstest.Reply("", "COMPLETE", "", "Done.")
		if len(r.ToolResults()) == 0 && len(r.Tools) > 0 {
			a = agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "c1", Name: r.Tools[0], Args: `{}`}}}
		}
		a.Delay = 20 * time.Millisecond
		return a
	})
	p := &agents.Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: fake.URL + "/v1"}
	f, err := flow.LoadFile("../../flows/bare_agent.json", flow.Catalog{Tools: []string{"calculator"}, Providers: agents.ProviderNames})
	if err != nil {
		b.Fatal(err)
	}
	flows := map[string]*flow.Flow{"bare_agent": f}
	eng := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: &agents.Agent{Model: p.Model, Tools: tools.Set{}, Timeout: 10 * time.Second}}, Store: &memstore.Store{}}
	lab := &experiment.Lab{Engine: eng, Store: &experiment.MemStore{}, Env: experiment.Env{Flows: flows, Providers: agents.ProviderNames, Dir: "../../experiments"}}
	defer func() {
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		eng.Close(expired)
	}()
	doc := `{"name": "bench", "dataset": "agentic_sample.jsonl", "conditions": [{"name": "a", "flow": "bare_agent"}], "concurrency": 8}`
	var withLab, straight []time.Duration
	for round := range 3 * b.N {
		for _, byLab := range []bool{round%2 == 0, round%2 == 1} {
			start := time.Now()
			if byLab {
				runLab(b, lab, doc)
				withLab = append(withLab, time.Since(start))
			} else {
				runStraight(b, eng, samples)
				straight = append(straight, time.Since(start))
			}
		}
	}
	l, s := stats.Median(withLab), stats.Median(straight)
	b.ReportMetric(float64(l.Milliseconds()), "lab-ms")
	b.ReportMetric(float64(s.Milliseconds()), "straight-ms")
	b.ReportMetric(float64(l)/float64(s), "ratio")
	b.Logf("%d agentic outcomes, 8 at a time: by the lab %v (%v–%v), straight %v (%v–%v), ratio %.3f",
		len(samples), l, slices.Min(withLab), slices.Max(withLab), s, slices.Min(straight), slices.Max(straight), float64(l)/float64(s))
}

func runLab(b *testing.B, lab *experiment.Lab, doc string) {
	d, err := experiment.Parse(strings.NewReader(doc))
	if err != nil {
		b.Fatal(err)
	}
	plan, err := d.Check(lab.Env)
	if err != nil {
		b.Fatal(err)
	}
	rec, err := lab.Create(context.Background(), plan)
	if err != nil {
		b.Fatal(err)
	}
	if err := lab.Start(context.Background(), rec.ID, experiment.Options{NoCache: true}); err != nil {
		b.Fatal(err)
	}
	if err := lab.Wait(context.Background(), rec.ID); err != nil {
		b.Fatal(err)
	}
}

// runStraight runs each sample on the engine, answering its calls with
// the first canned result, 8 at a time.
func runStraight(b *testing.B, eng *engine.Engine, samples []experiment.Sample) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, s := range samples {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c := &flow.ClientTools{}
			for _, t := range s.Tools {
				c.Tools = append(c.Tools, flow.ClientTool{Name: t.Name, Parameters: t.Parameters, ReadOnly: t.ReadOnly})
			}
			req := engine.Request{FlowID: "bare_agent", Input: s.Input, Options: flow.RunOptions{Client: c}}
			for {
				var done flow.Done
				var id string
				err := eng.Run(context.Background(), req, func(ev flow.Event) {
					switch d := ev.Data.(type) {
					case flow.Done:
						done = d
					case flow.RunStart:
						id = d.InstanceID
					}
				})
				if err != nil {
					b.Error(err)
					return
				}
				if done.Status != flow.StatusAwaitingToolResult {
					return
				}
				req = engine.Request{FlowID: "bare_agent", InstanceID: id, Continue: true, Options: flow.RunOptions{Client: c}}
				for _, call := range done.ToolCalls {
					i := slices.IndexFunc(s.Tools, func(t experiment.SimTool) bool { return t.Name == call.ToolName })
					req.Options.Results = append(req.Options.Results, flow.ClientResult{ToolCallID: call.ToolCallID, Output: s.Tools[i].Returns[0].Result})
				}
			}
		}()
	}
	wg.Wait()
}

func agenticSamples(b *testing.B) []experiment.Sample {
	file, err := os.Open(filepath.Join("..", "..", "experiments", "agentic_sample.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer file.Close()
	var out []experiment.Sample
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s experiment.Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			b.Fatal(fmt.Errorf("agentic_sample.jsonl: %w", err))
		}
		out = append(out, s)
	}
	return out
}
