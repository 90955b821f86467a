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

// taskColumns are the columns every domain task table starts with (see sql/005_flows.sql).
var taskColumns = []string{"id", "workspace_id", "operation_id", "status", "attempts", "reconciliations",
	"error_code", "error_message", "version", "created_at", "updated_at", "redeliveries", "reconciled_attempts",
	"first_dispatched_at", "held_result", "look_code", "look_message", "looked_at", "look_found", "call_deadline"}

func taskScan(t *domain.Task) []any {
	return []any{&t.ID, &t.WorkspaceID, &t.OperationID, &t.Status, &t.Attempts, &t.Reconciliations, &t.ErrorCode,
		&t.ErrorMessage, &t.Version, &t.CreatedAt, &t.UpdatedAt, &t.Redeliveries, &t.ReconciledAttempts,
		(*nullTime)(&t.FirstDispatchedAt), &t.HeldResult, (*nullText)(&t.Look.Code), (*nullText)(&t.Look.Message),
		(*nullTime)(&t.Look.LookedAt), (*nullText)(&t.Look.Found), (*nullTime)(&t.CallDeadline)}
}

func taskValues(t *domain.Task) []any {
	return []any{t.ID, t.WorkspaceID, t.OperationID, t.Status, t.Attempts, t.Reconciliations, t.ErrorCode,
		t.ErrorMessage, t.Version, t.CreatedAt, t.UpdatedAt, t.Redeliveries, t.ReconciledAttempts,
		nullTimeValue(t.FirstDispatchedAt), nullIfEmpty(t.HeldResult), nullTextValue(t.Look.Code),
		nullTextValue(t.Look.Message), nullTimeValue(t.Look.LookedAt), nullTextValue(t.Look.Found),
		nullTimeValue(t.CallDeadline)}
}

func taskKey(t *domain.Task) (uuid.UUID, time.Time) { return t.ID, t.CreatedAt }

func cols(extra ...string) []string { return append(append([]string(nil), taskColumns...), extra...) }

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

// NewStores returns the repository of stores.
func NewStores() Stores {
	return Stores{newRepository(table[domain.Store]{
		name: "stores",
		columns: []string{"id", "workspace_id", "platform", "shop_id", "name", "status", "status_reason", "shop_name",
			"verified_at", "credentials_version", "created_at", "updated_at", "rate_per_second", "rate_burst", "disconnected_at"},
		scan: func(s *domain.Store) []any {
			return []any{&s.ID, &s.WorkspaceID, &s.Platform, &s.ShopID, &s.Name, &s.Status, &s.StatusReason, &s.ShopName,
				&s.VerifiedAt, &s.CredentialsVersion, &s.CreatedAt, &s.UpdatedAt, &s.RateLimit.PerSecond, &s.RateLimit.Burst, &s.DisconnectedAt}
		},
		values: func(s *domain.Store) []any {
			// The sealed credentials are not part of the aggregate: SetCredentials writes them,
			// in the transaction that inserts or replaces them.
			return []any{s.ID, s.WorkspaceID, s.Platform, s.ShopID, s.Name, s.Status, s.StatusReason, s.ShopName,
				s.VerifiedAt, s.CredentialsVersion, s.CreatedAt, s.UpdatedAt, s.RateLimit.PerSecond, s.RateLimit.Burst, s.DisconnectedAt}
		},
		key:      func(s *domain.Store) (uuid.UUID, time.Time) { return s.ID, s.CreatedAt },
		notFound: domain.ErrStoreNotFound,
		conflict: domain.ErrStoreExists,
	})}
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
	return StoreVerifications{newRepository(table[domain.StoreVerification]{
		name:    "store_verifications",
		columns: cols("store_id", "credentials_version", "valid"),
		scan: func(v *domain.StoreVerification) []any {
			return append(taskScan(&v.Task), &v.StoreID, &v.CredentialsVersion, &v.Valid)
		},
		values: func(v *domain.StoreVerification) []any {
			return append(taskValues(&v.Task), v.StoreID, v.CredentialsVersion, v.Valid)
		},
		key:      func(v *domain.StoreVerification) (uuid.UUID, time.Time) { return taskKey(&v.Task) },
		notFound: domain.ErrStoreVerificationNotFound,
	})}
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
	return newRepository(table[domain.MediaTask]{
		name:     "media_processings",
		columns:  cols("media_id"),
		scan:     func(t *domain.MediaTask) []any { return append(taskScan(&t.Task), &t.MediaID) },
		values:   func(t *domain.MediaTask) []any { return append(taskValues(&t.Task), t.MediaID) },
		key:      func(t *domain.MediaTask) (uuid.UUID, time.Time) { return taskKey(&t.Task) },
		notFound: domain.ErrMediaProcessingNotFound,
		conflict: domain.ErrMediaAlreadyComplete,
	})
}

// NewMaterialTransfers returns the repository of material transfers.
func NewMaterialTransfers() *Repository[domain.MaterialTransfer] {
	return newRepository(table[domain.MaterialTransfer]{
		name:    "material_transfers",
		columns: cols("source_url", "media_id", "bytes", "stored"),
		scan: func(t *domain.MaterialTransfer) []any {
			return append(taskScan(&t.Task), &t.SourceURL, &t.MediaID, &t.Bytes, &t.Stored)
		},
		values: func(t *domain.MaterialTransfer) []any {
			return append(taskValues(&t.Task), t.SourceURL, t.MediaID, t.Bytes, t.Stored)
		},
		key:      func(t *domain.MaterialTransfer) (uuid.UUID, time.Time) { return taskKey(&t.Task) },
		notFound: domain.ErrTransferNotFound,
	})
}

