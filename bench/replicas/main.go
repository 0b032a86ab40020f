// Command replicas measures superego's replicas on PostgreSQL against one
// server on SQLite: 1,000 concurrent runs of the guarded
// calculator, with 20 ms model calls from a fake model over HTTP, sent to
// one SQLite server, to one PostgreSQL replica, and spread over two
// replicas on one database. It prints runs/s, p50 and p99 time to done, and
// the PostgreSQL server's CPU time per run (its processes' CPU from /proc),
// for rounds that take the three in turn, and one JSON line.
//
//	go run ./bench/replicas [-runs 1000] [-rounds 3] [-pg postgres://…]
//
// -pg defaults to SUPEREGO_TEST_POSTGRES; the PostgreSQL server must run on
// this machine for its CPU to be read.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"superego/agents/agentstest"
	"superego/bench/internal/serving"
	"superego/bench/internal/stats"
)

// flowJSON is the guarded-calculator workload as a flow, as
// bench/guarded_calculator runs it.
const flowJSON = `{"name": "guarded calculator", "graph": {"start": "input_superego", "max_steps": 25, "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "bench", "max_iterations": 3,
    "transitions": {"ACCEPT": "calculator", "CAUTION": "calculator", "NEEDS_CLARIFICATION": "self", "*": null}},
  "calculator": {"type": "inner_agent", "agent_id": "calculator", "tools": ["calculator"], "max_iterations": 5,
    "system_prompt": "CALCULATOR AGENT. You answer arithmetic questions. Always use the calculator tool; never compute in your head.",
    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self", "MAX_ITERATIONS": "output_superego"}},
  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "bench",
    "transitions": {"*": null}}}}}`

