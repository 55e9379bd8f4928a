// Package docs holds the project's documentation; its test checks that the code's
// citations of the design resolve inside the repository.
package docs

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

var (
	// A citation of the design: "design.md §3.4" (a section number, maybe ending a sentence).
	citation = regexp.MustCompile(`design\.md,? §([0-9]+(?:\.[0-9]+)*)`)
	// A numbered heading of docs/design.md: "## 3. Components", "### 3.4 Controller".
	heading = regexp.MustCompile(`(?m)^#{2,4} ([0-9]+(?:\.[0-9]+)*)\.? `)
	// outside is how the code once cited the product brief, which is not in the repository
	// (spelled in two parts so that this file does not match itself).
	outside = "SPEC" + " §"
)

// TestDesignCitationsResolve: every file git tracks cites the design by a section of
// docs/design.md that exists, and none cites a design document outside the repository.
func TestDesignCitationsResolve(t *testing.T) {
	design, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(string(design), -1) {
		sections[m[1]] = true
	}
	if len(sections) < 5 {
		t.Fatalf("docs/design.md has %d numbered sections; the heading pattern no longer matches it", len(sections))
	}
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	cited := 0
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile("../" + name)
		if err != nil {
			continue // removed in the work tree
		}
		text := string(b)
		if strings.Contains(text, outside) {
			t.Errorf("%s cites %s…, a document outside the repository: cite docs/design.md", name, outside)
		}
		for _, m := range citation.FindAllStringSubmatch(text, -1) {
			cited++
			if !sections[m[1]] {
				t.Errorf("%s cites docs/design.md §%s, which has no such section", name, m[1])
			}
		}
	}
	if cited == 0 {
		t.Error("no file cites docs/design.md: the citation pattern no longer matches")
	}
}
