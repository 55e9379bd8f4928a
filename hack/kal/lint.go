package main

import (
	"cmp"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"slices"

	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"
	"sigs.k8s.io/kube-api-linter/pkg/analysis/registry"
)

// lint runs the enabled linters on the packages and returns their findings in file order.
func lint(cfg *config, patterns []string) ([]finding, error) {
	analyzers, err := registry.DefaultRegistry().InitializeLinters(cfg.Linters, cfg.LintersConfig)
	if err != nil {
		return nil, fmt.Errorf("configuring the linters: %w", err)
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.LoadAllSyntax}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %v: %w", patterns, err)
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		return nil, errors.New("the packages do not compile")
	}
	graph, err := checker.Analyze(analyzers, pkgs, nil)
	if err != nil {
		return nil, fmt.Errorf("analysing: %w", err)
	}
	var out []finding
	for _, act := range graph.Roots {
		if act.Err != nil {
			return nil, fmt.Errorf("%s on %s: %w", act.Analyzer.Name, act.Package.PkgPath, act.Err)
		}
		for _, d := range act.Diagnostics {
			out = append(out, finding{
				Linter:   act.Analyzer.Name,
				Position: act.Package.Fset.Position(d.Pos),
				Field:    declAt(act.Package, d.Pos),
				Message:  d.Message,
			})
		}
	}
	slices.SortStableFunc(out, func(a, b finding) int {
		return cmp.Or(cmp.Compare(a.Position.Filename, b.Position.Filename),
			cmp.Compare(a.Position.Line, b.Position.Line), cmp.Compare(a.Position.Column, b.Position.Column))
	})
	return out, nil
}

// declAt names the type declaration, and the field within it, that holds pos: "Type.Field",
// "Type", or "" when pos is in no type declaration. An embedded field is named by its type.
func declAt(pkg *packages.Package, pos token.Pos) string {
	for _, file := range pkg.Syntax {
		if pos < file.FileStart || pos > file.FileEnd {
			continue
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE || !contains(gen, pos) {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				st, isStruct := ts.Type.(*ast.StructType)
				if !contains(ts, pos) || !isStruct {
					if contains(ts, pos) || len(gen.Specs) == 1 {
						return ts.Name.Name
					}
					continue
				}
				for _, f := range st.Fields.List {
					if contains(f, pos) {
						return ts.Name.Name + "." + fieldName(f)
					}
				}
				return ts.Name.Name
			}
		}
	}
	return ""
}

// contains reports whether pos falls in n or in the doc comment before it.
func contains(n ast.Node, pos token.Pos) bool {
	start := n.Pos()
	switch n := n.(type) {
	case *ast.GenDecl:
		if n.Doc != nil {
			start = n.Doc.Pos()
		}
	case *ast.Field:
		if n.Doc != nil {
			start = n.Doc.Pos()
		}
	}
	return start <= pos && pos <= n.End()
}

func fieldName(f *ast.Field) string {
	if len(f.Names) > 0 {
		return f.Names[0].Name
	}
	t := f.Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch t := t.(type) {
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}
