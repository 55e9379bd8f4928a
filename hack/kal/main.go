// Command kube-api-linter runs kube-api-linter (sigs.k8s.io/kube-api-linter) in its
// standalone form on the API types: make lint runs it on ./schema/v1alpha1. Only
// commentstart for now — every field has a doc comment that starts with its JSON name —
// which the field docs generated from schema/*.cue keep (make generate).
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"
	"sigs.k8s.io/kube-api-linter/pkg/analysis/commentstart"
)

func main() { singlechecker.Main(commentstart.Analyzer) }