func main() {
	runs := flag.Int("runs", 1000, "concurrent runs a round")
	rounds := flag.Int("rounds", 3, "rounds of the three setups, taken in turn")
	pg := flag.String("pg", os.Getenv("SUPEREGO_TEST_POSTGRES"), "a PostgreSQL server on this machine")
	constitution := flag.String("constitution", "bench/guarded_calculator/constitution.txt", "the workload's constitution")
	delay := flag.Duration("delay", 20*time.Millisecond, "each model call's latency")
	flag.Parse()
	if *pg == "" {
		fmt.Fprintln(os.Stderr, "replicas: give -pg or SUPEREGO_TEST_POSTGRES: a PostgreSQL server on this machine")
		os.Exit(2)
	}
	b, err := newBench(*constitution, *delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
	defer b.close()
	results := map[string][]round{}
	setups := []string{"sqlite", "pg1", "pg2"}
	for r := 0; r < *rounds; r++ {
		for _, setup := range setups {
			res, err := b.round(setup, *pg, *runs)
			if err != nil {
				fmt.Fprintln(os.Stderr, "replicas:", setup, err)
				os.Exit(1)
			}
			results[setup] = append(results[setup], res)
			fmt.Fprintf(os.Stderr, "round %d %-6s %7.0f runs/s  p50 %6.1f ms  p99 %6.1f ms  postgres %.3f ms CPU a run  errors %d\n",
				r+1, setup, res.perSecond, ms(res.p50), ms(res.p99), res.pgCPUPerRun*1e3, res.errors)
		}
	}
	out := map[string]any{"runs": *runs, "rounds": *rounds, "model_delay_ms": delay.Milliseconds()}
	fmt.Printf("\n%-7s %14s %12s %12s %22s\n", "setup", "runs/s", "p50 ms", "p99 ms", "postgres CPU ms a run")
	med := map[string]round{}
	for _, setup := range setups {
		rs := results[setup]
		m := round{perSecond: median(rs, func(r round) float64 { return r.perSecond }),
			p50:         time.Duration(median(rs, func(r round) float64 { return float64(r.p50) })),
			p99:         time.Duration(median(rs, func(r round) float64 { return float64(r.p99) })),
			pgCPUPerRun: median(rs, func(r round) float64 { return r.pgCPUPerRun })}
		med[setup] = m
		spread := fmt.Sprintf("%.0f–%.0f", minOf(rs, func(r round) float64 { return r.perSecond }), maxOf(rs, func(r round) float64 { return r.perSecond }))
		fmt.Printf("%-7s %6.0f (%s) %12.1f %12.1f %22.3f\n", setup, m.perSecond, spread, ms(m.p50), ms(m.p99), m.pgCPUPerRun*1e3)
		out[setup+"_runs_per_s"], out[setup+"_p50_ms"], out[setup+"_p99_ms"] = m.perSecond, ms(m.p50), ms(m.p99)
		if setup != "sqlite" {
			out[setup+"_postgres_cpu_ms_per_run"] = m.pgCPUPerRun * 1e3
		}
	}
	pg1, pg2 := med["pg1"].perSecond/med["sqlite"].perSecond, med["pg2"].perSecond/med["pg1"].perSecond
	fmt.Printf("\none replica vs SQLite: %.2f× runs/s (goal ≥ 0.8×); two replicas vs one: %.2f× (goal ≥ 0.9×); postgres CPU a run: %.3f ms (goal ≤ 1 ms)\n",
		pg1, pg2, med["pg2"].pgCPUPerRun*1e3)
	out["pg1_vs_sqlite"], out["pg2_vs_pg1"] = pg1, pg2
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

type round struct {
	perSecond   float64
	p50, p99    time.Duration
	pgCPUPerRun float64 // seconds
	errors      int
}

func median(rs []round, f func(round) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return stats.Median(v)
}

func minOf(rs []round, f func(round) float64) float64 {
	v := f(rs[0])
	for _, r := range rs {
		v = min(v, f(r))
	}
	return v
}

func maxOf(rs []round, f func(round) float64) float64 {
	v := f(rs[0])
	for _, r := range rs {
		v = max(v, f(r))
	}
	return v
}

// bench holds what every round shares: the binary, the flows, the model.
type bench struct {
	dir    string
	binary string
	model  *agentstest.Server
}

func newBench(constitution string, delay time.Duration) (*bench, error) {
	text, err := os.ReadFile(constitution)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-replicas-")
	if err != nil {
		return nil, err
	}
	b := &bench{dir: dir, binary: filepath.Join(dir, "superego")}
	for name, body := range map[string][]byte{"flows/guarded_calculator.json": []byte(flowJSON), "constitutions/bench.md": text} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			return nil, err
		}
	}
	build := exec.Command("go", "build", "-o", b.binary, "./cmd/superego")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	b.model = agentstest.NewOpenAI(func(r agentstest.Request) agentstest.Answer {
		a := agentstest.Answer{Delay: delay}
		switch r.Node() {
		case "input_superego":
			a.Text = agentstest.JSON("Benign arithmetic request.", "CAUTION", "verify", "ok")
		case "calculator":
			if res := r.ToolResults(); len(res) > 0 {
				a.Text = agentstest.JSON("done", "COMPLETE", "", "5*10 = "+res[0].Text)
			} else {
				a.ToolCalls = []agentstest.Call{{ID: "call_calc_1", Name: "calculator", Args: `{"expression":"5*10"}`}}
			}
		default:
			a.Text = agentstest.JSON("fine", "ACCEPT", "", "")
		}
		return a
	})
	b.model.Start()
	return b, nil
}

func (b *bench) close() {
	b.model.Close()
	os.RemoveAll(b.dir)
}

// server is a superego serve process.
type server struct {
	cmd  *exec.Cmd
	addr string
}

func (b *bench) serve(db string) (*server, error) {
	logs, err := os.CreateTemp(b.dir, "server-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.binary, "serve", "--addr", "127.0.0.1:0", "--flows", filepath.Join(b.dir, "flows"),
		"--constitutions", filepath.Join(b.dir, "constitutions"), "--db", db, "--max-runs", "5000",
		"--workspaces", filepath.Join(b.dir, "workspaces"))
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=k", "OPENAI_BASE_URL="+b.model.URL+"/v1", "SUPEREGO_MODEL=openai:gpt-bench")
	cmd.Stderr = logs
	addr, err := serving.Start(cmd)
	if err != nil {
		log, _ := os.ReadFile(logs.Name())
		return nil, fmt.Errorf("%w:\n%s", err, log)
	}
	return &server{cmd: cmd, addr: addr}, nil
}

