package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// operationsTable and operationColumns are the operations table as NewOperations maps it
// (task repositories read it too: port.LockingOperation).
const operationsTable = "operations"

var operationColumns = []string{"id", "workspace_id", "type", "status", "resource_type", "resource_id", "result",
	"error_code", "error_message", "version", "created_by", "created_at", "updated_at", "progress", "progress_at"}

func operationScan(o *domain.Operation) []any {
	return []any{&o.ID, &o.WorkspaceID, &o.Type, &o.Status, &o.ResourceType, &o.ResourceID, &o.Result,
		&o.ErrorCode, &o.ErrorMessage, &o.Version, &o.CreatedBy, &o.CreatedAt, &o.UpdatedAt, &o.Progress,
		(*nullTime)(&o.ProgressAt)}
}

// NewOperations returns the repository of operations.
func NewOperations() *Repository[domain.Operation] {
	return newRepository(table[domain.Operation]{
		name:    operationsTable,
		columns: operationColumns,
		scan:    operationScan,
		values: func(o *domain.Operation) []any {
			var result any
			if len(o.Result) > 0 {
				result = o.Result
			}
			var progressAt *time.Time
			if !o.ProgressAt.IsZero() {
				progressAt = &o.ProgressAt
			}
			return []any{o.ID, o.WorkspaceID, o.Type, o.Status, o.ResourceType, o.ResourceID, result,
				o.ErrorCode, o.ErrorMessage, o.Version, nullIfNil(o.CreatedBy), o.CreatedAt, o.UpdatedAt, o.Progress, progressAt}
		},
		key:      func(o *domain.Operation) (uuid.UUID, time.Time) { return o.ID, o.CreatedAt },
		notFound: domain.ErrOperationNotFound,
	})
}

// Stores implements port.Stores.
type Stores struct{ *Repository[domain.Store] }

var _ port.Stores = Stores{}

// NewStores returns the repository of stores. The columns of the states flows declared of
// stores (domain.DeclareState) follow the store's own: each holds Store.StateSince while
// the store is in its state, NULL otherwise.
func NewStores() Stores {
	states := domain.States("stores")
	columns := []string{"id", "workspace_id", "platform", "shop_id", "name", "status", "status_reason", "shop_name",
		"verified_at", "credentials_version", "created_at", "updated_at", "rate_per_second", "rate_burst"}
	for _, st := range states {
		columns = append(columns, st.Since)
	}
	return Stores{newRepository(table[domain.Store]{
		name:    "stores",
		columns: columns,
		scan: func(s *domain.Store) []any {
			out := []any{&s.ID, &s.WorkspaceID, &s.Platform, &s.ShopID, &s.Name, &s.Status, &s.StatusReason, &s.ShopName,
				&s.VerifiedAt, &s.CredentialsVersion, &s.CreatedAt, &s.UpdatedAt, &s.RateLimit.PerSecond, &s.RateLimit.Burst}
			for range states {
				out = append(out, stateSince{&s.StateSince})
			}
			return out
		},
		values: func(s *domain.Store) []any {
			// The sealed credentials are not part of the aggregate: SetCredentials writes them,
			// in the transaction that inserts or replaces them.
			out := []any{s.ID, s.WorkspaceID, s.Platform, s.ShopID, s.Name, s.Status, s.StatusReason, s.ShopName,
				s.VerifiedAt, s.CredentialsVersion, s.CreatedAt, s.UpdatedAt, s.RateLimit.PerSecond, s.RateLimit.Burst}
			for _, st := range states {
				out = append(out, s.Since(st))
			}
			return out
		},
		key:      func(s *domain.Store) (uuid.UUID, time.Time) { return s.ID, s.CreatedAt },
		notFound: domain.ErrStoreNotFound,
		conflict: domain.ErrStoreExists,
	})}
}

// stateSince scans a declared state's Since column into Store.StateSince: NULL (the store is
// in another state) leaves it as it is.
type stateSince struct{ to **time.Time }

// Scan implements sql.Scanner.
func (s stateSince) Scan(src any) error {
	switch v := src.(type) {
	case nil:
	case time.Time:
		*s.to = &v
	default:
		return fmt.Errorf("postgres: cannot scan %T into a time", src)
	}
	return nil
}

// Refusal implements port.Stores: task_guard_check (sql/086) of the store, for a task of
// no flow in particular naming it in every guarded column.
func (s Stores) Refusal(ctx context.Context, storeID uuid.UUID) error {
	tx, _, err := mustTx(ctx, "postgres.Stores.Refusal")
	if err != nil {
		return err
	}
	var code *string
	err = tx.QueryRow(ctx, `SELECT task_guard_check('', (SELECT jsonb_object_agg(task_column, $1::text)
		FROM task_guards WHERE aggregate_table = 'stores'))`, storeID).Scan(&code)
	switch {
	case err != nil:
		return fmt.Errorf("postgres.Stores.Refusal: %w", TranslateError(err))
	case code == nil:
		return nil
	}
	return guardRefusal{code: *code}.err()
}

