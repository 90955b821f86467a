package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/listingkit/listing"

// allowed lists, for each layer, the layers of this module its non-test code may import.
// Dependencies point inward: domain ← app ← infra ← cmd (and the assembly at the root).
var allowed = map[string][]string{
	"domain":       {},
	"sql":          {},
	"app":          {"domain", "app"},
	"infra":        {"domain", "app", "infra", "sql"},
	"infra/bullmq": {"infra/bullmq"}, // a leaf transport
	"internal":     {"*"},
	"cmd":          {"*"},
	"tests":        {"*"},
	"":             {"*"}, // the assembly (providers.go, wire_gen.go)
}

// forbidden lists, within a layer, imports that point the wrong way: a flow's worker reaches
// the HTTP-facing commands of another use case, the repositories reach the engine.
var forbidden = map[string][]string{
	"app/worker/":    {"app/commands"},
	"infra/postgres": {"app/worker"},
}

func layerOf(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	if rel == "infra/bullmq" || strings.HasPrefix(rel, "infra/bullmq/") {
		return "infra/bullmq"
	}
	first, _, _ := strings.Cut(rel, "/")
	return first
}

// TestDependencyDirection fails the build when a package imports against the direction.
func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports ","}}`, module+"/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, "|")
		layer := layerOf(pkg)
		rules, ok := allowed[layer]
		require.True(t, ok, "package %s is in no known layer (%q): add it to the rules", pkg, layer)
		checked++
		if len(rules) == 1 && rules[0] == "*" {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if layer == "domain" && strings.Contains(imp, ".") && !strings.HasPrefix(imp, module) {
				require.Equal(t, "github.com/google/uuid", imp, "domain imports only the standard library and uuid")
			}
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			rel, relImp := strings.TrimPrefix(pkg, module+"/"), strings.TrimPrefix(imp, module+"/")
			for from, tos := range forbidden {
				for _, to := range tos {
					if strings.HasPrefix(rel, from) && (relImp == to || strings.HasPrefix(relImp, to+"/")) {
						require.Fail(t, "import against the direction", "%s must not import %s", pkg, imp)
					}
				}
			}
			target := layerOf(imp)
			ok := false
			for _, r := range rules {
				if r == target || (r == "infra" && target == "infra/bullmq") {
					ok = true
				}
			}
			require.True(t, ok, "%s (layer %s) must not import %s (layer %s)", pkg, layer, imp, target)
		}
	}
	require.Greater(t, checked, 10)
}
