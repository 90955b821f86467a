package domain

import "github.com/google/uuid"

// StoreDisconnection revokes a store's authorization at its marketplace, then records the
// store StoreDisconnected (app/worker/storedisconnect). While it is pending or running, the
// guard "store connected" (ErrStoreDisconnected) refuses every other task of the store.
type StoreDisconnection struct {
	Task
	StoreID uuid.UUID
}

// StoreDisconnected: the store's authorization was revoked and its credentials erased;
// replacing them reconnects it (ReplaceCredentials).
var StoreDisconnected = DeclareState(State{Aggregate: "stores", Status: "disconnected", Since: "disconnected_at"})

// OpStoreDisconnection is the operation type of a store disconnection.
const OpStoreDisconnection = "store.disconnection"

// Store disconnection error codes.
var (
	ErrStoreDisconnectionNotFound = NewError(KindNotFound, "STORE_DISCONNECTION_NOT_FOUND", "the store disconnection does not exist")
	// ErrStoreBusy: a task of the store is pending or running; disconnect it once they end.
	ErrStoreBusy = NewError(KindConflict, "STORE_BUSY", "a task of the store is still pending or running; retry once it ends")
	// ErrStoreDisconnected: the store is disconnected, or its disconnection was accepted; a
	// guard (domain.GuardError): every task of the store is refused it.
	ErrStoreDisconnected = GuardError(NewError(KindConflict, "STORE_DISCONNECTED",
		"the store is disconnected; replace its authorization to reconnect it"))
)

// StoreDisconnectionRequested asks a worker to disconnect a store.
type StoreDisconnectionRequested struct {
	DisconnectionID uuid.UUID `json:"disconnection_id"`
	OperationID     uuid.UUID `json:"operation_id"`
	StoreID         uuid.UUID `json:"store_id"`
}

// EventType implements Event.
func (StoreDisconnectionRequested) EventType() string { return "store.disconnection_requested" }

// AggregateType implements Event.
func (StoreDisconnectionRequested) AggregateType() string { return "store_disconnection" }

// AggregateID implements Event.
func (e StoreDisconnectionRequested) AggregateID() string { return e.DisconnectionID.String() }

// RequestEvent implements Requested.
func (d StoreDisconnection) RequestEvent() Event {
	return StoreDisconnectionRequested{DisconnectionID: d.ID, OperationID: d.OperationID, StoreID: d.StoreID}
}

// StoreDisconnectedEvent (store.disconnected) is emitted when a store was disconnected: its
// authorization revoked at the marketplace, its credentials erased. An integration event.
type StoreDisconnectedEvent struct {
	// StoreID is the store now disconnected.
	StoreID uuid.UUID `json:"store_id"`
	// DisconnectionID is the disconnection that did it.
	DisconnectionID uuid.UUID `json:"disconnection_id"`
	// OperationID is the disconnection's operation.
	OperationID uuid.UUID `json:"operation_id"`
	// Platform and ShopID name the marketplace shop.
	Platform string `json:"platform"`
	ShopID   string `json:"shop_id"`
}

// EventType implements Event.
func (StoreDisconnectedEvent) EventType() string { return "store.disconnected" }

// AggregateType implements Event.
func (StoreDisconnectedEvent) AggregateType() string { return "store" }

// AggregateID implements Event.
func (e StoreDisconnectedEvent) AggregateID() string { return e.StoreID.String() }

func init() {
	RegisterEvent(StoreDisconnectionRequested{})
	RegisterIntegrationEvent(StoreDisconnectedEvent{}, "when a store was disconnected: its authorization revoked at the marketplace and its credentials erased; replacing its authorization reconnects it")
}