// SetCredentials implements port.Stores.
func (s Stores) SetCredentials(ctx context.Context, storeID uuid.UUID, c port.SealedCredentials) error {
	tx, _, err := mustTx(ctx, "postgres.Stores.SetCredentials")
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE stores SET credentials_sealed = $2, credentials_key_id = $3 WHERE id = $1`, storeID, c.Ciphertext, c.KeyID)
	if err != nil {
		return fmt.Errorf("postgres.Stores.SetCredentials: %w", TranslateError(err))
	}
	if tag.RowsAffected() == 0 {
		return domain.ErrStoreNotFound
	}
	return nil
}

// Credentials implements port.Stores.
func (s Stores) Credentials(ctx context.Context, storeID uuid.UUID) (port.SealedCredentials, int, error) {
	tx, _, err := mustTx(ctx, "postgres.Stores.Credentials")
	if err != nil {
		return port.SealedCredentials{}, 0, err
	}
	var c port.SealedCredentials
	var version int
	err = tx.QueryRow(ctx, `SELECT credentials_sealed, credentials_key_id, credentials_version FROM stores WHERE id = $1`, storeID).
		Scan(&c.Ciphertext, &c.KeyID, &version)
	if err != nil {
		return c, 0, fmt.Errorf("postgres.Stores.Credentials: %w", notFoundAs(err, domain.ErrStoreNotFound))
	}
	return c, version, nil
}

// StoreVerifications implements port.StoreVerifications.
type StoreVerifications struct {
	*Repository[domain.StoreVerification]
}

var _ port.StoreVerifications = StoreVerifications{}

// NewStoreVerifications returns the repository of store verifications.
func NewStoreVerifications() StoreVerifications {
	t := taskTable("store_verifications", func(v *domain.StoreVerification) *domain.Task { return &v.Task },
		func(v *domain.StoreVerification) []column {
			return []column{col("store_id", &v.StoreID), col("credentials_version", &v.CredentialsVersion), col("valid", &v.Valid)}
		})
	t.notFound = domain.ErrStoreVerificationNotFound
	return StoreVerifications{newRepository(t)}
}

// ListOf implements port.StoreVerifications.
func (r StoreVerifications) ListOf(ctx context.Context, storeID uuid.UUID, page port.Page) ([]domain.StoreVerification, string, error) {
	return r.ListWhere(ctx, page, "store_id = $4", []any{storeID})
}

// NewMedia returns the repository of media.
func NewMedia() *Repository[domain.Media] {
	return newRepository(table[domain.Media]{
		name: "media",
		columns: []string{"id", "workspace_id", "filename", "content_type", "size", "status", "source", "sniffed_type",
			"width", "height", "variants", "reject_reason", "created_at", "updated_at"},
		scan: func(m *domain.Media) []any {
			return []any{&m.ID, &m.WorkspaceID, &m.Filename, &m.ContentType, &m.Size, &m.Status, &m.Source, &m.SniffedType,
				&m.Width, &m.Height, &m.Variants, &m.RejectReason, &m.CreatedAt, &m.UpdatedAt}
		},
		values: func(m *domain.Media) []any {
			variants := m.Variants
			if variants == nil {
				variants = []domain.MediaVariant{}
			}
			return []any{m.ID, m.WorkspaceID, m.Filename, m.ContentType, m.Size, m.Status, m.Source, m.SniffedType,
				m.Width, m.Height, variants, m.RejectReason, m.CreatedAt, m.UpdatedAt}
		},
		key:      func(m *domain.Media) (uuid.UUID, time.Time) { return m.ID, m.CreatedAt },
		notFound: domain.ErrMediaNotFound,
	})
}

// NewMediaTasks returns the repository of media processing tasks.
func NewMediaTasks() *Repository[domain.MediaTask] {
	t := taskTable("media_processings", func(t *domain.MediaTask) *domain.Task { return &t.Task },
		func(t *domain.MediaTask) []column { return []column{col("media_id", &t.MediaID)} })
	t.notFound, t.conflict = domain.ErrMediaProcessingNotFound, domain.ErrMediaAlreadyComplete
	return newRepository(t)
}

// NewMaterialTransfers returns the repository of material transfers.
func NewMaterialTransfers() *Repository[domain.MaterialTransfer] {
	t := taskTable("material_transfers", func(t *domain.MaterialTransfer) *domain.Task { return &t.Task },
		func(t *domain.MaterialTransfer) []column {
			return []column{col("source_url", &t.SourceURL), col("media_id", &t.MediaID), col("bytes", &t.Bytes), col("stored", &t.Stored)}
		})
	t.notFound = domain.ErrTransferNotFound
	return newRepository(t)
}

// Publications implements port.Publications.
type Publications struct {
	*Repository[domain.Publication]
}

var _ port.Publications = Publications{}

// NewPublications returns the repository of publications.
func NewPublications() Publications {
	t := taskTable("publications", func(p *domain.Publication) *domain.Task { return &p.Task },
		func(p *domain.Publication) []column {
			return []column{col("product_id", &p.ProductID), col("store_id", &p.StoreID),
				col("product_revision", &p.ProductRevision), col("external_product_id", &p.ExternalProductID),
				col("product_snapshot", &p.Snapshot), col("pushed_revision", &p.PushedRevision),
				col("sent_revision", &p.SentRevision), nullCol("pushing_update_id", &p.Push.UpdateID),
				col("pushing_until", &p.Push.Until), col("unpublished_at", &p.UnpublishedAt)}
		})
	t.notFound, t.conflict, t.once = domain.ErrPublicationNotFound, domain.ErrProductAlreadyPublished, []string{"product_snapshot"}
	t.maintained = []string{"unpublish_id"} // the pending unpublish's mark (sql/070), its guard's to read
	return Publications{newRepository(t)}
}

// ListOfProduct implements port.Publications.
func (r Publications) ListOfProduct(ctx context.Context, productID uuid.UUID, page port.Page) ([]domain.Publication, string, error) {
	return r.ListWhere(ctx, page, "product_id = $4", []any{productID})
}

// ListingUpdates implements port.ListingUpdates.
type ListingUpdates struct {
	*Repository[domain.ListingUpdate]
}

var _ port.ListingUpdates = ListingUpdates{}

// NewListingUpdates returns the repository of listing updates.
func NewListingUpdates() ListingUpdates {
	t := taskTable("listing_updates", func(u *domain.ListingUpdate) *domain.Task { return &u.Task },
		func(u *domain.ListingUpdate) []column {
			return []column{col("publication_id", &u.PublicationID), col("product_id", &u.ProductID), col("store_id", &u.StoreID),
				col("product_revision", &u.ProductRevision), col("product_snapshot", &u.Snapshot), col("outcome", &u.Outcome)}
		})
	t.notFound, t.once = domain.ErrListingUpdateNotFound, []string{"product_snapshot"}
	return ListingUpdates{newRepository(t)}
}

// TaskRepositories are the task repositories that are read by table (the API's derived task
// resources, port.TaskReader), by task table.
func TaskRepositories() map[string]any {
	return map[string]any{
		"listing_updates":      NewListingUpdates(),
		"unpublishes":          newRepository(unpublishes()),
		"store_disconnections": newRepository(storeDisconnections()),
	}
}

func unpublishes() table[domain.Unpublish] {
	t := taskTable("unpublishes", func(u *domain.Unpublish) *domain.Task { return &u.Task },
		func(u *domain.Unpublish) []column {
			return []column{col("publication_id", &u.PublicationID), col("store_id", &u.StoreID),
				col("external_product_id", &u.ExternalProductID)}
		})
	t.notFound, t.conflict = domain.ErrUnpublishNotFound, domain.ErrPublicationUnpublished
	return t
}

func storeDisconnections() table[domain.StoreDisconnection] {
	t := taskTable("store_disconnections", func(d *domain.StoreDisconnection) *domain.Task { return &d.Task },
		func(d *domain.StoreDisconnection) []column { return []column{col("store_id", &d.StoreID)} })
	t.notFound = domain.ErrStoreDisconnectionNotFound
	return t
}

// ListOf implements port.ListingUpdates.
func (r ListingUpdates) ListOf(ctx context.Context, publicationID uuid.UUID, page port.Page) ([]domain.ListingUpdate, string, error) {
	return r.ListWhere(ctx, page, "publication_id = $4", []any{publicationID})
}

// ProductSyncs implements port.ProductSyncs.
type ProductSyncs struct {
	*Repository[domain.ProductSync]
}

var _ port.ProductSyncs = ProductSyncs{}

// NewProductSyncs returns the repository of product syncs.
func NewProductSyncs() ProductSyncs {
	t := taskTable("product_syncs", func(s *domain.ProductSync) *domain.Task { return &s.Task },
		func(s *domain.ProductSync) []column {
			return []column{col("store_id", &s.StoreID), col("next_page_token", &s.NextPageToken),
				col("pages_done", &s.PagesDone), col("items_synced", &s.ItemsSynced)}
		})
	t.notFound, t.conflict = domain.ErrProductSyncNotFound, domain.ErrProductSyncAlreadyActive
	return ProductSyncs{newRepository(t)}
}

// ListOf implements port.ProductSyncs.
func (r ProductSyncs) ListOf(ctx context.Context, storeID uuid.UUID, page port.Page) ([]domain.ProductSync, string, error) {
	return r.ListWhere(ctx, page, "store_id = $4", []any{storeID})
}

// Active implements port.ProductSyncs.
func (r ProductSyncs) Active(ctx context.Context, storeID uuid.UUID) (domain.ProductSync, error) {
	items, _, err := r.ListWhere(ctx, port.Page{Limit: 1}, "store_id = $4 AND status IN ('pending', 'running')", []any{storeID})
	if err != nil {
		return domain.ProductSync{}, err
	}
	if len(items) == 0 {
		return domain.ProductSync{}, domain.ErrProductSyncNotFound
	}
	return items[0], nil
}

// UpsertPlatformProducts implements port.ProductSyncs.
func (r ProductSyncs) UpsertPlatformProducts(ctx context.Context, storeID, syncID uuid.UUID, items []port.PlatformProduct) error {
	tx, scope, err := mustTx(ctx, "postgres.ProductSyncs.UpsertPlatformProducts")
	if err != nil {
		return err
	}
	for _, p := range items {
		_, err := tx.Exec(ctx, `INSERT INTO platform_products (workspace_id, store_id, external_id, external_ref, title, price, currency, last_sync_id, synced_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
			ON CONFLICT (store_id, external_id) DO UPDATE SET external_ref = EXCLUDED.external_ref, title = EXCLUDED.title,
			  price = EXCLUDED.price, currency = EXCLUDED.currency, last_sync_id = EXCLUDED.last_sync_id, synced_at = now()`,
			scope.WorkspaceID, storeID, p.ID, p.ExternalRef, p.Title, p.Price, p.Currency, syncID)
		if err != nil {
			return fmt.Errorf("postgres.ProductSyncs.UpsertPlatformProducts: %w", TranslateError(err))
		}
	}
	return nil
}

// NewAITasks returns the repository of AI tasks.
func NewAITasks() *Repository[domain.AITask] {
	t := taskTable("ai_tasks", func(t *domain.AITask) *domain.Task { return &t.Task },
		func(t *domain.AITask) []column {
			return []column{col("kind", &t.Kind), col("product_id", &t.ProductID), col("prompt", &t.Prompt),
				nullCol("output", &t.Output), col("provider_request_id", &t.ProviderRequestID),
				col("product_snapshot", &t.Snapshot)}
		})
	t.notFound, t.once = domain.ErrAITaskNotFound, []string{"product_snapshot"}
	return newRepository(t)
}

// AILedger implements port.AILedger.
type AILedger struct{}

// Record implements port.AILedger.
func (AILedger) Record(ctx context.Context, task domain.AITask, usage port.Usage, model string) (bool, error) {
	tx, _, err := mustTx(ctx, "postgres.AILedger.Record")
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO ai_usage_ledger (ai_task_id, workspace_id, kind, model, prompt_tokens, completion_tokens, images)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (ai_task_id) DO NOTHING`,
		task.ID, task.WorkspaceID, task.Kind, model, usage.PromptTokens, usage.CompletionTokens, usage.Images)
	if err != nil {
		return false, fmt.Errorf("postgres.AILedger.Record: %w", TranslateError(err))
	}
	return tag.RowsAffected() == 1, nil
}

func notFoundAs(err error, nf *domain.Error) error {
	if err = TranslateError(err); errors.Is(err, domain.ErrNotFound) {
		return nf
	}
	return err
}

// nullIfNil maps uuid.Nil to SQL NULL.
func nullIfNil(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id
}

// nullTime scans a nullable timestamp into a time.Time, NULL as the zero time.
type nullTime time.Time

// Scan implements sql.Scanner.
func (t *nullTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = nullTime{}
	case time.Time:
		*t = nullTime(v)
	default:
		return fmt.Errorf("postgres: cannot scan %T into a time", src)
	}
	return nil
}

// nullTimeValue maps the zero time to SQL NULL.
func nullTimeValue(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nullText scans a nullable text into a string, NULL as "".
type nullText string

// Scan implements sql.Scanner.
func (t *nullText) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = ""
	case string:
		*t = nullText(v)
	default:
		return fmt.Errorf("postgres: cannot scan %T into a text", src)
	}
	return nil
}

// nullTextValue maps "" to SQL NULL.
func nullTextValue(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullIfEmpty maps an empty JSON document to SQL NULL.
func nullIfEmpty(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
