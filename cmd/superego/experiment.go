package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"superego/experiment"
	"superego/flow"
)

const experimentUsage = `usage:
  superego experiment run FILE [--out DIR] [--no-cache]      run an experiment file; prints "experiment ID" first
  superego experiment resume ID [--out DIR] [--retry-errors] continue a stopped, cancelled or killed experiment
                                                             (files go where the experiment's last --out said, else results/ID)
  superego experiment report ID [--format md|json|csv|latex|svg] [--adjust holm|bh|none]  its report, as it stands
  superego experiment compare ID A B [--format md|json]      conditions A and B, paired
  superego experiment replay ID --from COND --as NAME [--constitution NODE=NAME]... [--model NODE=MODEL]... [--stack NAME[:LEVEL],...] [--no-live] [--out DIR]
                                                             re-judge COND's recorded runs with other superegos
  superego experiment list                                   every experiment, newest first
`

// experimentCmd runs `superego experiment …` in this process, on the
// configured store: an experiment run here can be resumed, reported and
// replayed here or by a server on the same database.
func experimentCmd(ctx context.Context, cfg config, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "superego experiment: give a subcommand\n\n"+experimentUsage)
		return exitUsage
	}
	sub, args := args[0], args[1:]
	want := map[string]int{"run": 1, "resume": 1, "report": 1, "compare": 3, "replay": 1, "list": 0}
	n, ok := want[sub]
	if !ok {
		fmt.Fprintf(stderr, "superego experiment: unknown subcommand %q\n\n%s", sub, experimentUsage)
		return exitUsage
	}
	if len(args) != n {
		fmt.Fprintf(stderr, "superego experiment %s: want %d arguments, got %d\n\n%s", sub, n, len(args), experimentUsage)
		return exitUsage
	}
	w, err := wire(cfg, newLogger(cfg, stderr, slog.LevelWarn))
	if err != nil {
		fmt.Fprintf(stderr, "superego experiment %s: %v\n", sub, err)
		return exitUsage
	}
	defer w.close()
	x := &experimenter{cfg: cfg, w: w, stdout: stdout, stderr: stderr, sub: sub}
	switch sub {
	case "run":
		return x.run(ctx, args[0])
	case "resume":
		return x.resume(ctx, args[0])
	case "report":
		return x.report(ctx, args[0])
	case "compare":
		return x.compare(ctx, args[0], args[1], args[2])
	case "replay":
		return x.replay(ctx, args[0])
	}
	return x.list(ctx)
}

type experimenter struct {
	cfg            config
	w              *wiring
	stdout, stderr io.Writer
	sub            string
}

func (x *experimenter) fail(code int, err error) int {
	fmt.Fprintf(x.stderr, "superego experiment %s: %v\n", x.sub, err)
	return code
}

