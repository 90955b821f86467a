package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/listingkit/listing/domain"
)

// PostgreSQL error codes the service reacts to.
const (
	CodeUniqueViolation       = "23505"
	CodeForeignKeyViolation   = "23503"
	CodeCheckViolation        = "23514"
	CodeStringTooLong         = "22001" // string_data_right_truncation
	CodeNotInRepertoire       = "22021" // character_not_in_repertoire: NUL, invalid UTF-8
	CodeInvalidTextRepr       = "22P02" // invalid_text_representation: e.g. "x" as a uuid
	CodeUntranslatable        = "22P05" // untranslatable_character
	CodeSerializationFailure  = "40001"
	CodeDeadlockDetected      = "40P01"
	CodeInsufficientPrivilege = "42501"
	CodeLockNotAvailable      = "55P03"
	CodeQueryCanceled         = "57014"
	// CodeGuard is a declared guard's refusal (sql/060_task_guards.sql): its message is the
	// guard's error code (domain.GuardError).
	CodeGuard = "LKG01"
)

// TranslateError maps PostgreSQL and pgx errors to domain errors at the adapter boundary:
// no rows → domain.ErrNotFound; unique violation → domain.ErrConflict; serialization failure
// and deadlock → domain.ErrRetryable; a declared guard's refusal (LKG01) → its
// domain.GuardError; insufficient privilege (42501, which is also
// what an RLS WITH CHECK refusal raises) → domain.ErrForbidden; a value the database cannot
// store (22001, 22021, 22P02, 22P05, 23514) → domain.ErrUnstorableInput (400 INVALID_INPUT),
// the safety net behind the domain's validation. The original error stays reachable with
// errors.As for logs; the client-facing message never contains SQL text. Other errors are
// returned unchanged.
func TranslateError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrNotFound.WithCause(err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case CodeGuard:
		if g, ok := domain.GuardErrorOf(pgErr.Message); ok {
			return g.WithCause(err)
		}
	case CodeUniqueViolation:
		return domain.ErrConflict.WithCause(err)
	case CodeSerializationFailure, CodeDeadlockDetected, CodeLockNotAvailable:
		return domain.ErrRetryable.WithCause(err)
	case CodeInsufficientPrivilege:
		return domain.ErrForbidden.WithCause(err)
	case CodeStringTooLong, CodeNotInRepertoire, CodeInvalidTextRepr, CodeUntranslatable, CodeCheckViolation:
		return domain.ErrUnstorableInput.WithCause(err)
	}
	return err
}

// IsUniqueViolation reports whether err is a unique violation, optionally of the named constraint.
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != CodeUniqueViolation {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}
