package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

type syncJSON struct {
	ID          string            `json:"id"`
	StoreID     string            `json:"store_id"`
	Status      string            `json:"status"`
	PagesDone   int               `json:"pages_done"`
	ItemsSynced int               `json:"items_synced"`
	Error       *worker.ErrorJSON `json:"error"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

func syncBody(s domain.ProductSync) syncJSON {
	return syncJSON{ID: s.ID.String(), StoreID: s.StoreID.String(), Status: string(s.Status), PagesDone: s.PagesDone,
		ItemsSynced: s.ItemsSynced, Error: worker.TaskError(s.Task), CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}

// syncStoreCommand is listing.start_product_sync: the store's products imported.
func (s *Server) syncStoreCommand() Command {
	return Command{Type: "listing.start_product_sync", Params: storeParam,
		Run: Runs(s.app.Bus, s.app.Commands.SyncStoreProducts, func(_ context.Context, c Call, _ struct{}) (commands.SyncStoreProducts, error) {
			return commands.SyncStoreProducts{SyncID: domain.NewID(), WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID, StoreID: c.IDs["store_id"]}, nil
		}, startRender(http.StatusAccepted, "sync", func(v domain.ProductSync) any { return syncBody(v) }))}
}

func (s *Server) listSyncs(w http.ResponseWriter, r *http.Request) {
	getList[domain.ProductSync](s, w, r, s.app.Queries.Syncs, func(v domain.ProductSync) any { return syncBody(v) })
}

func (s *Server) getSync(w http.ResponseWriter, r *http.Request) {
	getOne[domain.ProductSync](s, w, r, "sync_id", domain.ErrProductSyncNotFound, s.app.Queries.Syncs, "sync",
		func(v domain.ProductSync) any { return syncBody(v) })
}

func (s *Server) listStoreSyncs(w http.ResponseWriter, r *http.Request) {
	listUnder(s, w, r, "store_id", domain.ErrStoreNotFound, s.app.Queries.StoreSyncs,
		func(v domain.ProductSync) any { return syncBody(v) })
}