// run checks a file, keeps it as a new experiment and runs it.
func (x *experimenter) run(ctx context.Context, file string) int {
	f, err := os.Open(file)
	if err != nil {
		return x.fail(exitUsage, err)
	}
	doc, err := experiment.Parse(f)
	f.Close()
	if err != nil {
		return x.fail(exitUsage, fmt.Errorf("%s: %w", file, err))
	}
	env := x.w.lab.Env
	env.Dir, env.Confined = filepath.Dir(file), false
	if doc.Name == "" {
		doc.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	plan, err := doc.Check(env)
	if err != nil {
		return x.fail(exitUsage, invalidLines(file, err))
	}
	rec, err := x.w.lab.Create(ctx, plan)
	if err != nil {
		return x.fail(exitFailed, err)
	}
	fmt.Fprintf(x.stdout, "experiment %s\n", rec.ID)
	return x.session(ctx, rec.ID)
}

// invalidLines lists a document's problems one a line.
func invalidLines(file string, err error) error {
	var inv *flow.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	lines := make([]string, len(inv.Problems))
	for i, p := range inv.Problems {
		lines[i] = "  " + p.String()
	}
	return fmt.Errorf("%s is not a valid experiment:\n%s", file, strings.Join(lines, "\n"))
}

// resume continues an experiment: the engine first resumes the runs of it
// a crash interrupted, which the session follows to their end.
func (x *experimenter) resume(ctx context.Context, id string) int {
	if _, err := x.w.lab.Store.Experiment(ctx, id); err != nil {
		return x.fail(codeOf(err), err)
	}
	if _, err := x.w.engine.Recover(ctx, ofExperiment(id)); err != nil {
		return x.fail(exitFailed, err)
	}
	fmt.Fprintf(x.stdout, "experiment %s\n", id)
	return x.session(ctx, id)
}

// ofExperiment picks the runs of experiment id: the CLI may share its
// store with a server, whose runs are the server's to resume.
func ofExperiment(id string) func(flow.RunOptions) bool {
	return func(o flow.RunOptions) bool { return o.Tags["experiment"] == id }
}

// replay adds a counterfactual condition and runs it.
func (x *experimenter) replay(ctx context.Context, id string) int {
	req := experiment.ReplayRequest{From: x.cfg.From, As: x.cfg.As, NoLive: x.cfg.NoLive}
	for _, kv := range []struct {
		list []string
		into *map[string]string
		flag string
	}{{x.cfg.NodeConstitutions, &req.Constitutions, "constitution"}, {x.cfg.NodeModels, &req.Models, "model"}} {
		for _, v := range kv.list {
			node, val, ok := strings.Cut(v, "=")
			if !ok || node == "" || val == "" {
				return x.fail(exitUsage, fmt.Errorf("--%s %q: want NODE=VALUE", kv.flag, v))
			}
			if *kv.into == nil {
				*kv.into = map[string]string{}
			}
			(*kv.into)[node] = val
		}
	}
	if x.cfg.Stack != nil {
		picks, problems := flow.ParsePicks(*x.cfg.Stack)
		if len(problems) > 0 {
			return x.fail(exitUsage, fmt.Errorf("--stack %q: %s", *x.cfg.Stack, problems[0]))
		}
		req.Stack = picks
	}
	if req.From == "" || req.As == "" {
		return x.fail(exitUsage, errors.New("give --from COND and --as NAME"))
	}
	if _, err := x.w.engine.Recover(ctx, ofExperiment(id)); err != nil {
		return x.fail(exitFailed, err)
	}
	c, err := x.w.lab.Replay(ctx, id, req)
	if err != nil {
		code := exitFailed
		if errors.Is(err, flow.ErrInvalid) || errors.Is(err, flow.ErrNotFound) || errors.Is(err, flow.ErrBusy) {
			code = exitUsage
		}
		return x.fail(code, invalidLines("the replay", err))
	}
	fmt.Fprintf(x.stdout, "experiment %s\ncondition %s replays %s, asking %s again\n", id, c.Name, c.Replay.From, strings.Join(c.Replay.Ask, ", "))
	return x.session(ctx, id)
}

// out is where the experiment's files go: --out, which the experiment
// then remembers; else where it remembers; else results/ID. It is kept
// absolute, so that a later command run from elsewhere writes there too.
// Called before a session starts, which might otherwise write the record
// at the same time.
func (x *experimenter) out(ctx context.Context, id string) (string, error) {
	rec, err := x.w.lab.Store.Experiment(ctx, id)
	if err != nil {
		return "", err
	}
	dir := x.cfg.Out
	switch {
	case dir == "" && rec.Out != "":
		return rec.Out, nil
	case dir == "":
		dir = filepath.Join("results", id)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", err
	}
	if dir != rec.Out {
		rec.Out = dir
		if err := x.w.lab.Store.UpdateExperiment(ctx, rec); err != nil {
			return "", fmt.Errorf("remember --out: %w", err)
		}
	}
	return dir, nil
}

// session runs the experiment's unfinished outcomes, showing progress on
// stderr, then writes its results to its output folder (x.out, found
// first). Ctrl-C stops it, to be resumed.
func (x *experimenter) session(ctx context.Context, id string) int {
	dir, err := x.out(ctx, id)
	if err != nil {
		return x.fail(exitFailed, err)
	}
	lab, engine := x.w.lab, x.w.engine
	opts := experiment.Options{NoCache: x.cfg.NoCache, RetryErrors: x.cfg.RetryErrors}
	watch, err := lab.Subscribe(ctx, id)
	if err != nil {
		return x.fail(exitUsage, err)
	}
	watch.Close() // only to check the experiment exists before it starts
	err = lab.Start(ctx, id, opts)
	if errors.Is(err, experiment.ErrFinished) {
		fmt.Fprintf(x.stderr, "experiment %s has already finished: nothing is left to run (--retry-errors runs its failed outcomes again)\n", id)
		return x.write(ctx, id, dir)
	}
	if err != nil {
		code := exitFailed
		if errors.Is(err, flow.ErrIdle) || errors.Is(err, flow.ErrNotFound) {
			code = exitUsage
		}
		return x.fail(code, err)
	}
	watch, err = lab.Subscribe(ctx, id)
	if err != nil {
		return x.fail(exitFailed, err)
	}
	defer func() { watch.Close() }() // the last of them
	bar := newProgressBar(x.stderr)
	status, interrupted := "", false
	for status == "" {
		select {
		case ev, ok := <-watch.C:
			switch {
			case !ok:
				// Fell behind: watch again; nothing is lost but outcome events.
				watch.Close()
				if watch, err = lab.Subscribe(ctx, id); err != nil {
					return x.fail(exitFailed, err)
				}
			case ev.Name == experiment.EventProgress:
				bar.show(ev.Data.(experiment.Progress), false)
			case ev.Name == experiment.EventDone:
				d := ev.Data.(experiment.DoneData)
				bar.show(d.Progress, true)
				status = d.Status
			}
		case <-ctx.Done():
			if !interrupted {
				interrupted = true
				// Ctrl-C: no outcome starts, and the runs in flight stop
				// where they are, to resume with the experiment.
				lab.Stop(experiment.ErrStopped)
				expired, cancel := context.WithCancel(context.Background())
				cancel()
				engine.Close(expired)
			}
			ctx = context.Background()
		}
	}
	sessionErr := lab.Wait(context.Background(), id)
	lab.Stop(experiment.ErrStopped)
	grace, cancel := context.WithTimeout(context.Background(), x.cfg.Grace)
	defer cancel()
	engine.Close(grace) // runs the engine recovered for other instances get the grace
	if code := x.write(context.Background(), id, dir); code != exitOK {
		return code
	}
	switch {
	case interrupted:
		fmt.Fprintf(x.stderr, "stopped: superego experiment resume %s goes on from here\n", id)
		return exitCancelled
	case sessionErr != nil && !errors.Is(sessionErr, experiment.ErrCancelled):
		return x.fail(exitFailed, sessionErr)
	case status == experiment.StatusCancelled:
		fmt.Fprintf(x.stderr, "cancelled: superego experiment resume %s goes on from here\n", id)
		return exitCancelled
	}
	return exitOK
}

// write writes results.jsonl, results.csv and the report in each of its
// formats (report.md, .json, .csv, .tex, .svg) to dir.
func (x *experimenter) write(ctx context.Context, id, dir string) int {
	results, err := x.w.lab.Results(ctx, id)
	if err != nil {
		return x.fail(exitFailed, err)
	}
	rep, err := x.w.lab.Report(ctx, id)
	if err != nil {
		return x.fail(exitFailed, err)
	}
	rep.AdjustP(x.cfg.Adjust)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return x.fail(exitFailed, err)
	}
	var lines strings.Builder
	for _, o := range results {
		b, _ := json.Marshal(o)
		lines.Write(b)
		lines.WriteByte('\n')
	}
	written := []string{filepath.Join(dir, "results.jsonl"), filepath.Join(dir, "results.csv")}
	if err := os.WriteFile(written[0], []byte(lines.String()), 0o644); err != nil {
		return x.fail(exitFailed, err)
	}
	if err := os.WriteFile(written[1], experiment.ResultsCSV(results), 0o644); err != nil {
		return x.fail(exitFailed, err)
	}
	for _, f := range experiment.ReportFormats {
		path := filepath.Join(dir, f.File)
		if err := os.WriteFile(path, rep.Render(f), 0o644); err != nil {
			return x.fail(exitFailed, err)
		}
		written = append(written, path)
	}
	fmt.Fprintf(x.stdout, "wrote %s and %s\n", strings.Join(written[:len(written)-1], ", "), written[len(written)-1])
	return exitOK
}

