package domain

import (
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

// Password length bounds, in characters.
const (
	MinPasswordLength = 10
	MaxPasswordLength = 256
)

// NormalizeEmail validates an email address and returns it trimmed and lowercased.
func NormalizeEmail(email string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(email))
	if e == "" {
		return "", Invalid("email", "required")
	}
	if len(e) > 254 {
		return "", Invalid("email", "too long")
	}
	addr, err := mail.ParseAddress(e)
	if err != nil || addr.Address != e || !strings.Contains(e[strings.LastIndex(e, "@"):], ".") {
		return "", Invalid("email", "not an email address")
	}
	return e, nil
}

// ValidatePassword checks a new password's length. The password itself is never echoed.
func ValidatePassword(pw string) error {
	n := utf8.RuneCountInString(pw)
	switch {
	case n < MinPasswordLength:
		return Invalid("password", "must have at least 10 characters")
	case n > MaxPasswordLength:
		return Invalid("password", "must have at most 256 characters")
	}
	return nil
}

// ValidateWorkspaceName checks a workspace name.
func ValidateWorkspaceName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", Invalid("workspace_name", "required")
	}
	if utf8.RuneCountInString(name) > 200 {
		return "", Invalid("workspace_name", "must have at most 200 characters")
	}
	return name, nil
}
