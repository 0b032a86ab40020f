package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A ContextItem is a rule or a reference: text an instance's inner agents
// are given while it is active. Every instance starts from a copy of its
// flow's items and changes only its own: a supervisor's changes are
// recorded in its steps' tool_usage, and the instance's context is the
// flow's items with those changes applied, in order.
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

// supervised reports whether any node of the flow supervises.
func (d *Definition) supervised() bool {
	for _, n := range d.Graph.Nodes {
		if len(n.AllowedActions) > 0 {
			return true
		}
	}
	return false
}

// ContextChange applies one context-changing supervision tool call to items
// and says what it did. It is the tool, and the replay of its record.
func ContextChange(items []ContextItem, tool string, input json.RawMessage) ([]ContextItem, string, error) {
	verb, kind, ok := strings.Cut(strings.TrimPrefix(tool, "supervised_"), "_")
	if !ok || (kind != "rule" && kind != "reference") {
		return items, "", fmt.Errorf("%s changes no context", tool)
	}
	var args ContextItem
	if err := json.Unmarshal(input, &args); err != nil {
		return items, "", fmt.Errorf("arguments: %w", err)
	}
	if args.Name == "" {
		return items, "", errors.New(`"name" is required`)
	}
	i := slices.IndexFunc(items, func(c ContextItem) bool { return c.Kind == kind && c.Name == args.Name })
	items = slices.Clone(items)
	if verb != "create" && i < 0 {
		return items, "", fmt.Errorf("no %s named %q", kind, args.Name)
	}
	switch verb {
	case "create":
		if i >= 0 {
			return items, "", fmt.Errorf("a %s named %q exists; update it instead", kind, args.Name)
		}
		if args.Text == "" {
			return items, "", errors.New(`"text" is required`)
		}
		if args.Include != "" && args.Include != "always" && args.Include != "manual" && args.Include != "agent" {
			return items, "", fmt.Errorf("include %q: want always, manual or agent", args.Include)
		}
		args.Kind, args.Included = kind, nil
		return append(items, args), fmt.Sprintf("created %s %q", kind, args.Name), nil
	case "update":
		c := &items[i]
		if args.Text != "" {
			c.Text = args.Text
		}
		if args.Description != "" {
			c.Description = args.Description
		}
		if args.Priority != 0 {
			c.Priority = args.Priority
		}
		if args.Enabled != nil {
			c.Enabled = args.Enabled
		}
		if args.Include != "" {
			c.Include = args.Include
		}
		return items, fmt.Sprintf("updated %s %q", kind, args.Name), nil
	case "delete":
		return slices.Delete(items, i, i+1), fmt.Sprintf("deleted %s %q", kind, args.Name), nil
	case "include", "exclude":
		in := verb == "include"
		items[i].Included = &in
		return items, fmt.Sprintf("%sd %s %q", verb, kind, args.Name), nil
	}
	return items, "", fmt.Errorf("%s changes no context", tool)
}

// InstanceContext is an instance's context after steps: base with every
// recorded change that succeeded applied in order.
func InstanceContext(base []ContextItem, steps []Step) []ContextItem {
	items := slices.Clone(base)
	for _, s := range steps {
		for _, u := range s.ToolUsage {
			if u.Error == "" && strings.HasPrefix(u.ToolName, "supervised_") {
				if next, _, err := ContextChange(items, u.ToolName, u.Input); err == nil {
					items = next
				}
			}
		}
	}
	return items
}

// RenderContext is the active items as an inner agent is given them,
// highest priority first.
func RenderContext(items []ContextItem) string {
	active := slices.DeleteFunc(slices.Clone(items), func(c ContextItem) bool { return !c.Active() })
	slices.SortStableFunc(active, func(a, b ContextItem) int { return b.Priority - a.Priority })
	var b strings.Builder
	for _, c := range active {
		fmt.Fprintf(&b, "[%s: %s]\n%s\n\n", c.Kind, c.Name, strings.TrimSpace(c.Text))
	}
	return strings.TrimSpace(b.String())
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
