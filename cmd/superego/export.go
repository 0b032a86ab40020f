package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"superego/flow"
)

// exported is one line of `superego export`.
type exported struct {
	flow.Summary
	Steps any `json:"steps"` // []flow.Step, or []flow.Research with --include-hidden
}

// export writes every instance with its steps, one JSON object a line,
// oldest first, for analysis in any tool. An instance it cannot read (a
// row changed since it was written, say) is reported and skipped, and the
// rest are exported; the exit code then says some were skipped.
func export(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	// Export only reads: a database file that is not there is a mistake to
	// name, not one to create, empty, and export nothing from.
	if sqliteFile(cfg.DB) {
		if _, err := os.Stat(cfg.DB); err != nil {
			fmt.Fprintf(stderr, "superego export: --db %s: %v\n", cfg.DB, errors.Unwrap(err))
			return exitUsage
		}
	}
	store, closeStore, err := openStore(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "superego export:", err)
		return exitUsage
	}
	defer closeStore()
	list, err := store.List(ctx, flow.ListOptions{FlowID: cfg.ExportFlow})
	if err != nil {
		fmt.Fprintln(stderr, "superego export:", err)
		return exitFailed
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	tried, skipped := 0, 0
	for i := len(list) - 1; i >= 0; i-- {
		sum := list[i]
		if sum.CreatedAt.Before(cfg.ExportSince) {
			continue
		}
		tried++
		events, err := store.Events(ctx, sum.ID, 0)
		if err != nil {
			// Stores name the instance in their errors, and never put
			// a step's content in one.
			fmt.Fprintln(stderr, "superego export: skipped:", err)
			skipped++
			continue
		}
		steps := flow.Replay(events).Steps
		line := exported{Summary: sum, Steps: steps}
		if cfg.IncludeHidden {
			line.Steps = flow.ResearchSteps(steps)
		}
		if err := enc.Encode(line); err != nil {
			fmt.Fprintln(stderr, "superego export:", err)
			return exitFailed
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(stderr, "superego export:", err)
		return exitFailed
	}
	if skipped > 0 {
		fmt.Fprintf(stderr, "superego export: %d of %d instances skipped\n", skipped, tried)
		return exitFailed
	}
	return exitOK
}
