package domain

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies an Error by what the caller can do about it. Transports map a Kind to their
// own vocabulary (HTTP status, job outcome); the Code is what clients branch on.
type Kind int

// The kinds of Error.
const (
	KindInternal             Kind = iota // a bug or an unexpected failure; details are not shown
	KindInvalid                          // the input is malformed or breaks a rule (400/422)
	KindUnauthenticated                  // no valid credentials (401)
	KindForbidden                        // authenticated but not allowed (403)
	KindNotFound                         // absent, or not visible to the caller (404)
	KindConflict                         // clashes with the current state (409)
	KindPreconditionFailed               // a precondition such as If-Match does not hold (412)
	KindPreconditionRequired             // a required precondition header is missing (428)
	KindTooLarge                         // the request body or object is too large (413)
	KindUnsupportedMedia                 // the content type is not accepted (415)
	KindRateLimited                      // too many requests; see RetryAfter (429)
	KindUnavailable                      // a transient failure; retry later (503)
)

// Error is a domain error with a stable, upper-snake Code (the public contract), a Kind and a
// Message safe to show to the client. It never carries secrets, SQL text or stack traces.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	// RetryAfter, when positive, tells the client when to try again.
	RetryAfter time.Duration
	// Fields names the offending input fields, when the error is about input.
	Fields map[string]string
	// cause is kept for logs and errors.Is/As; it is never shown to clients.
	cause error
}

// NewError returns an Error of the given kind and code.
func NewError(kind Kind, code, message string) *Error {
	return &Error{Kind: kind, Code: code, Message: message}
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.cause)
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error with the same Code, so that sentinel errors below can
// be matched with errors.Is even when a copy carries a different message.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// WithMessage returns a copy of e with another client-safe message.
func (e *Error) WithMessage(format string, args ...any) *Error {
	c := *e
	c.Message = fmt.Sprintf(format, args...)
	return &c
}

// WithCause returns a copy of e that wraps cause (for logs; never shown to clients).
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// WithRetryAfter returns a copy of e that tells the client when to retry.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// WithField returns a copy of e naming an offending input field and what is wrong with it.
func (e *Error) WithField(name, problem string) *Error {
	c := *e
	c.Fields = make(map[string]string, len(e.Fields)+1)
	for k, v := range e.Fields {
		c.Fields[k] = v
	}
	c.Fields[name] = problem
	return &c
}

// Sentinel errors shared by every feature. Feature-specific codes live beside their feature.
var (
	ErrInvalidInput = NewError(KindInvalid, "VALIDATION_FAILED", "the request is not valid")
	// ErrUnstorableInput: the database refused a value that validation let through (a NUL,
	// text that is not UTF-8, a value over a column's limit or CHECK). Validation should
	// have named the field; this code marks the safety net.
	ErrUnstorableInput = NewError(KindInvalid, "INVALID_INPUT", "the request holds a value that cannot be stored")
	ErrNotFound        = NewError(KindNotFound, "NOT_FOUND", "the resource does not exist")
	ErrConflict        = NewError(KindConflict, "CONFLICT", "the request conflicts with the current state")
	ErrUnauthenticated = NewError(KindUnauthenticated, "UNAUTHENTICATED", "valid credentials are required")
	ErrForbidden       = NewError(KindForbidden, "FORBIDDEN", "the operation is not allowed")
	ErrRetryable       = NewError(KindUnavailable, "TRANSIENT_CONFLICT", "the request collided with another; retry it")
	ErrUnavailable     = NewError(KindUnavailable, "SERVICE_UNAVAILABLE", "a dependency is unavailable; retry later")
	ErrRateLimited     = NewError(KindRateLimited, "RATE_LIMITED", "too many requests; retry later")
	// ErrServiceBusy: the process is at its bound of a costly resource (password hashing)
	// and none freed up in time; nothing was done, retry after RetryAfter.
	ErrServiceBusy = NewError(KindUnavailable, "SERVICE_BUSY", "the service is busy; retry later")
	// ErrInternal is a failure the client can do nothing about; its message hides the cause.
	ErrInternal = NewError(KindInternal, "INTERNAL", "internal error")
	// ErrMethodNotAllowed: the resource exists but not with this method (HTTP 405).
	ErrMethodNotAllowed = NewError(KindInvalid, "METHOD_NOT_ALLOWED", "the method is not allowed on this resource")
)

// Invalid returns a VALIDATION_FAILED error naming one offending field.
func Invalid(field, problem string) *Error {
	return ErrInvalidInput.WithField(field, problem)
}

// guardErrors are the errors of the declared guards (sql/060_task_guards.sql), by code.
var guardErrors = map[string]*Error{}

// GuardError declares e as the error of a guard: what a flow states must hold of an
// aggregate for any task touching it (a row of task_guards whose error_code is e's code).
// The engine refuses a task whose aggregate breaks the guard with e, at acceptance and when
// it runs. Call it once per error, at package initialization; it returns e.
func GuardError(e *Error) *Error {
	if _, dup := guardErrors[e.Code]; dup {
		panic("domain.GuardError: " + e.Code + " declared twice")
	}
	guardErrors[e.Code] = e
	return e
}

// GuardErrorOf returns the guard error of code (GuardError).
func GuardErrorOf(code string) (*Error, bool) {
	e, ok := guardErrors[code]
	return e, ok
}

// GuardErrors lists the guards' errors, by code.
func GuardErrors() map[string]*Error {
	out := make(map[string]*Error, len(guardErrors))
	for c, e := range guardErrors {
		out[c] = e
	}
	return out
}
