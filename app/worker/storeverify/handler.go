package storeverify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Error codes this handler records on a verification and its operation.
var (
	// ErrCredentialsReplaced: the store's credentials were replaced after the verification
	// was requested; the verification of the newer credentials decides.
	ErrCredentialsReplaced = domain.NewError(domain.KindConflict, "CREDENTIALS_REPLACED",
		"the store's credentials were replaced; the newer verification decides")
	// ErrCredentialsUnreadable is worker.ErrCredentialsUnreadable: the stored credentials
	// cannot be opened or parsed. Permanent until they are replaced.
	ErrCredentialsUnreadable = worker.ErrCredentialsUnreadable
)

// Config configures New. Every field is required.
type Config struct {
	// Deps gives the transactions (one per step), the operations, the outbox publisher,
	// the clock and the logger (Log may be nil: no logs).
	Deps worker.Deps
	// Verifications stores the store verifications.
	Verifications port.Repository[domain.StoreVerification]
	// Stores stores the stores and their sealed credentials.
	Stores port.Stores
	// Cipher opens the sealed credentials.
	Cipher port.CredentialCipher
	// Marketplace is the gateway that verifies the credentials.
	Marketplace port.Marketplace
}

// Validate reports the first missing field. It does not change c.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil || c.Deps.Now == nil:
		return errors.New("storeverify: Deps.Tx, Deps.Operations, Deps.Events and Deps.Now are required")
	case c.Verifications == nil:
		return errors.New("storeverify: Verifications is required")
	case c.Stores == nil:
		return errors.New("storeverify: Stores is required")
	case c.Cipher == nil:
		return errors.New("storeverify: Cipher is required")
	case c.Marketplace == nil:
		return errors.New("storeverify: Marketplace is required")
	}
	return nil
}

// Handler handles the jobs of worker.QueueStoreVerification (see the package comment). It
// is safe for concurrent use; every job may be delivered more than once.
type Handler struct {
	cfg Config
	log *slog.Logger
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("storeverify.New: %w", err)
	}
	log := cfg.Deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, log: log}, nil
}

// Outcomes, as logged.
const (
	outcomeVerified  = "verified"
	outcomeSkipped   = "skipped"
	outcomeReplaced  = "credentials_replaced"
	outcomeRecorded  = "already_recorded"
	outcomeRetry     = "retry"
	outcomeFailed    = "failed"
	outcomeUnhandled = "error"
)

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error {
	var ev domain.StoreVerificationRequested
	if err := job.Decode(&ev); err != nil {
		h.log.ErrorContext(ctx, "store verification: bad payload", slog.String("job_id", job.ID))
		return err
	}
	log := h.log.With(slog.String("job_id", job.ID), slog.String("workspace_id", job.WorkspaceID.String()),
		slog.String("verification_id", ev.VerificationID.String()), slog.String("store_id", ev.StoreID.String()),
		slog.Int("attempt", job.Attempt))

	outcome, err := h.run(ctx, job, ev)
	if err == nil {
		log.InfoContext(ctx, "store verification", slog.String("outcome", outcome))
		return nil
	}
	if !worker.GiveUp(job, err) {
		log.WarnContext(ctx, "store verification", slog.String("outcome", outcomeRetry), slog.String("error", err.Error()))
		return fmt.Errorf("storeverify.Handle: %w", err)
	}
	failure := worker.FailureOf(err)
	if ferr := h.fail(ctx, job, ev.VerificationID, ev.OperationID, failure); ferr != nil {
		log.ErrorContext(ctx, "store verification", slog.String("outcome", outcomeUnhandled),
			slog.String("error", err.Error()), slog.String("record_error", ferr.Error()))
		if !job.LastAttempt {
			// The failure is not recorded: let BullMQ retry the whole job.
			return fmt.Errorf("storeverify.Handle: record failure: %w", ferr)
		}
		return worker.Permanent(fmt.Errorf("storeverify.Handle: %w", errors.Join(err, ferr)))
	}
	log.WarnContext(ctx, "store verification", slog.String("outcome", outcomeFailed),
		slog.String("code", failure.Code), slog.String("error", err.Error()))
	return worker.Permanent(fmt.Errorf("storeverify.Handle: %w", err))
}

// started is what Step A hands to the external call.
type started struct {
	verification domain.StoreVerification
	sealed       port.SealedCredentials
	platform     string
	shopID       string
}

func (h *Handler) run(ctx context.Context, job worker.Job, ev domain.StoreVerificationRequested) (string, error) {
	s, replaced, err := h.start(ctx, job, ev)
	switch {
	case errors.Is(err, worker.ErrSkip):
		return outcomeSkipped, nil
	case err != nil:
		return "", err
	case replaced:
		return outcomeReplaced, nil
	}
	res, err := h.verify(ctx, job, s)
	if err != nil {
		return "", err
	}
	return h.record(ctx, job, s.verification.ID, res)
}