func (x *experimenter) report(ctx context.Context, id string) int {
	rep, err := x.w.lab.Report(ctx, id)
	if err != nil {
		return x.fail(codeOf(err), err)
	}
	rep.AdjustP(x.cfg.Adjust)
	f, err := experiment.FormatOf(x.cfg.Format)
	if err != nil {
		return x.fail(exitUsage, fmt.Errorf("--format %q: want md, json, csv, latex or svg", x.cfg.Format))
	}
	x.stdout.Write(rep.Render(f))
	return exitOK
}

func (x *experimenter) compare(ctx context.Context, id, a, b string) int {
	c, err := x.w.lab.Compare(ctx, id, a, b)
	if err != nil {
		return x.fail(codeOf(err), err)
	}
	switch x.cfg.Format {
	case "md":
		fmt.Fprint(x.stdout, c.Markdown())
	case "json":
		out, _ := json.MarshalIndent(c, "", "  ")
		fmt.Fprintf(x.stdout, "%s\n", out)
	default:
		return x.fail(exitUsage, fmt.Errorf("--format %q: want md or json", x.cfg.Format))
	}
	return exitOK
}

func (x *experimenter) list(ctx context.Context) int {
	list, err := x.w.lab.List(ctx)
	if err != nil {
		return x.fail(exitFailed, err)
	}
	for _, e := range list {
		fmt.Fprintf(x.stdout, "%s  %-9s  %s  %s (%s)\n", e.ID, e.Status, e.CreatedAt.Local().Format("2006-01-02 15:04"), e.Name, strings.Join(e.Conditions, ", "))
	}
	return exitOK
}

