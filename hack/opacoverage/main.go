// Command opacoverage reads the JSON report of `opa test --coverage --format=json` on
// standard input, lists the lines the tests do not cover, and fails when the coverage is
// below -floor (percent). bundles/check.sh runs it, so `make opa-check` needs no other
// interpreter than Go.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// report is the part of OPA's coverage report this reads.
type report struct {
	Coverage float64 `json:"coverage"`
	Files    map[string]struct {
		NotCovered []struct {
			Start struct {
				Row int `json:"row"`
			} `json:"start"`
			End struct {
				Row int `json:"row"`
			} `json:"end"`
		} `json:"not_covered"`
	} `json:"files"`
}

func main() {
	floor := flag.Float64("floor", 90, "the lowest coverage, in percent, that passes")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *floor); err != nil {
		fmt.Fprintln(os.Stderr, "opacoverage:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, floor float64) error {
	var r report
	if err := json.NewDecoder(in).Decode(&r); err != nil {
		return fmt.Errorf("reading the coverage report: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Files)) {
		f := r.Files[name]
		if len(f.NotCovered) == 0 {
			continue
		}
		var rows []string
		for _, nc := range f.NotCovered {
			rows = append(rows, fmt.Sprintf("%d-%d", nc.Start.Row, nc.End.Row))
		}
		fmt.Fprintf(out, "  not covered: %s: lines %s\n", name, strings.Join(rows, ", "))
	}
	if r.Coverage < floor {
		return fmt.Errorf("rego test coverage %.1f %% is below the floor of %g %%", r.Coverage, floor)
	}
	fmt.Fprintf(out, "coverage %.1f %% (floor %g %%)\n", r.Coverage, floor)
	return nil
}
