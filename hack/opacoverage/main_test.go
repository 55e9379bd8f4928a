package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	const below = `{"coverage": 87.5, "files": {"b.rego": {"not_covered": [{"start": {"row": 3}, "end": {"row": 4}}]}, "a.rego": {}}}`
	var out bytes.Buffer
	err := run(strings.NewReader(below), &out, 90)
	if err == nil || !strings.Contains(err.Error(), "87.5 % is below the floor of 90 %") {
		t.Errorf("below the floor: %v", err)
	}
	if !strings.Contains(out.String(), "not covered: b.rego: lines 3-4") {
		t.Errorf("uncovered lines not listed: %q", out.String())
	}
	out.Reset()
	if err := run(strings.NewReader(`{"coverage": 100}`), &out, 90); err != nil || !strings.Contains(out.String(), "coverage 100.0 %") {
		t.Errorf("full coverage: %v, %q", err, out.String())
	}
	if err := run(strings.NewReader(`not json`), &out, 90); err == nil {
		t.Error("a broken report passed")
	}
}