func (s *server) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	s.cmd.Wait()
}

// round runs one setup: its servers, fresh, then the runs, spread over them.
func (b *bench) round(setup, pg string, runs int) (round, error) {
	var dbs []string
	switch setup {
	case "sqlite":
		dbs = []string{filepath.Join(b.dir, fmt.Sprintf("s-%d.db", time.Now().UnixNano()))}
	default:
		u, drop, err := schema(pg)
		if err != nil {
			return round{}, err
		}
		defer drop()
		dbs = []string{u}
		if setup == "pg2" {
			dbs = append(dbs, u)
		}
	}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for _, db := range dbs {
		s, err := b.serve(db)
		if err != nil {
			return round{}, err
		}
		servers = append(servers, s)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: runs, MaxConnsPerHost: 0}}
	// Warm up: connections, caches, the first run of each server.
	for _, s := range servers {
		if _, err := execute(client, s.addr); err != nil {
			return round{}, err
		}
	}
	cpu0, err := postgresCPU()
	if err != nil {
		return round{}, err
	}
	lat := make([]time.Duration, runs)
	errs := make([]error, runs)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			t := time.Now()
			_, errs[i] = execute(client, servers[i%len(servers)].addr)
			lat[i] = time.Since(t)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	cpu1, err := postgresCPU()
	if err != nil {
		return round{}, err
	}
	res := round{perSecond: float64(runs) / wall.Seconds()}
	for _, err := range errs {
		if err != nil {
			if res.errors == 0 {
				fmt.Fprintln(os.Stderr, "a run failed:", err)
			}
			res.errors++
		}
	}
	slices.Sort(lat)
	res.p50, res.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	if setup != "sqlite" {
		res.pgCPUPerRun = (cpu1 - cpu0) / float64(runs)
	}
	return res, nil
}

// execute runs the flow once and waits for its JSON answer.
func execute(client *http.Client, addr string) (string, error) {
	req, _ := http.NewRequest("POST", "http://"+addr+"/flow/execute", bytes.NewReader([]byte(`{"flow_id": "guarded_calculator", "input": "What is 5*10?"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var res struct {
		Status   string          `json:"status"`
		Response string          `json:"response"`
		Error    json.RawMessage `json:"error"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &res); err != nil || res.Status != "completed" {
		return "", fmt.Errorf("%d %s %s", resp.StatusCode, res.Status, res.Error)
	}
	return res.Response, nil
}

// schema makes a schema of its own for one round on the server at pg.
func schema(pg string) (string, func(), error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		return "", nil, err
	}
	var b [6]byte
	rand.Read(b[:])
	name := "bench_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	u, err := url.Parse(pg)
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		conn.Exec(context.Background(), `DROP SCHEMA `+name+` CASCADE`)
		conn.Close(context.Background())
	}, nil
}

// postgresCPU is the CPU time, in seconds, that the machine's PostgreSQL
// processes have used: each one's own, and for the postmaster, that of the
// backends it has reaped.
func postgresCPU() (float64, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	const hz = 100 // USER_HZ on Linux
	ticks := 0.0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < 0 || s[open+1:close] != "postgres" {
			continue
		}
		f := strings.Fields(s[close+2:]) // f[0] is field 3, state
		num := func(field int) float64 { v, _ := strconv.ParseFloat(f[field-3], 64); return v }
		ticks += num(14) + num(15) // utime, stime
		if ppid, _ := strconv.Atoi(f[1]); !isPostgres(ppid) {
			ticks += num(16) + num(17) // the postmaster: its reaped children's
		}
	}
	return ticks / hz, nil
}

func isPostgres(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && strings.Contains(string(b), "(postgres)")
}
