package httpapi

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/listingkit/listing/app/worker/flows"
)

// The operation types and resource types of the OpenAPI document's Operation schema are the
// registered flows'.
func TestOperationTypesAreTheFlows(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Operation struct {
					Properties struct {
						Type     struct{ Enum []string } `yaml:"type"`
						Resource struct {
							Properties struct {
								Type struct{ Enum []string } `yaml:"type"`
							} `yaml:"properties"`
						} `yaml:"resource"`
					} `yaml:"properties"`
				} `yaml:"Operation"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPIDocument(), &doc))
	op := doc.Components.Schemas.Operation.Properties

	var types, resources []string
	for _, f := range flows.All() {
		types = append(types, f.Operation)
		if !slices.Contains(resources, f.Request.AggregateType()) {
			resources = append(resources, f.Request.AggregateType())
		}
	}
	slices.Sort(types)
	slices.Sort(resources)
	require.Equal(t, types, sorted(op.Type.Enum), "openapi.yaml's Operation.type enum is not the flows' operation types")
	require.Equal(t, resources, sorted(op.Resource.Properties.Type.Enum), "openapi.yaml's Operation.resource.type enum is not the flows' aggregate types")
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
