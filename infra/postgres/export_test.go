package postgres

import "github.com/listingkit/listing/domain"

// MaxLeaders is maxLeaders, for the tests of package postgres_test that hold every group
// transaction open.
const MaxLeaders = maxLeaders

// TaskTableColumns are the columns of every task table as its repository maps them (the
// lifecycle columns, then the flow's own), by table.
func TaskTableColumns() map[string][]string {
	return map[string][]string{
		"store_verifications":  NewStoreVerifications().t.columns,
		"media_processings":    NewMediaTasks().t.columns,
		"material_transfers":   NewMaterialTransfers().t.columns,
		"publications":         append(NewPublications().t.columns, NewPublications().t.maintained...),
		"product_syncs":        NewProductSyncs().t.columns,
		"ai_tasks":             NewAITasks().t.columns,
		"listing_updates":      NewListingUpdates().t.columns,
		"unpublishes":          unpublishes().columns,
		"store_disconnections": storeDisconnections().columns,
	}
}

// LifecycleColumns are the columns every task table has, as the repositories map them.
func LifecycleColumns() []string {
	var names []string
	for _, c := range taskColumns(nil, new(domain.Task)) {
		names = append(names, c.name)
	}
	return names
}
