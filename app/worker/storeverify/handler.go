package storeverify

import (
	"context"
	"errors"
	"fmt"

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

// Handler handles the jobs of worker.QueueStoreVerification (see the package comment)
// through the task lifecycle (worker.Flow). It is safe for concurrent use; every job may be
// delivered more than once.
type Handler struct {
	cfg  Config
	flow worker.Flow[domain.StoreVerification, started, port.VerifyResult]
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("storeverify.New: %w", err)
	}
	h := &Handler{cfg: cfg}
	h.flow = worker.Flow[domain.StoreVerification, started, port.VerifyResult]{Kind: Tasks(cfg.Deps, cfg.Verifications),
		Begin: h.begin, Call: h.verify, Record: h.record}
	return h, nil
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

// started is what the begin step hands to the external call.
type started struct {
	sealed   port.SealedCredentials
	platform string
	shopID   string
}

// begin runs under the verification's row lock: a verification of credentials replaced
// since it was requested is refused (CREDENTIALS_REPLACED: the newer verification decides);
// otherwise it reads the sealed credentials and the store's address.
func (h *Handler) begin(ctx context.Context, v *domain.StoreVerification) (started, error) {
	// The sealed value and its version come from one statement: they belong together.
	sealed, version, err := h.cfg.Stores.Credentials(ctx, v.StoreID)
	if err != nil {
		return started{}, err
	}
	if version != v.CredentialsVersion {
		return started{}, worker.Refuse(ErrCredentialsReplaced)
	}
	store, err := h.cfg.Stores.Get(ctx, v.StoreID)
	if err != nil {
		return started{}, err
	}
	return started{sealed: sealed, platform: store.Platform, shopID: store.ShopID}, nil
}

// verify opens the credentials and asks the platform. It runs outside any transaction.
func (h *Handler) verify(ctx context.Context, v domain.StoreVerification, s started, _ worker.Tx) (port.VerifyResult, error) {
	creds, err := worker.OpenCredentials(h.cfg.Cipher, v.WorkspaceID, v.StoreID, s.sealed)
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

// record stores the verdict on the verification and, unless the credentials were replaced
// meanwhile, on the store, publishing store.verified when they are valid (record step).
func (h *Handler) record(ctx context.Context, v *domain.StoreVerification, res port.VerifyResult) (any, error) {
	valid := res.Valid
	v.Valid = &valid
	_, err := h.cfg.Stores.Update(ctx, v.StoreID, func(s *domain.Store) error {
		if !s.RecordVerification(v.CredentialsVersion, res.Valid, res.ShopName, res.Reason, h.cfg.Deps.Now()) {
			return errStale
		}
		return nil
	})
	switch {
	case errors.Is(err, errStale):
	case err != nil:
		return nil, err
	case res.Valid:
		if err := h.cfg.Deps.Events.Publish(ctx, domain.StoreCredentialsVerified{StoreID: v.StoreID, VerificationID: v.ID,
			OperationID: v.OperationID, CredentialsVersion: v.CredentialsVersion, ShopName: res.ShopName}); err != nil {
			return nil, err
		}
	}
	msg := messageValid
	if !res.Valid {
		msg = messageInvalid
	}
	return map[string]any{"store_id": v.StoreID, "valid": res.Valid, "message": msg}, nil
}

// taskOf gives worker.Kind the task state a verification embeds.
func taskOf(v *domain.StoreVerification) *domain.Task { return &v.Task }
