package postgres

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterTypes teaches a connection's type map the service's Go types: google/uuid's UUID
// travels as PostgreSQL's binary uuid (16 bytes), where pgx alone goes through its
// driver.Valuer and sql.Scanner, formatting and parsing a string for every value (a fifth of
// the client's CPU in the idempotency benchmark's profile). Connect does it on every
// connection it opens.
func RegisterTypes(m *pgtype.Map) {
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
	// Where the statement does not say (the simple protocol), these are the values' types.
	m.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}

// uuidCodec is pgx's uuid codec with binary plans for uuid.UUID of its own.
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return encodeUUID{}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return scanUUID{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type encodeUUID struct{}

func (encodeUUID) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(uuid.UUID)
	return append(buf, u[:]...), nil
}

type scanUUID struct{}

// Scan scans 16 bytes, or a NULL as uuid.Nil (as uuid.UUID's own Scan does).
func (scanUUID) Scan(src []byte, target any) error {
	u := target.(*uuid.UUID)
	switch {
	case src == nil:
		*u = uuid.Nil
	case len(src) == 16:
		copy(u[:], src)
	default:
		return fmt.Errorf("invalid length for uuid: %d", len(src))
	}
	return nil
}