// Publications implements port.Publications.
type Publications struct {
	*Repository[domain.Publication]
}

var _ port.Publications = Publications{}

// NewPublications returns the repository of publications.
func NewPublications() Publications {
	return Publications{newRepository(table[domain.Publication]{
		name: "publications",
		columns: cols("product_id", "store_id", "product_revision", "external_product_id", "product_snapshot",
			"pushed_revision", "sent_revision", "pushing_update_id", "pushing_until", "unpublished_at"),
		scan: func(p *domain.Publication) []any {
			return append(taskScan(&p.Task), &p.ProductID, &p.StoreID, &p.ProductRevision, &p.ExternalProductID, &p.Snapshot,
				&p.PushedRevision, &p.SentRevision, &p.Push.UpdateID, &p.Push.Until, &p.UnpublishedAt)
		},
		values: func(p *domain.Publication) []any {
			return append(taskValues(&p.Task), p.ProductID, p.StoreID, p.ProductRevision, p.ExternalProductID, p.Snapshot,
				p.PushedRevision, p.SentRevision, nullIfNil(p.Push.UpdateID), p.Push.Until, p.UnpublishedAt)
		},
		key:      func(p *domain.Publication) (uuid.UUID, time.Time) { return taskKey(&p.Task) },
		notFound: domain.ErrPublicationNotFound,
		conflict: domain.ErrProductAlreadyPublished,
		once:     []string{"product_snapshot"},
	})}
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
	return ListingUpdates{newRepository(table[domain.ListingUpdate]{
		name:    "listing_updates",
		columns: cols("publication_id", "product_id", "store_id", "product_revision", "product_snapshot", "outcome"),
		scan: func(u *domain.ListingUpdate) []any {
			return append(taskScan(&u.Task), &u.PublicationID, &u.ProductID, &u.StoreID, &u.ProductRevision, &u.Snapshot, &u.Outcome)
		},
		values: func(u *domain.ListingUpdate) []any {
			return append(taskValues(&u.Task), u.PublicationID, u.ProductID, u.StoreID, u.ProductRevision, u.Snapshot, u.Outcome)
		},
		key:      func(u *domain.ListingUpdate) (uuid.UUID, time.Time) { return taskKey(&u.Task) },
		notFound: domain.ErrListingUpdateNotFound,
		once:     []string{"product_snapshot"},
	})}
}

// TaskRepositories are the task repositories that are read by table (the API's derived task
// resources, port.TaskReader), by task table.
func TaskRepositories() map[string]any {
	return map[string]any{
		"listing_updates": NewListingUpdates(),
		"unpublishes": newRepository(table[domain.Unpublish]{
			name:    "unpublishes",
			columns: cols("publication_id", "store_id", "external_product_id"),
			scan: func(u *domain.Unpublish) []any {
				return append(taskScan(&u.Task), &u.PublicationID, &u.StoreID, &u.ExternalProductID)
			},
			values: func(u *domain.Unpublish) []any {
				return append(taskValues(&u.Task), u.PublicationID, u.StoreID, u.ExternalProductID)
			},
			key:      func(u *domain.Unpublish) (uuid.UUID, time.Time) { return taskKey(&u.Task) },
			notFound: domain.ErrUnpublishNotFound,
			conflict: domain.ErrPublicationUnpublished,
		}),
		"store_disconnections": newRepository(table[domain.StoreDisconnection]{
			name: "store_disconnections", columns: cols("store_id"), notFound: domain.ErrStoreDisconnectionNotFound,
			scan:   func(d *domain.StoreDisconnection) []any { return append(taskScan(&d.Task), &d.StoreID) },
			values: func(d *domain.StoreDisconnection) []any { return append(taskValues(&d.Task), d.StoreID) },
			key:    func(d *domain.StoreDisconnection) (uuid.UUID, time.Time) { return taskKey(&d.Task) },
		}),
	}
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
	return ProductSyncs{newRepository(table[domain.ProductSync]{
		name:    "product_syncs",
		columns: cols("store_id", "next_page_token", "pages_done", "items_synced"),
		scan: func(s *domain.ProductSync) []any {
			return append(taskScan(&s.Task), &s.StoreID, &s.NextPageToken, &s.PagesDone, &s.ItemsSynced)
		},
		values: func(s *domain.ProductSync) []any {
			return append(taskValues(&s.Task), s.StoreID, s.NextPageToken, s.PagesDone, s.ItemsSynced)
		},
		key:      func(s *domain.ProductSync) (uuid.UUID, time.Time) { return taskKey(&s.Task) },
		notFound: domain.ErrProductSyncNotFound,
		conflict: domain.ErrProductSyncAlreadyActive,
	})}
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
	return newRepository(table[domain.AITask]{
		name:    "ai_tasks",
		columns: cols("kind", "product_id", "prompt", "output", "provider_request_id", "product_snapshot"),
		scan: func(t *domain.AITask) []any {
			return append(taskScan(&t.Task), &t.Kind, &t.ProductID, &t.Prompt, &t.Output, &t.ProviderRequestID, &t.Snapshot)
		},
		values: func(t *domain.AITask) []any {
			var out any
			if len(t.Output) > 0 {
				out = t.Output
			}
			return append(taskValues(&t.Task), t.Kind, t.ProductID, t.Prompt, out, t.ProviderRequestID, t.Snapshot)
		},
		key:      func(t *domain.AITask) (uuid.UUID, time.Time) { return taskKey(&t.Task) },
		notFound: domain.ErrAITaskNotFound,
		once:     []string{"product_snapshot"},
	})
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