func codeOf(err error) int {
	if errors.Is(err, flow.ErrNotFound) {
		return exitUsage
	}
	return exitFailed
}

// progressBar shows an experiment's progress on stderr: a bar redrawn in
// place on a terminal, else a plain line every few seconds and at the end.
type progressBar struct {
	w        io.Writer
	terminal bool
	last     time.Time
}

func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	terminal := false
	if ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			terminal = true
		}
	}
	return &progressBar{w: w, terminal: terminal}
}

func (b *progressBar) show(p experiment.Progress, final bool) {
	if !final && time.Since(b.last) < map[bool]time.Duration{true: 100 * time.Millisecond, false: 2 * time.Second}[b.terminal] {
		return
	}
	b.last = time.Now()
	eta := "–"
	if p.ETA > 0 {
		eta = time.Duration(p.ETA * float64(time.Second)).Round(time.Second).String()
	}
	text := fmt.Sprintf("%d/%d outcomes  %.1f/s  ETA %s  errors %d", p.Done, p.Total, p.Rate, eta, p.Errors)
	if p.RateLimited > 0 {
		text += fmt.Sprintf("  429s waited out %d", p.RateLimited)
	}
	if !b.terminal {
		fmt.Fprintf(b.w, "progress %s\n", text)
		return
	}
	const width = 30
	filled := 0
	if p.Total > 0 {
		filled = width * p.Done / p.Total
	}
	fmt.Fprintf(b.w, "\r[%s%s] %s\x1b[K", strings.Repeat("#", filled), strings.Repeat(".", width-filled), text)
	if final {
		fmt.Fprintln(b.w)
	}
}
