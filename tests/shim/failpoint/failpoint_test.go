package failpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestEvaluateFollowsTheTerms(t *testing.T) {
	fp, err := Parse("1*off->2*error(injected)->1*delay(60000)")
	if err != nil {
		t.Fatal(err)
	}
	// A cancelled context makes a delay return at once, with the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var got []string
	for range 6 {
		switch err := fp.Evaluate(ctx); {
		case errors.Is(err, context.Canceled):
			got = append(got, "delay")
		case err != nil:
			if !strings.Contains(err.Error(), "injected") {
				t.Fatalf("error %v does not carry the message", err)
			}
			got = append(got, "error")
		default:
			got = append(got, "pass")
		}
	}
	if want := "pass error error delay pass pass"; strings.Join(got, " ") != want {
		t.Errorf("calls went %q, want %q", strings.Join(got, " "), want)
	}
}

func TestParseRejectsBadControls(t *testing.T) {
	for _, bad := range []string{"", "error(x)", "1*", "1*explode", "x*off", "1*error()", "1*error(x", "1*delay(soon)", "1*off(x)"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestFromAnnotations(t *testing.T) {
	fps, err := FromAnnotations(map[string]string{
		AnnotationPrefix + "Start":     "1*error(no)",
		"io.kubernetes.cri.sandbox-id": "x",
	})
	if err != nil || len(fps) != 1 || fps["Start"] == nil {
		t.Fatalf("FromAnnotations = %v, %v; want the Start failpoint only", fps, err)
	}
	if _, err := FromAnnotations(map[string]string{AnnotationPrefix + "Kill": "bogus"}); err == nil || !strings.Contains(err.Error(), AnnotationPrefix+"Kill") {
		t.Errorf("bad control: error %v does not name the annotation", err)
	}
}
