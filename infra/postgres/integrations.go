package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Integrations implements port.Integrations over integrations, users and
// workspace_memberships (sql/013_integrations.sql).
type Integrations struct {
	list *Repository[domain.Integration]
}

var _ port.Integrations = Integrations{}

// NewIntegrations returns the repository of integration principals.
func NewIntegrations() Integrations {
	return Integrations{list: newRepository(table[domain.Integration]{
		name:    "integrations",
		columns: []string{"id", "workspace_id", "user_id", "name", "created_by", "created_at", "revoked_at"},
		scan: func(i *domain.Integration) []any {
			return []any{&i.ID, &i.WorkspaceID, &i.UserID, &i.Name, &i.CreatedBy, &i.CreatedAt, &i.RevokedAt}
		},
		values: func(i *domain.Integration) []any {
			return []any{i.ID, i.WorkspaceID, i.UserID, i.Name, nullIfNil(i.CreatedBy), i.CreatedAt, i.RevokedAt}
		},
		key:      func(i *domain.Integration) (uuid.UUID, time.Time) { return i.ID, i.CreatedAt },
		notFound: domain.ErrIntegrationNotFound,
	})}
}

const integrationColumns = `id, workspace_id, user_id, name, created_by, created_at, revoked_at`

func scanIntegration(row pgx.Row, i *domain.Integration, extra ...any) error {
	return row.Scan(append([]any{&i.ID, &i.WorkspaceID, &i.UserID, &i.Name, &i.CreatedBy, &i.CreatedAt, &i.RevokedAt}, extra...)...)
}

// Create implements port.Integrations: the user, its membership (role member) and the
// integration, in the caller's transaction.
func (Integrations) Create(ctx context.Context, in domain.Integration, secret port.SealedSecret) error {
	tx, _, err := mustTx(ctx, "postgres.Integrations.Create")
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `
		WITH u AS (INSERT INTO users (id, email, password_hash, kind, created_at) VALUES ($2, NULL, NULL, 'integration', $6)),
		     m AS (INSERT INTO workspace_memberships (workspace_id, user_id, role, created_at) VALUES ($3, $2, 'member', $6))
		INSERT INTO integrations (id, workspace_id, user_id, name, secret_sealed, secret_key_id, created_by, created_at)
		VALUES ($1, $3, $2, $4, $7, $8, $5, $6)`,
		in.ID, in.UserID, in.WorkspaceID, in.Name, nullIfNil(in.CreatedBy), in.CreatedAt, secret.Ciphertext, secret.KeyID)
	if err != nil {
		return fmt.Errorf("postgres.Integrations.Create: %w", TranslateError(err))
	}
	return nil
}

// Get implements port.Integrations.
func (Integrations) Get(ctx context.Context, id uuid.UUID) (domain.Integration, error) {
	i, _, err := getIntegration(ctx, "postgres.Integrations.Get", id, false, "")
	return i, err
}

// List implements port.Integrations.
func (r Integrations) List(ctx context.Context, page port.Page) ([]domain.Integration, string, error) {
	return r.list.List(ctx, page)
}

// Secret implements port.Integrations.
func (Integrations) Secret(ctx context.Context, id uuid.UUID) (domain.Integration, port.SealedSecret, error) {
	return getIntegration(ctx, "postgres.Integrations.Secret", id, true, "")
}

// Revoke implements port.Integrations.
func (Integrations) Revoke(ctx context.Context, id uuid.UUID, at time.Time) (domain.Integration, error) {
	const op = "postgres.Integrations.Revoke"
	i, _, err := getIntegration(ctx, op, id, false, " FOR UPDATE")
	if err != nil {
		return i, err
	}
	tx, _, err := mustTx(ctx, op)
	if err != nil {
		return i, err
	}
	i.Revoke(at)
	if _, err := tx.Exec(ctx, `UPDATE integrations SET revoked_at = $2 WHERE id = $1`, i.ID, i.RevokedAt); err != nil {
		return domain.Integration{}, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	if _, err := tx.Exec(ctx, `DELETE FROM workspace_memberships WHERE workspace_id = $1 AND user_id = $2`, i.WorkspaceID, i.UserID); err != nil {
		return domain.Integration{}, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	return i, nil
}

func getIntegration(ctx context.Context, op string, id uuid.UUID, withSecret bool, lock string) (domain.Integration, port.SealedSecret, error) {
	var i domain.Integration
	var s port.SealedSecret
	tx, _, err := mustTx(ctx, op)
	if err != nil {
		return i, s, err
	}
	q := `SELECT ` + integrationColumns
	var extra []any
	if withSecret {
		q += `, secret_sealed, secret_key_id`
		extra = []any{&s.Ciphertext, &s.KeyID}
	}
	err = scanIntegration(tx.QueryRow(ctx, q+` FROM integrations WHERE id = $1`+lock, id), &i, extra...)
	if errors.Is(err, pgx.ErrNoRows) {
		return i, s, domain.ErrIntegrationNotFound
	}
	if err != nil {
		return i, s, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	return i, s, nil
}
