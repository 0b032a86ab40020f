package flow_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"superego/flow"
)

func TestLoadContextDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "no-secrets.md"), []byte("description: keep keys out\npriority: 7\ninclude: always\n---\nNever print API keys.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "style.md"), []byte("Write plainly.\n\n---\nA rule may contain a rule line.\n"), 0o644)
	items, err := flow.LoadContextDir(dir, "rule")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Name != "no-secrets" || items[0].Priority != 7 || items[0].Text != "Never print API keys.\n" || items[0].Description != "keep keys out" {
		t.Errorf("items: %+v", items)
	}
	if items[1].Text != "Write plainly.\n\n---\nA rule may contain a rule line.\n" {
		t.Errorf("a file without a header is all text: %q", items[1].Text)
	}
	if got := flow.RenderContext(items); !strings.HasPrefix(got, "[rule: no-secrets]\nNever print API keys.") {
		t.Errorf("rendered, highest priority first:\n%s", got)
	}
	os.WriteFile(filepath.Join(dir, "bad.md"), []byte("priority: high\n---\nx"), 0o644)
	if _, err := flow.LoadContextDir(dir, "rule"); err == nil || !strings.Contains(err.Error(), "bad.md") {
		t.Errorf("a bad header: %v", err)
	}
	if items, err := flow.LoadContextDir(filepath.Join(dir, "missing"), "rule"); err != nil || len(items) != 0 {
		t.Errorf("a missing folder: %v %v", items, err)
	}
}

func TestContextChanges(t *testing.T) {
	base := []flow.ContextItem{{Kind: "rule", Name: "a", Text: "A.", Include: "manual"}}
	change := func(items []flow.ContextItem, tool, args string) ([]flow.ContextItem, error) {
		next, _, err := flow.ContextChange(items, tool, json.RawMessage(args))
		return next, err
	}
	items, err := change(base, "supervised_include_rule", `{"name": "a"}`)
	if err != nil || !items[0].Active() || base[0].Active() {
		t.Fatalf("include: %v %+v; the base must not change", err, items)
	}
	items, _ = change(items, "supervised_update_rule", `{"name": "a", "enabled": false}`)
	if items[0].Active() {
		t.Error("a disabled rule is active")
	}
	for tool, args := range map[string]string{
		"supervised_create_rule":      `{"name": "a", "text": "again"}`,
		"supervised_delete_rule":      `{"name": "zzz"}`,
		"supervised_create_reference": `{"name": "r"}`,
		"supervised_create_rule#":     `{"name": "b", "text": "t", "include": "sometimes"}`,
		"supervised_get_rules":        `{"name": "a"}`,
	} {
		if _, err := change(items, strings.TrimSuffix(tool, "#"), args); err == nil {
			t.Errorf("%s %s: no error", tool, args)
		}
	}
	// Replay applies only what succeeded, in order.
	steps := []flow.Step{{ToolUsage: []flow.ToolUse{
		{ToolName: "supervised_include_rule", Input: json.RawMessage(`{"name": "a"}`)},
		{ToolName: "supervised_create_rule", Input: json.RawMessage(`{"name": "x", "text": "X."}`), Error: "refused"},
		{ToolName: "supervised_exclude_rule", Input: json.RawMessage(`{"name": "a"}`)},
	}}}
	if got := flow.InstanceContext(base, steps); len(got) != 1 || got[0].Active() {
		t.Errorf("replayed: %+v", got)
	}
}
