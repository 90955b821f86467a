package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// google/uuid's UUID goes to and comes from the server as the same uuid, alone, behind a
// pointer, in arrays and in both protocols; a NULL does not scan into a UUID.
func TestUUIDRoundTrips(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	a, b := uuid.New(), uuid.Must(uuid.NewV7())

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		var got uuid.UUID
		var text string
		require.NoError(t, db.App.QueryRow(ctx, `SELECT $1::uuid, $1::uuid::text`, mode, a).Scan(&got, &text))
		require.Equal(t, a, got, mode)
		require.Equal(t, a.String(), text, mode)

		var ptr, null *uuid.UUID
		require.NoError(t, db.App.QueryRow(ctx, `SELECT $1::uuid, NULL::uuid`, mode, &b).Scan(&ptr, &null))
		require.Equal(t, b, *ptr, mode)
		require.Nil(t, null, mode)

		var arr []uuid.UUID
		var in bool
		require.NoError(t, db.App.QueryRow(ctx, `SELECT $1::uuid[], $2::uuid = ANY($1::uuid[])`, mode, []uuid.UUID{a, b}, b).Scan(&arr, &in))
		require.Equal(t, []uuid.UUID{a, b}, arr, mode)
		require.True(t, in, mode)

	}
	got := a
	require.NoError(t, db.App.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&got))
	require.Equal(t, uuid.Nil, got)

	// As the server reads it: the same value its own functions build from the text form.
	var same bool
	require.NoError(t, db.App.QueryRow(ctx, `SELECT $1::uuid = $2::text::uuid`, a, a.String()).Scan(&same))
	require.True(t, same)
}

// Every connection of postgres.Connect plans uuid.UUID as 16 bytes of its own codec, not
// through driver.Valuer and sql.Scanner (a string per value), which is what RegisterTypes is
// for; values alone cannot tell, both ways give the same uuid.
func TestConnectEncodesUUIDsAsBinary(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	conn, err := db.App.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	m := conn.Conn().TypeMap()
	require.Equal(t, "postgres.encodeUUID", fmt.Sprintf("%T", m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.UUID{})))
	var u uuid.UUID
	require.Equal(t, "postgres.scanUUID", fmt.Sprintf("%T", m.PlanScan(pgtype.UUIDOID, pgtype.BinaryFormatCode, &u)))
}
