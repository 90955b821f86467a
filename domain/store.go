package domain

import (
	"strings"
	"time"

	"github.com/google/uuid"
)

// StoreStatus is the verification state of a store's credentials, or a state a flow gave
// stores (DeclareState).
type StoreStatus string

// Store statuses.
const (
	StorePendingVerification StoreStatus = "pending_verification"
	StoreVerified            StoreStatus = "verified"
	StoreInvalid             StoreStatus = "invalid"
)

// Store is a workspace's shop on a marketplace. Its credentials live sealed in the database;
// the domain only knows their version, which grows with every replacement so that a
// verification of old credentials can never mark new ones as verified.
type Store struct {
	ID                 uuid.UUID
	WorkspaceID        uuid.UUID
	Platform           string
	ShopID             string
	Name               string
	Status             StoreStatus
	CredentialsVersion int
	ShopName           string // as the platform reports it, after a verification
	StatusReason       string
	VerifiedAt         *time.Time
	// StateSince is when the store entered its status when that is a declared state
	// (DeclareState: its Since column); nil otherwise.
	StateSince *time.Time
	// RateLimit is the store's own budget of requests to its marketplace; the zero
	// RateLimit: its platform's (STORE_RATE_LIMITS).
	RateLimit RateLimit
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Store error codes.
var (
	ErrStoreNotFound = NewError(KindNotFound, "STORE_NOT_FOUND", "the store does not exist")
	// ErrStoreVerificationNotFound: the verification does not exist.
	ErrStoreVerificationNotFound = NewError(KindNotFound, "STORE_VERIFICATION_NOT_FOUND", "the verification does not exist")
	ErrStoreExists               = NewError(KindConflict, "STORE_ALREADY_EXISTS", "this workspace already has a store for this platform shop")
	ErrPlatformUnsupported       = NewError(KindInvalid, "PLATFORM_UNSUPPORTED", "the platform is not supported").WithField("platform", "unsupported")
	ErrStoreNotVerified          = NewError(KindConflict, "STORE_NOT_VERIFIED", "the store's credentials are not verified")
)

// NewStore validates and returns a store awaiting its first verification.
func NewStore(id, workspaceID uuid.UUID, platform, shopID, name string, platforms []string, now time.Time) (Store, error) {
	platform = strings.TrimSpace(platform)
	supported := false
	for _, p := range platforms {
		supported = supported || p == platform
	}
	if !supported {
		return Store{}, ErrPlatformUnsupported.WithMessage("platform must be one of: %s", strings.Join(platforms, ", "))
	}
	shopID = strings.TrimSpace(shopID)
	if shopID == "" {
		return Store{}, Invalid("shop_id", "required")
	}
	if err := checkLine("shop_id", shopID, MaxShopIDLength); err != nil {
		return Store{}, err
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return Store{}, Invalid("name", "required")
	}
	if err := checkLine("name", name, MaxStoreNameLength); err != nil {
		return Store{}, err
	}
	return Store{ID: id, WorkspaceID: workspaceID, Platform: platform, ShopID: shopID, Name: name,
		Status: StorePendingVerification, CredentialsVersion: 1, CreatedAt: now, UpdatedAt: now}, nil
}

// ReplaceCredentials records new credentials: the store awaits verification again, whatever
// state it was in (a declared one included: a disconnected store is reconnected by it).
func (s *Store) ReplaceCredentials(now time.Time) {
	s.CredentialsVersion++
	s.Status, s.StatusReason, s.UpdatedAt, s.StateSince = StorePendingVerification, "", now, nil
}

// Enter records the store in the declared state st (DeclareState) since now.
func (s *Store) Enter(st State, now time.Time) {
	s.Status, s.StatusReason, s.StateSince, s.UpdatedAt = StoreStatus(st.Status), "", &now, now
}

// In reports whether the store is in the declared state st.
func (s Store) In(st State) bool { return string(s.Status) == st.Status }

// Since returns when the store entered the declared state st: nil when it is not in it.
func (s Store) Since(st State) *time.Time {
	if !s.In(st) {
		return nil
	}
	return s.StateSince
}

// RecordVerification applies a verification result of credentialsVersion. It reports false
// when the credentials were replaced since (the result is stale and ignored).
func (s *Store) RecordVerification(credentialsVersion int, valid bool, shopName, reason string, now time.Time) bool {
	if credentialsVersion != s.CredentialsVersion {
		return false
	}
	if valid {
		s.Status, s.ShopName, s.StatusReason, s.VerifiedAt = StoreVerified, shopName, "", &now
	} else {
		s.Status, s.StatusReason = StoreInvalid, reason
	}
	s.UpdatedAt = now
	return true
}

// StoreVerification checks one version of a store's credentials against the platform.
type StoreVerification struct {
	Task
	StoreID            uuid.UUID
	CredentialsVersion int
	Valid              *bool
}

// NewStoreVerification returns a pending verification of the store's current credentials.
func NewStoreVerification(id, workspaceID, operationID uuid.UUID, s Store, now time.Time) StoreVerification {
	return StoreVerification{Task: NewTask(id, workspaceID, operationID, now), StoreID: s.ID, CredentialsVersion: s.CredentialsVersion}
}

// StoreVerificationRequested asks a worker to verify a store's credentials.
type StoreVerificationRequested struct {
	StoreID            uuid.UUID `json:"store_id"`
	VerificationID     uuid.UUID `json:"verification_id"`
	OperationID        uuid.UUID `json:"operation_id"`
	CredentialsVersion int       `json:"credentials_version"`
}

// EventType implements Event.
func (StoreVerificationRequested) EventType() string { return "store.verification_requested" }

// AggregateType implements Event.
func (StoreVerificationRequested) AggregateType() string { return "store" }

// AggregateID implements Event.
func (e StoreVerificationRequested) AggregateID() string { return e.StoreID.String() }

func init() { RegisterEvent(StoreVerificationRequested{}) }

// RequestEvent implements Requested.
func (v StoreVerification) RequestEvent() Event {
	return StoreVerificationRequested{StoreID: v.StoreID, VerificationID: v.ID, OperationID: v.OperationID, CredentialsVersion: v.CredentialsVersion}
}

// StoreCredentialsVerified (store.verified) is emitted when a verification found the store's current credentials valid
// (the store is then verified). An integration event.
type StoreCredentialsVerified struct {
	// StoreID is the store now verified.
	StoreID uuid.UUID `json:"store_id"`
	// VerificationID and OperationID are the verification task and its operation.
	VerificationID uuid.UUID `json:"verification_id"`
	OperationID    uuid.UUID `json:"operation_id"`
	// CredentialsVersion is the version of the credentials found valid.
	CredentialsVersion int `json:"credentials_version"`
	// ShopName is the shop's name as the platform reports it.
	ShopName string `json:"shop_name,omitempty"`
}

// EventType implements Event.
func (StoreCredentialsVerified) EventType() string { return "store.verified" }

// AggregateType implements Event.
func (StoreCredentialsVerified) AggregateType() string { return "store" }

// AggregateID implements Event.
func (e StoreCredentialsVerified) AggregateID() string { return e.StoreID.String() }

func init() {
	RegisterIntegrationEvent(StoreCredentialsVerified{}, "A store's credentials were verified valid by the platform: the store is verified. "+
		"Not published for a verification of credentials replaced meanwhile, nor for invalid credentials (the operation fails or "+
		"reports valid=false; see operation.status_changed).")
}
