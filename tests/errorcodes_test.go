package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// strayCodes are literals of a code outside its declaration that are known and owned
// elsewhere, by file (relative to the module root) and code, each with why it is tolerated.
// The test fails when an entry no longer matches, so that the list only shrinks.
var strayCodes = map[string]string{}

// TestErrorCodesDeclaredOnce fails the build when a public error code is declared twice:
// every code (the code argument of a NewError call, or the value of a constant named
// Code…) must appear as a string literal exactly once in the module's non-test Go code,
// in its declaration; every other use goes through the declared error (err.Code). Tests may
// use literals.
func TestErrorCodesDeclaredOnce(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	fset := token.NewFileSet()
	codes := map[string]bool{}
	literals := map[string][]string{} // value → "file:line" of every code-like literal
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		collectCodes(f, codes)
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && looksLikeCode(v) {
					literals[v] = append(literals[v], rel+":"+strconv.Itoa(fset.Position(lit.Pos()).Line))
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(codes), 50, "the scan found the codes")

	used := map[string]bool{}
	var problems []string
	for code := range codes {
		var places []string
		for _, p := range literals[code] {
			file, _, _ := strings.Cut(p, ":")
			if key := file + " " + code; strayCodes[key] != "" {
				used[key] = true
				continue
			}
			places = append(places, p)
		}
		if len(places) > 1 {
			problems = append(problems, code+" at "+strings.Join(places, ", "))
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems, "each error code must be declared once (a domain, port or package error "+
		"variable) and used through it (err.Code), never as another literal")
	for key := range strayCodes {
		require.True(t, used[key], "strayCodes[%q] matches nothing any more: remove it", key)
	}
}

// collectCodes adds the codes f declares: the code argument of NewError(kind, "CODE", …)
// (domain.NewError or a local NewError) and the value of a string constant named Code….
func collectCodes(f *ast.File, codes map[string]bool) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			name := ""
			switch fn := n.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			if name != "NewError" || len(n.Args) < 2 {
				return true
			}
			if lit, ok := n.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					codes[v] = true
				}
			}
		case *ast.GenDecl:
			if n.Tok != token.CONST {
				return true
			}
			for _, spec := range n.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) || !strings.HasPrefix(id.Name, "Code") {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil && looksLikeCode(v) {
							codes[v] = true
						}
					}
				}
			}
		}
		return true
	})
}

// looksLikeCode reports whether s has the shape of a public error code: upper snake case.
func looksLikeCode(s string) bool {
	if len(s) < 2 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'A' && r <= 'Z':
		case (r >= '0' && r <= '9' || r == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}
