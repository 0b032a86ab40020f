// Command openai_overhead measures what /v1/chat/completions with stream
// costs over POST /flow/execute for the same run: both over loopback HTTP,
// on the built-in offline model, with the in-memory store, read to the end
// by the same client. Requests alternate, in pairs whose order alternates
// too, so that a slow spell of a busy machine falls on both alike; it
// prints one JSON line with the medians, the 10th and 90th percentiles,
// and the ratio of the medians (the goal: at most 1.2).
//
//	go run ./bench/openai_overhead [-flow basic_calculator] [-n 2000]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"superego/agents"
	"superego/api"
	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/tools"
)

func main() {
	flows := flag.String("flows", "./flows", "flow definitions directory")
	constitutions := flag.String("constitutions", "./constitutions", "constitutions directory")
	flowID := flag.String("flow", "basic_calculator", "the flow both routes run")
	input := flag.String("input", "What is 5*10?", "the user's message")
	n := flag.Int("n", 2000, "requests per route, after the warm-up")
	warmup := flag.Int("warmup", 200, "requests per route first, not measured")
	flag.Parse()
	if err := run(*flows, *constitutions, *flowID, *input, *n, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "openai_overhead:", err)
		os.Exit(1)
	}
}

func run(flowsDir, constitutionsDir, flowID, input string, n, warmup int) error {
	dir, err := os.MkdirTemp("", "openai_overhead")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ws := &tools.Workspaces{Root: dir}
	set := tools.Builtin(&tools.Search{}, ws)
	texts, err := flow.Constitutions(constitutionsDir)
	if err != nil {
		return err
	}
	flows, _, err := flow.LoadDir(flowsDir, flow.Catalog{Tools: set.Names(), Providers: agents.ProviderNames, Texts: texts})
	if err != nil {
		return err
	}
	if flows[flowID] == nil {
		return fmt.Errorf("no flow %q in %s", flowID, flowsDir)
	}
	providers := &agents.Providers{Default: "offline"}
	log := slog.New(slog.DiscardHandler)
	engine := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: &agents.Agent{Model: providers.Model, Tools: set, Workspaces: ws}},
		Store: &memstore.Store{}, MaxRuns: 64, Log: log}
	srv := &http.Server{Handler: (&api.Server{Engine: engine, Log: log}).Handler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	in, _ := json.Marshal(input)
	execute := request{client, base + "/flow/execute", fmt.Sprintf(`{"flow_id": %q, "input": %s}`, flowID, in), []byte("\nevent: done\n")}
	v1 := request{client, base + "/v1/chat/completions",
		fmt.Sprintf(`{"model": %q, "stream": true, "messages": [{"role": "user", "content": %s}]}`, flowID, in), []byte("data: [DONE]\n")}
	for range warmup {
		if _, err := execute.time(); err != nil {
			return err
		}
		if _, err := v1.time(); err != nil {
			return err
		}
	}
	runtime.GC()
	var te, tv []time.Duration
	for i := range n {
		first, second := &execute, &v1
		if i%2 == 1 {
			first, second = second, first
		}
		d1, err := first.time()
		if err != nil {
			return err
		}
		d2, err := second.time()
		if err != nil {
			return err
		}
		if i%2 == 1 {
			d1, d2 = d2, d1
		}
		te, tv = append(te, d1), append(tv, d2)
	}
	ratios := make([]float64, n)
	for i := range n {
		ratios[i] = float64(tv[i]) / float64(te[i])
	}
	slices.Sort(te)
	slices.Sort(tv)
	slices.Sort(ratios)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	pct := func(ds []time.Duration, p int) float64 { return us(ds[len(ds)*p/100]) }
	out, _ := json.Marshal(map[string]any{
		"flow":               flowID,
		"model":              "offline",
		"requests_per_route": n,
		"execute_sse_us":     map[string]float64{"p10": pct(te, 10), "median": pct(te, 50), "p90": pct(te, 90)},
		"v1_stream_us":       map[string]float64{"p10": pct(tv, 10), "median": pct(tv, 50), "p90": pct(tv, 90)},
		"ratio_of_medians":   round(pct(tv, 50) / pct(te, 50)),
		"median_pair_ratio":  round(ratios[n/2]),
		"pair_ratio_p10_p90": []float64{round(ratios[n/10]), round(ratios[n*9/10])},
	})
	fmt.Println(string(out))
	return nil
}

func round(x float64) float64 { return float64(int(x*1000+0.5)) / 1000 }

// request is one route's request, read to its end.
type request struct {
	client *http.Client
	url    string
	body   string
	end    []byte // what a whole answer holds
}

func (r *request) time() (time.Duration, error) {
	start := time.Now()
	resp, err := r.client.Post(r.url, "application/json", strings.NewReader(r.body))
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Contains(b, r.end)) {
		err = fmt.Errorf("%s: %d %s", r.url, resp.StatusCode, b)
	}
	return d, err
}
