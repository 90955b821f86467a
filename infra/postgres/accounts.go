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

// Accounts implements port.Accounts and port.RefreshTokens.
type Accounts struct{}

var (
	_ port.Accounts      = Accounts{}
	_ port.RefreshTokens = Accounts{}
)

// CreateUser implements port.Accounts.
func (Accounts) CreateUser(ctx context.Context, u domain.User) error {
	tx, _, err := mustTx(ctx, "postgres.CreateUser")
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO users (id, email, password_hash, created_at) VALUES ($1, $2, $3, $4)`,
		u.ID, u.Email, u.PasswordHash, u.CreatedAt)
	if IsUniqueViolation(err, "users_email_key") {
		return domain.ErrEmailTaken
	}
	if err != nil {
		return fmt.Errorf("postgres.CreateUser: %w", TranslateError(err))
	}
	return nil
}

// CreateWorkspace implements port.Accounts.
func (Accounts) CreateWorkspace(ctx context.Context, ws domain.Workspace, owner uuid.UUID) error {
	tx, _, err := mustTx(ctx, "postgres.CreateWorkspace")
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `
		WITH w AS (INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3) RETURNING id)
		INSERT INTO workspace_memberships (workspace_id, user_id, role, created_at)
		SELECT id, $4, 'owner', $3 FROM w`, ws.ID, ws.Name, ws.CreatedAt, owner)
	if err != nil {
		return fmt.Errorf("postgres.CreateWorkspace: %w", TranslateError(err))
	}
	return nil
}

// UserByEmail implements port.Accounts through auth_user_by_email, then scopes the rest of
// the transaction to the user found.
func (Accounts) UserByEmail(ctx context.Context, email string) (domain.User, error) {
	tx, _, err := mustTx(ctx, "postgres.UserByEmail")
	if err != nil {
		return domain.User{}, err
	}
	var u domain.User
	err = tx.QueryRow(ctx, `SELECT id, email, password_hash, created_at FROM auth_user_by_email($1)`, email).
		Scan(&u.ID, &u.Email, &u.PasswordHash, &u.CreatedAt)
	if err != nil {
		return domain.User{}, fmt.Errorf("postgres.UserByEmail: %w", TranslateError(err))
	}
	if err := actAs(ctx, "postgres.UserByEmail", u.ID); err != nil {
		return domain.User{}, err
	}
	return u, nil
}

// IsMember implements port.Accounts.
func (Accounts) IsMember(ctx context.Context, workspaceID, user uuid.UUID) (bool, error) {
	tx, _, err := mustTx(ctx, "postgres.IsMember")
	if err != nil {
		return false, err
	}
	var ok bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM workspace_memberships
		WHERE workspace_id = $1 AND user_id = $2 AND workspace_id = app_workspace_id())`, workspaceID, user).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("postgres.IsMember: %w", TranslateError(err))
	}
	return ok, nil
}

// Role implements port.Accounts.
func (Accounts) Role(ctx context.Context, workspaceID, user uuid.UUID) (string, error) {
	tx, _, err := mustTx(ctx, "postgres.Role")
	if err != nil {
		return "", err
	}
	var role string
	err = tx.QueryRow(ctx, `SELECT role FROM workspace_memberships
		WHERE workspace_id = $1 AND user_id = $2 AND workspace_id = app_workspace_id()`, workspaceID, user).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("postgres.Role: %w", TranslateError(err))
	}
	return role, nil
}

// WorkspacesOf implements port.Accounts. It needs only the user scope: a user may read their
// own memberships and the workspaces they belong to.
func (Accounts) WorkspacesOf(ctx context.Context, user uuid.UUID) ([]domain.Workspace, error) {
	tx, _, err := mustTx(ctx, "postgres.WorkspacesOf")
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT w.id, w.name, w.created_at FROM workspaces w
		JOIN workspace_memberships m ON m.workspace_id = w.id
		WHERE m.user_id = $1 ORDER BY m.created_at, w.id`, user)
	if err != nil {
		return nil, fmt.Errorf("postgres.WorkspacesOf: %w", TranslateError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Workspace, error) {
		var ws domain.Workspace
		return ws, r.Scan(&ws.ID, &ws.Name, &ws.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres.WorkspacesOf: %w", TranslateError(err))
	}
	return out, nil
}

// NewFamily implements port.RefreshTokens.
func (Accounts) NewFamily(ctx context.Context, user uuid.UUID) (uuid.UUID, error) {
	tx, _, err := mustTx(ctx, "postgres.NewFamily")
	if err != nil {
		return uuid.Nil, err
	}
	id := domain.NewID()
	if _, err := tx.Exec(ctx, `INSERT INTO refresh_token_families (id, user_id) VALUES ($1, $2)`, id, user); err != nil {
		return uuid.Nil, fmt.Errorf("postgres.NewFamily: %w", TranslateError(err))
	}
	return id, nil
}

// Insert implements port.RefreshTokens.
func (Accounts) Insert(ctx context.Context, tokenHash []byte, family, user uuid.UUID, expiresAt time.Time) error {
	tx, _, err := mustTx(ctx, "postgres.InsertRefreshToken")
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO refresh_tokens (token_hash, family_id, user_id, expires_at) VALUES ($1, $2, $3, $4)`,
		tokenHash, family, user, expiresAt); err != nil {
		return fmt.Errorf("postgres.InsertRefreshToken: %w", TranslateError(err))
	}
	return nil
}

// Use implements port.RefreshTokens through auth_use_refresh_token, then scopes the rest of
// the transaction to the token's user (unless the token is invalid).
func (Accounts) Use(ctx context.Context, tokenHash []byte, now time.Time) (uuid.UUID, uuid.UUID, port.RefreshUse, error) {
	tx, _, err := mustTx(ctx, "postgres.UseRefreshToken")
	if err != nil {
		return uuid.Nil, uuid.Nil, port.RefreshInvalid, err
	}
	var family, user uuid.UUID
	var first bool
	err = tx.QueryRow(ctx, `SELECT family_id, user_id, first_use FROM auth_use_refresh_token($1, $2)`, tokenHash, now).
		Scan(&family, &user, &first)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, uuid.Nil, port.RefreshInvalid, nil
	}
	if err != nil {
		return uuid.Nil, uuid.Nil, port.RefreshInvalid, fmt.Errorf("postgres.UseRefreshToken: %w", TranslateError(err))
	}
	if err := actAs(ctx, "postgres.UseRefreshToken", user); err != nil {
		return uuid.Nil, uuid.Nil, port.RefreshInvalid, err
	}
	if !first {
		return family, user, port.RefreshReused, nil
	}
	return family, user, port.RefreshOK, nil
}

// RevokeFamily implements port.RefreshTokens.
func (Accounts) RevokeFamily(ctx context.Context, family uuid.UUID, reason string) error {
	tx, _, err := mustTx(ctx, "postgres.RevokeFamily")
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE refresh_token_families SET revoked_at = coalesce(revoked_at, now()), revoked_reason = coalesce(revoked_reason, $2) WHERE id = $1`,
		family, reason); err != nil {
		return fmt.Errorf("postgres.RevokeFamily: %w", TranslateError(err))
	}
	return nil
}
