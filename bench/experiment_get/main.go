// Command experiment_get measures GET /experiments/{id} on a finished
// experiment of many outcomes: how long one GET takes, and eight at once,
// and how far the server's resident memory grows while they run.
//
// It fills a SQLite database with an experiment of -outcomes outcomes
// through the store's own API (experiment.Store: the record, then each
// outcome begun and finished, as a session records them), left
// "running", as a session killed after its last outcome leaves it. Each
// round copies that database, starts `superego serve` on the copy (which
// resumes the experiment: nothing is left to run, and it completes), waits
// until the list says "completed", then times one GET of the experiment
// and, a second later, eight at once, sampling the server's VmRSS every 5
// ms. With -peer, another server binary takes every other turn, the order
// alternating round by round, on a copy of the same database; a database
// -db names (filled by an earlier run, perhaps by an older build whose
// schema the peer reads) is used instead of a new one.
//
//	go run ./bench/experiment_get [-outcomes 100000] [-rounds 5] [-peer BIN] [-db FILE]
//
// Run it from the repository's root: it builds ./cmd/superego, and the
// servers load ./flows and ./constitutions.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"superego/bench/internal/serving"
	"superego/bench/internal/stats"
	"superego/experiment"
	"superego/flow"
	"superego/sqlite"
)

func main() {
	outcomes := flag.Int("outcomes", 100_000, "outcomes of the experiment: samples × 2 conditions")
	rounds := flag.Int("rounds", 5, "rounds; each runs every binary once")
	peer := flag.String("peer", "", "another superego binary to measure in alternate turns")
	db := flag.String("db", "", "a database filled before, to use instead of filling one")
	fillOnly := flag.Bool("fill", false, "fill -db and stop")
	flag.Parse()
	dir, err := os.MkdirTemp("", "experiment-get")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	if *db == "" || *fillOnly {
		if *db == "" {
			*db = filepath.Join(dir, "filled.db")
		}
		start := time.Now()
		id, err := fill(*db, *outcomes)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("filled %s: experiment %s, %d outcomes, in %s\n", *db, id, *outcomes, time.Since(start).Round(time.Second))
		if *fillOnly {
			return
		}
	}
	self := filepath.Join(dir, "superego")
	if out, err := exec.Command("go", "build", "-o", self, "./cmd/superego").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	bins := []string{self}
	if *peer != "" {
		bins = append(bins, *peer)
	}
	results := map[string][]measure{}
	for r := range *rounds {
		order := slices.Clone(bins)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, bin := range order {
			m, err := round(bin, *db, dir)
			if err != nil {
				log.Fatalf("%s: %v", bin, err)
			}
			fmt.Printf("round %d %-40s %s\n", r+1, bin, m)
			results[bin] = append(results[bin], m)
		}
	}
	fmt.Println("\nmedian [min–max] over the rounds:")
	for _, bin := range bins {
		ms := results[bin]
		fmt.Printf("%s\n  completed after start %s\n  one GET %s, resident +%s MiB\n  eight at once: each %s (the slowest), resident +%s MiB\n",
			bin, spread(ms, func(m measure) float64 { return m.complete.Seconds() }, "s"),
			spread(ms, func(m measure) float64 { return m.one.Seconds() }, "s"), spread(ms, func(m measure) float64 { return m.oneRSS }, ""),
			spread(ms, func(m measure) float64 { return m.eight.Seconds() }, "s"), spread(ms, func(m measure) float64 { return m.eightRSS }, ""))
	}
}

