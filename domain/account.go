package domain

import (
	"fmt"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// User is an account. PasswordHash is an encoded argon2id hash, never the password.
type User struct {
	ID           uuid.UUID
	Email        string
	PasswordHash string
	CreatedAt    time.Time
}

// Workspace is a tenant: every piece of business data belongs to exactly one workspace.
type Workspace struct {
	ID        uuid.UUID
	Name      string
	CreatedAt time.Time
}

// Membership roles.
const (
	RoleOwner  = "owner"
	RoleMember = "member"
)

// Account error codes.
var (
	ErrEmailTaken          = NewError(KindConflict, "EMAIL_TAKEN", "an account with this email exists")
	ErrInvalidCredentials  = NewError(KindUnauthenticated, "INVALID_CREDENTIALS", "email or password is wrong")
	ErrRefreshTokenInvalid = NewError(KindUnauthenticated, "REFRESH_TOKEN_INVALID", "the refresh token is not valid")
	ErrRefreshTokenReused  = NewError(KindUnauthenticated, "REFRESH_TOKEN_REUSED",
		"the refresh token was already used; every session of its family is revoked")
)

// NormalizeEmail validates an email address and returns it trimmed and lowercased.
func NormalizeEmail(email string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(email))
	if e == "" {
		return "", Invalid("email", "required")
	}
	if err := checkLine("email", e, MaxEmailLength); err != nil {
		return "", err
	}
	addr, err := mail.ParseAddress(e)
	if err != nil || addr.Address != e || !strings.Contains(e[strings.LastIndex(e, "@"):], ".") {
		return "", Invalid("email", "not an email address")
	}
	return e, nil
}

// ValidatePassword checks a new password: MinPasswordLength to MaxPasswordLength characters,
// no control characters. The password itself is never echoed.
func ValidatePassword(pw string) error {
	if err := checkLine("password", pw, MaxPasswordLength); err != nil {
		return err
	}
	if utf8.RuneCountInString(pw) < MinPasswordLength {
		return Invalid("password", fmt.Sprintf("must have at least %d characters", MinPasswordLength))
	}
	return nil
}

// ValidateWorkspaceName checks a workspace name.
func ValidateWorkspaceName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", Invalid("workspace_name", "required")
	}
	if err := checkLine("workspace_name", name, MaxWorkspaceNameLength); err != nil {
		return "", err
	}
	return name, nil
}
