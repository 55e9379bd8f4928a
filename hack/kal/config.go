package main

import (
	"fmt"
	"go/token"
	"os"
	"slices"

	kalconfig "sigs.k8s.io/kube-api-linter/pkg/config"
	"sigs.k8s.io/yaml"
)

// config is kal.yaml: kube-api-linter's own settings and our exceptions.
type config struct {
	// Linters and LintersConfig are what kube-api-linter's golangci-lint plugin reads.
	Linters       kalconfig.Linters       `json:"linters"`
	LintersConfig kalconfig.LintersConfig `json:"lintersConfig"`
	// Exceptions are the findings the design requires.
	Exceptions []exception `json:"exceptions"`
}

// exception excuses the findings of one linter on one type ("SandboxPoolStatus") or field
// ("SandboxPoolStatus.Phase") of the linted packages.
type exception struct {
	Linter string `json:"linter"`
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

func readConfig(path string) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	var c config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, e := range c.Exceptions {
		switch {
		case e.Linter == "" || e.Field == "":
			return nil, fmt.Errorf("%s: exceptions[%d]: linter and field are required", path, i)
		case e.Reason == "":
			return nil, fmt.Errorf("%s: exceptions[%d] (%s on %s): every exception says why", path, i, e.Linter, e.Field)
		case !slices.Contains(c.Linters.Enable, e.Linter):
			return nil, fmt.Errorf("%s: exceptions[%d]: linter %s is not enabled", path, i, e.Linter)
		}
	}
	return &c, nil
}

// finding is one diagnostic, with the type or field it is about.
type finding struct {
	Linter   string
	Position token.Position
	Field    string // "Type.Field", "Type", or "" outside a type declaration
	Message  string
}

func (f finding) String() string {
	return fmt.Sprintf("%s: %s: %s", f.Position, f.Linter, f.Message)
}

// result sorts the findings: those an exception covers, the rest, and the exceptions that
// cover nothing.
type result struct {
	findings, excepted []finding
	stale              []exception
}

func (c *config) apply(found []finding) result {
	var r result
	used := make([]bool, len(c.Exceptions))
	for _, f := range found {
		i := slices.IndexFunc(c.Exceptions, func(e exception) bool { return e.Linter == f.Linter && e.Field == f.Field })
		if i < 0 {
			r.findings = append(r.findings, f)
			continue
		}
		used[i] = true
		r.excepted = append(r.excepted, f)
	}
	for i, e := range c.Exceptions {
		if !used[i] {
			r.stale = append(r.stale, e)
		}
	}
	return r
}
