package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Products implements port.Products.
type Products struct{}

var _ port.Products = Products{}

const productColumns = `id, workspace_id, title, description, price_text, currency, images, revision, created_at, updated_at`

func scanProduct(row pgx.Row) (domain.Product, error) {
	var p domain.Product
	var images []byte
	if err := row.Scan(&p.ID, &p.WorkspaceID, &p.Title, &p.Description, &p.Price, &p.Currency, &images,
		&p.Revision, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return p, err
	}
	if err := json.Unmarshal(images, &p.Images); err != nil {
		return p, fmt.Errorf("images: %w", err)
	}
	return p, nil
}

// Insert implements port.Products.
func (Products) Insert(ctx context.Context, p domain.Product) error {
	tx, _, err := mustTx(ctx, "postgres.Products.Insert")
	if err != nil {
		return err
	}
	images, err := json.Marshal(p.Images)
	if err != nil {
		return fmt.Errorf("postgres.Products.Insert: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO products (id, workspace_id, title, description, price, price_text, currency, images, revision, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5::numeric, $5, $6, $7, $8, $9, $10)`,
		p.ID, p.WorkspaceID, p.Title, p.Description, p.Price, p.Currency, images, p.Revision, p.CreatedAt, p.UpdatedAt)
	if err != nil {
		return fmt.Errorf("postgres.Products.Insert: %w", TranslateError(err))
	}
	return nil
}

// Get implements port.Products.
func (Products) Get(ctx context.Context, id uuid.UUID) (domain.Product, error) {
	tx, _, err := mustTx(ctx, "postgres.Products.Get")
	if err != nil {
		return domain.Product{}, err
	}
	p, err := scanProduct(tx.QueryRow(ctx, `SELECT `+productColumns+` FROM products WHERE id = $1`, id))
	if err != nil {
		return domain.Product{}, fmt.Errorf("postgres.Products.Get: %w", TranslateError(err))
	}
	return p, nil
}

// Update implements port.Products.
func (Products) Update(ctx context.Context, id uuid.UUID, fn func(*domain.Product) error) (domain.Product, error) {
	tx, _, err := mustTx(ctx, "postgres.Products.Update")
	if err != nil {
		return domain.Product{}, err
	}
	p, err := scanProduct(tx.QueryRow(ctx, `SELECT `+productColumns+` FROM products WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return domain.Product{}, fmt.Errorf("postgres.Products.Update: %w", TranslateError(err))
	}
	if err := fn(&p); err != nil {
		return domain.Product{}, err
	}
	images, err := json.Marshal(p.Images)
	if err != nil {
		return domain.Product{}, fmt.Errorf("postgres.Products.Update: %w", err)
	}
	_, err = tx.Exec(ctx, `UPDATE products SET title = $2, description = $3, price = $4::numeric, price_text = $4,
		currency = $5, images = $6, revision = $7, updated_at = $8 WHERE id = $1`,
		p.ID, p.Title, p.Description, p.Price, p.Currency, images, p.Revision, p.UpdatedAt)
	if err != nil {
		return domain.Product{}, fmt.Errorf("postgres.Products.Update: %w", TranslateError(err))
	}
	return p, nil
}

// List implements port.Products: newest first, keyset-paginated on (created_at, id).
func (Products) List(ctx context.Context, page port.Page) ([]domain.Product, string, error) {
	tx, _, err := mustTx(ctx, "postgres.Products.List")
	if err != nil {
		return nil, "", err
	}
	limit := ClampLimit(page.Limit)
	after, afterID, err := DecodeCursor(page.Cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := tx.Query(ctx, `SELECT `+productColumns+` FROM products
		WHERE ($1::timestamptz IS NULL OR (created_at, id) < ($1, $2))
		ORDER BY created_at DESC, id DESC LIMIT $3`, after, afterID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("postgres.Products.List: %w", TranslateError(err))
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Product, error) { return scanProduct(r) })
	if err != nil {
		return nil, "", fmt.Errorf("postgres.Products.List: %w", TranslateError(err))
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		last := items[len(items)-1]
		next = EncodeCursor(last.CreatedAt, last.ID)
	}
	return items, next, nil
}

// ClampLimit bounds a page size to 1..100 (default 20).
func ClampLimit(n int) int {
	switch {
	case n <= 0:
		return 20
	case n > 100:
		return 100
	}
	return n
}

// EncodeCursor makes an opaque keyset cursor.
func EncodeCursor(t time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(t.UTC().Format(time.RFC3339Nano) + "|" + id.String()))
}

// DecodeCursor reads a cursor made by EncodeCursor; "" means the first page (nil time).
func DecodeCursor(c string) (*time.Time, uuid.UUID, error) {
	if c == "" {
		return nil, uuid.Nil, nil
	}
	bad := domain.Invalid("cursor", "not a cursor returned by this API")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, uuid.Nil, bad
	}
	ts, idText, ok := strings.Cut(string(raw), "|")
	if !ok {
		return nil, uuid.Nil, bad
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, uuid.Nil, bad
	}
	id, err := uuid.Parse(idText)
	if err != nil {
		return nil, uuid.Nil, bad
	}
	return &t, id, nil
}
