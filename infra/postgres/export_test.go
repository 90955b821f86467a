package postgres

import (
	"slices"

	"github.com/listingkit/listing/domain"
)

// MaxLeaders is maxLeaders, for the tests of package postgres_test that hold every group
// transaction open.
const MaxLeaders = maxLeaders

// TaskTableColumns are the columns of every task table as its repository maps them (the
// lifecycle columns, then the flow's own), by table: those read by table (TaskRepositories)
// found there.
func TaskTableColumns() map[string][]string {
	out := map[string][]string{
		"store_verifications": NewStoreVerifications().t.columns,
		"media_processings":   NewMediaTasks().t.columns,
		"material_transfers":  NewMaterialTransfers().t.columns,
		"publications":        append(NewPublications().t.columns, NewPublications().t.maintained...),
		"product_syncs":       NewProductSyncs().t.columns,
		"ai_tasks":            NewAITasks().t.columns,
	}
	for table, r := range TaskRepositories() {
		out[table] = r.(interface{ mappedColumns() []string }).mappedColumns()
	}
	return out
}

// mappedColumns are the columns r maps.
func (r *Repository[T]) mappedColumns() []string {
	return append(slices.Clone(r.t.columns), r.t.maintained...)
}

// LifecycleColumns are the columns every task table has, as the repositories map them.
func LifecycleColumns() []string {
	var names []string
	for _, c := range taskColumns(nil, new(domain.Task)) {
		names = append(names, c.name)
	}
	return names
}
