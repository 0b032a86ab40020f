package flow

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// A ContextItem is a rule or a reference: text an instance's inner agents
// are given while it is active. Every instance starts from a copy of its
// flow's items and changes only its own: a supervisor's changes are
// recorded in its steps' tool_usage, and package supervision replays them.
type ContextItem struct {
	Kind        string `json:"kind" validate:"oneof=rule reference"`
	Name        string `json:"name" validate:"required"`
	Text        string `json:"text" validate:"required"`
	Description string `json:"description,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	Enabled     *bool  `json:"enabled,omitempty"`                                                // default true
	Include     string `json:"include,omitempty" validate:"omitempty,oneof=always manual agent"` // default always
	Included    *bool  `json:"included,omitempty"`                                               // set by include/exclude
}

// Active reports whether the item goes into inner agents' prompts: it is
// enabled, and included, by its mode ("always") or by a supervisor.
func (c ContextItem) Active() bool {
	if c.Enabled != nil && !*c.Enabled {
		return false
	}
	if c.Included != nil {
		return *c.Included
	}
	return c.Include == "" || c.Include == "always"
}

// Supervision actions a superego node may be allowed.
const (
	ReadOnly      = "READ_ONLY"
	ModifyContext = "MODIFY_CONTEXT"
)

// Decisions of a supervisor.
const (
	Modify      = "MODIFY"       // its response replaces the message the next node sees
	HumanReview = "HUMAN_REVIEW" // the run waits for POST /flow/instances/{id}/review
)

// A person's review is a step of agent Reviewer deciding Approved or
// Rejected: of a supervisor's HUMAN_REVIEW, or of the changes a supervisor
// with review_changes proposed.
const (
	Reviewer = "human_review"
	Approved = "APPROVED"
	Rejected = "REJECTED"
)

// Supervises reports whether any node of the flow supervises.
func (d *Definition) Supervises() bool {
	for _, n := range d.Graph.Nodes {
		if len(n.AllowedActions) > 0 {
			return true
		}
	}
	return false
}

// contextHeader is how a context file's header begins.
var contextHeader = regexp.MustCompile(`^(description|priority|enabled|include):`)

// LoadContextDir reads dir/*.md as items of kind: each file is one item
// named by its file name, with an optional header of "key: value" lines
// (description, priority, enabled, include; the first line says there is
// one) before a line "---". A missing directory holds none.
func LoadContextDir(dir, kind string) ([]ContextItem, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	var items []ContextItem
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		item := ContextItem{Kind: kind, Name: strings.TrimSuffix(filepath.Base(p), ".md"), Text: string(b)}
		if head, text, ok := strings.Cut(string(b), "\n---\n"); ok && contextHeader.MatchString(head) {
			item.Text = text
			for _, line := range strings.Split(head, "\n") {
				key, value, _ := strings.Cut(line, ":")
				value = strings.TrimSpace(value)
				switch strings.TrimSpace(key) {
				case "description":
					item.Description = value
				case "priority":
					if item.Priority, err = strconv.Atoi(value); err != nil {
						return nil, fmt.Errorf("%s: priority %q is not a whole number", p, value)
					}
				case "enabled":
					on := value != "false"
					item.Enabled = &on
				case "include":
					if value != "always" && value != "manual" && value != "agent" {
						return nil, fmt.Errorf("%s: include %q: want always, manual or agent", p, value)
					}
					item.Include = value
				default:
					return nil, fmt.Errorf("%s: unknown header %q (description, priority, enabled, include)", p, key)
				}
			}
		}
		items = append(items, item)
	}
	return items, nil
}
