// Command kube-api-linter runs kube-api-linter's analyzers (sigs.k8s.io/kube-api-linter) on
// the API types: make lint runs it on ./schema/v1alpha1 with hack/kal/kal.yaml.
//
// kal.yaml holds what kube-api-linter's golangci-lint plugin reads (linters: enable and
// disable, lintersConfig) and, beside it, the exceptions: a finding of one linter on one
// type or field that the design this product implements requires, each with its reason.
// golangci-lint can only carry kube-api-linter as a custom build, so this small driver
// runs the analyzers itself (golang.org/x/tools/go/analysis/checker) and applies the
// exceptions. It fails on any other finding, on an exception without a reason, and on an
// exception that no longer matches a finding, so the list stays the list of what is
// excepted today.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	// The linters register themselves with kube-api-linter's default registry.
	_ "sigs.k8s.io/kube-api-linter/pkg/registration"
)

func main() {
	configPath := flag.String("config", "hack/kal/kal.yaml", "kube-api-linter configuration with the exceptions")
	verbose := flag.Bool("v", false, "also print the findings the exceptions cover")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-config kal.yaml] [-v] packages...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ok, err := run(*configPath, flag.Args(), *verbose, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-api-linter:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// run lints the packages and prints every finding not covered by an exception, and a
// summary line. ok is false when anything was printed but the summary.
func run(configPath string, patterns []string, verbose bool, out io.Writer) (ok bool, err error) {
	cfg, err := readConfig(configPath)
	if err != nil {
		return false, err
	}
	found, err := lint(cfg, patterns)
	if err != nil {
		return false, err
	}
	r := cfg.apply(found)
	for _, f := range r.findings {
		fmt.Fprintln(out, f)
	}
	if verbose {
		for _, f := range r.excepted {
			fmt.Fprintln(out, "excepted:", f)
		}
	}
	for _, e := range r.stale {
		fmt.Fprintf(out, "%s: exception %s on %s matches no finding: remove it\n", configPath, e.Linter, e.Field)
	}
	fmt.Fprintf(out, "kube-api-linter: %d linters, %d findings, %d excepted (%d exceptions in %s)\n",
		len(cfg.Linters.Enable), len(r.findings), len(r.excepted), len(cfg.Exceptions), configPath)
	return len(r.findings) == 0 && len(r.stale) == 0, nil
}