// start is Step A. It reports replaced when it finished the verification with
// CREDENTIALS_REPLACED.
func (h *Handler) start(ctx context.Context, job worker.Job, ev domain.StoreVerificationRequested) (started, bool, error) {
	d := h.cfg.Deps
	var s started
	replaced := false
	err := d.Step(ctx, job, func(ctx context.Context) error {
		v, err := h.cfg.Verifications.Update(ctx, ev.VerificationID, func(v *domain.StoreVerification) error {
			if v.Status.Terminal() {
				return worker.ErrSkip
			}
			// The sealed value and its version come from one statement: they belong together.
			sealed, version, err := h.cfg.Stores.Credentials(ctx, v.StoreID)
			if err != nil {
				return err
			}
			if version != v.CredentialsVersion {
				replaced = true
				return v.Fail(ErrCredentialsReplaced.Code, ErrCredentialsReplaced.Message, d.Now())
			}
			s.sealed = sealed
			return v.Start(d.Now())
		})
		if err != nil {
			return err
		}
		if replaced {
			return d.FailOperation(ctx, v.OperationID, ErrCredentialsReplaced.Code, ErrCredentialsReplaced.Message)
		}
		if err := d.StartOperation(ctx, v.OperationID); err != nil {
			return err
		}
		store, err := h.cfg.Stores.Get(ctx, v.StoreID)
		if err != nil {
			return err
		}
		s.verification, s.platform, s.shopID = v, store.Platform, store.ShopID
		return nil
	})
	if err != nil && !errors.Is(err, worker.ErrSkip) {
		err = fmt.Errorf("storeverify: step A: %w", err)
	}
	return s, replaced, err
}

// verify opens the credentials and asks the platform. It runs outside any transaction.
func (h *Handler) verify(ctx context.Context, job worker.Job, s started) (port.VerifyResult, error) {
	creds, err := worker.OpenCredentials(h.cfg.Cipher, job.WorkspaceID, s.verification.StoreID, s.sealed)
	if err != nil {
		return port.VerifyResult{}, err
	}
	res, err := h.cfg.Marketplace.VerifyStore(ctx, creds, s.platform, s.shopID)
	if err != nil {
		return port.VerifyResult{}, fmt.Errorf("storeverify: verify: %w", err)
	}
	return res, nil
}

// Fixed, client-safe messages of the operation result (the platform's reason stays out).
const (
	messageValid   = "the marketplace accepted the store's credentials"
	messageInvalid = "the marketplace rejected the store's credentials"
)

// errStale tells Stores.Update not to save a result of replaced credentials.
var errStale = errors.New("storeverify: stale verification result")

// record is Step B.
func (h *Handler) record(ctx context.Context, job worker.Job, id uuid.UUID, res port.VerifyResult) (string, error) {
	d := h.cfg.Deps
	err := d.Step(ctx, job, func(ctx context.Context) error {
		v, err := h.cfg.Verifications.Update(ctx, id, func(v *domain.StoreVerification) error {
			if v.Status.Terminal() {
				return worker.ErrSkip
			}
			valid := res.Valid
			v.Valid = &valid
			return v.Succeed(d.Now())
		})
		if err != nil {
			return err
		}
		_, err = h.cfg.Stores.Update(ctx, v.StoreID, func(s *domain.Store) error {
			if !s.RecordVerification(v.CredentialsVersion, res.Valid, res.ShopName, res.Reason, d.Now()) {
				return errStale
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStale) {
			return err
		}
		msg := messageValid
		if !res.Valid {
			msg = messageInvalid
		}
		return d.SucceedOperation(ctx, v.OperationID, map[string]any{
			"store_id": v.StoreID, "valid": res.Valid, "message": msg,
		})
	})
	switch {
	case errors.Is(err, worker.ErrSkip):
		return outcomeRecorded, nil
	case err != nil:
		return "", fmt.Errorf("storeverify: step B: %w", err)
	}
	return outcomeVerified, nil
}

// fail records a final failure on the verification and its operation. A verification
// already finished is left alone; when the verification is gone (deleted with its store),
// the operation named by the event fails (if it exists).
func (h *Handler) fail(ctx context.Context, job worker.Job, id, operationID uuid.UUID, f worker.Failure) error {
	d := h.cfg.Deps
	err := d.Step(ctx, job, func(ctx context.Context) error {
		_, err := worker.FailTask(ctx, d, h.cfg.Verifications, id, taskOf, f)
		if isNotFound(err) {
			// The task is gone (deleted with its store or product): finish its operation,
			// named by the event, so that the client does not wait forever.
			return d.FailOperation(ctx, operationID, f.Code, f.Message)
		}
		return err
	})
	if errors.Is(err, worker.ErrSkip) || isNotFound(err) {
		return nil
	}
	return err
}

func isNotFound(err error) bool {
	var de *domain.Error
	return errors.As(err, &de) && de.Kind == domain.KindNotFound
}

// taskOf gives worker.BeginTask and worker.FailTask the task state it embeds.
func taskOf(v *domain.StoreVerification) *domain.Task { return &v.Task }