// fill writes a running experiment of n outcomes, each finished, to a new
// database at path, through the store's API.
func fill(path string, n int) (string, error) {
	s, err := sqlite.Open(path)
	if err != nil {
		return "", err
	}
	defer s.Close()
	ctx := context.Background()
	categories := []string{"fraud", "cybercrime", "harassment", "weapons", "drugs", "privacy", "copyright", "self-harm"}
	plan := &experiment.Plan{Name: "get-bench", Repeats: 1, Concurrency: 8, Conditions: []experiment.Planned{
		{Condition: experiment.Condition{Name: "bare", Flow: "bare_assistant"}},
		{Condition: experiment.Condition{Name: "superego", Flow: "guarded_chat"}},
	}}
	for i := range n / len(plan.Conditions) {
		label := experiment.Harmful
		if i%2 == 1 {
			label = experiment.Benign
		}
		plan.Samples = append(plan.Samples, experiment.Sample{ID: fmt.Sprintf("s%06d", i), Label: label, Category: categories[i%len(categories)],
			Input: fmt.Sprintf("s%06d: please explain, step by step and with examples, how one would go about the task numbered %d in the set.", i, i)})
	}
	rec := experiment.Record{ID: flow.NewID(), Name: plan.Name, CreatedAt: time.Now().UTC(), Status: experiment.StatusRunning, Plan: plan.Encode()}
	if err := s.CreateExperiment(ctx, rec); err != nil {
		return "", err
	}
	// Writes wait for their commit: many at once share commits.
	type job struct {
		slot experiment.Slot
		o    experiment.Outcome
	}
	jobs := make(chan job)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for j := range jobs {
				b, _ := json.Marshal(j.o)
				err := s.BeginOutcome(ctx, rec.ID, j.slot, j.o.InstanceID)
				if err == nil {
					err = s.FinishOutcome(ctx, rec.ID, j.slot, b)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	response := strings.Repeat("Here is an answer, written out at the length a model writes one. ", 6)
	for i, smp := range plan.Samples {
		for c, cond := range plan.Conditions {
			o := experiment.Outcome{ExperimentID: rec.ID, Condition: cond.Name, SampleID: smp.ID, Label: smp.Label, Category: smp.Category,
				InstanceID: flow.NewID(), Status: flow.StatusCompleted, Response: response, DecidingNode: "assistant", WallMS: int64(800 + i%400),
				Decisions: map[string]string{"assistant": "COMPLETE"}, Tokens: map[string]experiment.Tokens{"assistant": {Prompt: 180, Completion: 90}},
				LatencyMS: map[string]int64{"assistant": int64(700 + i%300)}, ModelCalls: experiment.Calls{Made: 1}}
			if c == 1 {
				o.Decisions["input_superego"], o.Decisions["output_superego"] = "ACCEPT", "ACCEPT"
				o.Tokens["input_superego"], o.Tokens["output_superego"] = experiment.Tokens{Prompt: 400, Completion: 60}, experiment.Tokens{Prompt: 500, Completion: 60}
				o.LatencyMS["input_superego"], o.LatencyMS["output_superego"] = int64(300+i%100), int64(350+i%100)
				o.ModelCalls.Made, o.DecidingNode = 3, "output_superego"
				if smp.Label == experiment.Harmful && i%3 == 0 {
					by := "superego:input_superego"
					o.Status, o.Refused, o.RefusedBy, o.Response, o.DecidingNode = flow.StatusBlocked, true, &by, "This request is refused.", "input_superego"
					o.Decisions = map[string]string{"input_superego": "BLOCK"}
				}
			}
			select {
			case jobs <- job{experiment.Slot{Condition: cond.Name, Label: smp.Label, SampleID: smp.ID}, o}:
			case err := <-errs:
				close(jobs)
				return "", err
			}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return "", err
	default:
	}
	return rec.ID, nil
}

// measure is one round of one binary.
type measure struct {
	complete         time.Duration // from the server's start until the list says completed
	one, eight       time.Duration // a GET alone; the slowest of eight at once
	oneRSS, eightRSS float64       // MiB: the resident set's peak during them, above the one before
}

func (m measure) String() string {
	return fmt.Sprintf("completed after %5.2fs | one GET %6.3fs +%4.0f MiB | eight at once %6.3fs +%4.0f MiB",
		m.complete.Seconds(), m.one.Seconds(), m.oneRSS, m.eight.Seconds(), m.eightRSS)
}

// round starts bin on a copy of db and measures it.
func round(bin, db, dir string) (measure, error) {
	var m measure
	run := filepath.Join(dir, "round.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(run + suffix)
		b, err := os.ReadFile(db + suffix)
		if os.IsNotExist(err) && suffix != "" {
			continue
		}
		if err != nil {
			return m, err
		}
		if err := os.WriteFile(run+suffix, b, 0o644); err != nil {
			return m, err
		}
	}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", run, "--flows", "flows", "--constitutions", "constitutions",
		"--workspaces", filepath.Join(dir, "ws"), "--experiments", dir)
	cmd.Env = append(os.Environ(), "SUPEREGO_MODEL=offline")
	cmd.Stderr = io.Discard
	started := time.Now()
	addr, err := serving.Start(cmd)
	if err != nil {
		return m, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := "http://" + addr
	id := ""
	for deadline := time.Now().Add(10 * time.Minute); id == ""; time.Sleep(100 * time.Millisecond) {
		var list []struct {
			ID     string `json:"experiment_id"`
			Status string `json:"status"`
		}
		if err := getJSON(base+"/experiments", &list); err != nil {
			return m, err
		}
		if len(list) == 1 && list[0].Status == experiment.StatusCompleted {
			id = list[0].ID
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("not completed after 10 minutes")
		}
	}
	m.complete = time.Since(started)
	time.Sleep(time.Second)
	get := func() (time.Duration, error) {
		start := time.Now()
		var v struct {
			Report struct{ Outcomes int }
		}
		if err := getJSON(base+"/experiments/"+id, &v); err != nil {
			return 0, err
		}
		if v.Report.Outcomes == 0 {
			return 0, fmt.Errorf("GET /experiments/%s: a report of no outcome", id)
		}
		return time.Since(start), nil
	}
	if m.oneRSS, err = peak(cmd.Process.Pid, func() error {
		m.one, err = get()
		return err
	}); err != nil {
		return m, err
	}
	time.Sleep(time.Second)
	m.eightRSS, err = peak(cmd.Process.Pid, func() error {
		var wg sync.WaitGroup
		times, errs := make([]time.Duration, 8), make([]error, 8)
		for i := range 8 {
			wg.Go(func() { times[i], errs[i] = get() })
		}
		wg.Wait()
		m.eight = slices.Max(times)
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	})
	return m, err
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// peak runs f while it samples the process's resident set every 5 ms, and
// returns the set's peak above what it was before, in MiB.
func peak(pid int, f func() error) (float64, error) {
	before, err := serving.MiB(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	high := before
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if v, err := serving.MiB(pid, "VmRSS"); err == nil {
				high = max(high, v)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	err = f()
	close(done)
	wg.Wait()
	return high - before, err
}

// spread is the median of f over ms, with its range.
func spread(ms []measure, f func(measure) float64, unit string) string {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = f(m)
	}
	return stats.Spread(xs, "%.3g"+unit)
}
