package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"superego/engine"
	"superego/flow"
)

// runFlow runs one flow in this process and prints its events as they
// arrive; the exit code says how the run ended.
func runFlow(ctx context.Context, cfg config, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "superego run: want FLOW and a message, got %d arguments\n\n%s", len(args), usage)
		return exitUsage
	}
	log := newLogger(cfg, stderr, slog.LevelWarn)
	w, err := wire(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "superego run:", err)
		return exitUsage
	}
	defer w.close()
	e := w.engine
	for _, r := range w.refused {
		if r.ID == args[0] {
			fmt.Fprintf(stderr, "superego run: flow %s is refused:\n  %s\n", r.ID, strings.Join(r.Errors, "\n  "))
			return exitUsage
		}
	}
	p := &printer{w: stdout, json: cfg.JSON}
	status := flow.StatusCancelled
	var stop func() bool
	err = e.Run(ctx, engine.Request{FlowID: args[0], Input: args[1]}, func(ev flow.Event) {
		p.print(ev)
		switch d := ev.Data.(type) {
		case flow.RunStart:
			stop = context.AfterFunc(ctx, func() { // Ctrl-C cancels the run; it still ends with done
				e.Cancel(context.Background(), d.InstanceID)
			})
		case flow.Done:
			status = d.Status
		}
	})
	if err != nil {
		fmt.Fprintln(stderr, "superego run:", err)
		return exitUsage
	}
	if stop != nil {
		stop()
	}
	return statusExit[status]
}

// printer writes events for a person at a terminal, or as JSON lines.
type printer struct {
	w        io.Writer
	json     bool
	streamed bool // the current step's response was printed as it streamed
}

func (p *printer) print(ev flow.Event) {
	if p.json {
		b, _ := json.Marshal(map[string]any{"id": ev.ID, "event": ev.Name, "data": ev.Data})
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	switch d := ev.Data.(type) {
	case flow.NodeStart:
		fmt.Fprintf(p.w, "%s\n", d.Node)
		p.streamed = false
	case flow.Partial:
		if !p.streamed {
			fmt.Fprint(p.w, "  ")
			p.streamed = true
		}
		fmt.Fprint(p.w, strings.ReplaceAll(d.Delta, "\n", "\n  "))
	case flow.ToolCall:
		fmt.Fprintf(p.w, "  tool %s %s\n", d.ToolName, d.Input)
	case flow.ToolResult:
		if d.Error != "" {
			fmt.Fprintf(p.w, "    error: %s\n", d.Error)
		} else {
			fmt.Fprintf(p.w, "    = %s\n", d.Output)
		}
	case *flow.Step:
		if d.Role == flow.RoleUser {
			fmt.Fprintf(p.w, "user: %s\n", d.Response)
			return
		}
		if p.streamed {
			fmt.Fprintln(p.w)
		} else if d.Response != "" {
			fmt.Fprintf(p.w, "  %s\n", strings.ReplaceAll(d.Response, "\n", "\n  "))
		}
		next := "end"
		if d.NextAgent != nil {
			next = *d.NextAgent
		}
		fallback := ""
		if d.Fallback != "" {
			fallback = " (fallback: " + d.Fallback + ")"
		}
		fmt.Fprintf(p.w, "  → %s%s, next: %s\n", d.Decision, fallback, next)
	case flow.ErrorData:
		fmt.Fprintf(p.w, "error %s: %s\n", d.Code, d.Message)
	case flow.Done:
		fmt.Fprintf(p.w, "%s: %s\n", d.Status, d.Response)
	}
}
