package main

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// stmtCounter is a pgx tracer (pgx.QueryTracer and pgx.BatchTracer) that counts what a
// pool sends: statements (a simple-protocol query of several statements, as a BEGIN with
// its scope, counts each), and round trips (one per query, one per batch, however many
// statements it carries). Round trips pgx makes without tracing them (a pool's liveness
// pings) are not counted.
type stmtCounter struct {
	stmts, trips atomic.Int64
}

var (
	_ pgx.QueryTracer = (*stmtCounter)(nil)
	_ pgx.BatchTracer = (*stmtCounter)(nil)
)

// TraceQueryStart implements pgx.QueryTracer.
func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	c.stmts.Add(int64(statementsIn(d.SQL)))
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (*stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	if d.Batch != nil {
		for _, q := range d.Batch.QueuedQueries {
			c.stmts.Add(int64(statementsIn(q.SQL)))
		}
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (*stmtCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (*stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// statementsIn counts the statements of sql by its semicolons (the service's SQL has none
// inside literals).
func statementsIn(sql string) int {
	return strings.Count(strings.TrimRight(strings.TrimSpace(sql), "; \n\t"), ";") + 1
}

// counts reads c (zeros for nil).
func (c *stmtCounter) counts() (stmts, trips int64) {
	if c == nil {
		return 0, 0
	}
	return c.stmts.Load(), c.trips.Load()
}
