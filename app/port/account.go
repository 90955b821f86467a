package port

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// PasswordHasher hashes and verifies passwords. Implementations are slow on purpose; they
// never log or return the password.
type PasswordHasher interface {
	Hash(password string) (string, error)
	// Verify reports whether password matches hash. A malformed hash is an error.
	Verify(password, hash string) (bool, error)
}

// AccessToken is a short-lived bearer token.
type AccessToken struct {
	Token     string
	ExpiresIn time.Duration
}

// TokenIssuer signs and checks access tokens.
type TokenIssuer interface {
	Issue(userID uuid.UUID) (AccessToken, error)
	// Verify returns the user of a valid, unexpired token, else domain.ErrUnauthenticated.
	Verify(token string) (uuid.UUID, error)
}

// Accounts stores users, workspaces and memberships. Every method runs in the transaction
// carried by ctx.
type Accounts interface {
	// CreateUser inserts u; domain.ErrEmailTaken when the email is in use.
	CreateUser(ctx context.Context, u domain.User) error
	// CreateWorkspace inserts ws with owner as its first member. The transaction's workspace
	// scope must be ws.ID.
	CreateWorkspace(ctx context.Context, ws domain.Workspace, owner uuid.UUID) error
	// UserByEmail returns the user with that (normalized) email, or domain.ErrNotFound. The
	// rest of the transaction acts for the user found; a transaction that acts for another
	// user already is refused.
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	// IsMember reports whether user belongs to the transaction's workspace.
	IsMember(ctx context.Context, workspaceID, user uuid.UUID) (bool, error)
	// Role returns user's role in the transaction's workspace (domain.RoleOwner,
	// domain.RoleMember), or "" when user is not a member.
	Role(ctx context.Context, workspaceID, user uuid.UUID) (string, error)
	// WorkspacesOf lists the workspaces user belongs to (needs the user scope only).
	WorkspacesOf(ctx context.Context, user uuid.UUID) ([]domain.Workspace, error)
}

// RefreshUse is the outcome of presenting a refresh token.
type RefreshUse int

// Outcomes of RefreshTokens.Use.
const (
	RefreshOK      RefreshUse = iota // first use of a live token: rotate
	RefreshReused                    // already used: the family must be revoked
	RefreshInvalid                   // unknown, expired or revoked
)

// RefreshTokens stores refresh-token families. Tokens are stored as SHA-256 hashes of
// 256-bit random values, never in plain text. Every method runs in the transaction of ctx.
type RefreshTokens interface {
	NewFamily(ctx context.Context, user uuid.UUID) (uuid.UUID, error)
	Insert(ctx context.Context, tokenHash []byte, family, user uuid.UUID, expiresAt time.Time) error
	// Use marks the token used atomically and tells whether this was its first use. Unless the
	// outcome is RefreshInvalid, the rest of the transaction acts for the token's user.
	Use(ctx context.Context, tokenHash []byte, now time.Time) (family, user uuid.UUID, outcome RefreshUse, err error)
	RevokeFamily(ctx context.Context, family uuid.UUID, reason string) error
}
