package flow_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"superego/flow"
)

func TestLoadContextDir(t *testing.T) {
	t.Parallel()
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
	os.WriteFile(filepath.Join(dir, "bad.md"), []byte("priority: high\n---\nx"), 0o644)
	if _, err := flow.LoadContextDir(dir, "rule"); err == nil || !strings.Contains(err.Error(), "bad.md") {
		t.Errorf("a bad header: %v", err)
	}
	if items, err := flow.LoadContextDir(filepath.Join(dir, "missing"), "rule"); err != nil || len(items) != 0 {
		t.Errorf("a missing folder: %v %v", items, err)
	}
}
