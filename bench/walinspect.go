package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
)

// walInspector attributes WAL to the soak's own database with pg_walinspect (PostgreSQL 15:
// pg_get_wal_records_info(start, end) returns one row per record, with its resource manager,
// record type, total length (full-page images included) and its block references as text,
// "blkref #0: rel <tablespace>/<database>/<relfilenode> fork main blk <n>", from the first
// record at or after start). A record is the database's when one of its block references is
// in the database, or when its transaction wrote such a record (the commit records, which
// reference no block). What no database owns (checkpoints, running-transactions snapshots)
// and every other database's records are left out. Sizes are MAXALIGNed, as in the WAL.
//
// The records must still be in pg_wal when they are read: on a cluster whose other users drop
// databases (each DROP DATABASE forces a checkpoint) a segment can be recycled within seconds.
// A temporary physical replication slot, held by a connection of the inspector's own and
// advanced after every read, keeps the segments not yet read (and is dropped with the
// connection, whatever ends the soak).
type walInspector struct {
	db    *scratch
	slot  *pgx.Conn
	name  string
	dbOID uint32
	// outside accumulates the minutes outside the held transaction, for the breakdown
	// printed at the end.
	outside *walSample
}

func newWALInspector(ctx context.Context, db *scratch) (*walInspector, error) {
	if _, err := db.Owner.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		return nil, err
	}
	w := &walInspector{db: db, outside: newWALSample(), name: "soak_" + randomHex(6)}
	if err := db.Owner.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&w.dbOID); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, db.ownerURL)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true, true)`, w.name); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("a temporary replication slot to keep the WAL until it is read: %w", err)
	}
	w.slot = conn
	return w, nil
}

// close drops the slot (with its connection).
func (w *walInspector) close() {
	if w != nil && w.slot != nil {
		_ = w.slot.Close(context.Background())
	}
}

// checkpoints is the cluster's count of checkpoints so far (each one makes the next change of
// every page write a full-page image).
func checkpoints(ctx context.Context, db *scratch) int64 {
	var n int64
	_ = db.Owner.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).Scan(&n)
	return n
}

// walSample is the database's own WAL between two LSNs: total, by record type, by relation
// (relfilenode; 0 for records of its transactions that reference no block), full-page images.
type walSample struct {
	total, fpi int64
	byType     map[string]int64
	byRel      map[uint32]int64
}

func newWALSample() *walSample {
	return &walSample{byType: map[string]int64{}, byRel: map[uint32]int64{}}
}

func (s *walSample) merge(o *walSample) {
	s.total += o.total
	s.fpi += o.fpi
	for k, v := range o.byType {
		s.byType[k] += v
	}
	for k, v := range o.byRel {
		s.byRel[k] += v
	}
}

// read reads the records between two LSNs and returns the database's own. The records must
// still be in pg_wal: a shared cluster's other writers can make it recycle a segment within
// a minute, so the soak reads every few seconds.
func (w *walInspector) read(ctx context.Context, from, to string) (*walSample, error) {
	rows, err := w.db.Owner.Query(ctx, `
		WITH r AS (
		  SELECT xid::text::bigint AS x, resource_manager || '/' || split_part(record_type, '+', 1) AS kind,
		         (record_length + 7) / 8 * 8 AS len, fpi_length,
		         (regexp_match(block_ref, 'rel [0-9]+/' || $3::text || '/([0-9]+)'))[1] AS rel
		  FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
		), own_xids AS (
		  SELECT DISTINCT x FROM r WHERE rel IS NOT NULL AND x <> 0
		)
		SELECT kind, coalesce(rel, '0'), sum(len)::bigint, sum(fpi_length)::bigint
		FROM r
		WHERE rel IS NOT NULL OR (x <> 0 AND x IN (SELECT x FROM own_xids))
		GROUP BY 1, 2`, from, to, strconv.FormatUint(uint64(w.dbOID), 10))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	defer func() { _, _ = w.slot.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, w.name, to) }()
	out := newWALSample()
	for rows.Next() {
		var kind, rel string
		var n, fpi int64
		if err := rows.Scan(&kind, &rel, &n, &fpi); err != nil {
			return nil, err
		}
		out.total += n
		out.fpi += fpi
		out.byType[kind] += n
		node, _ := strconv.ParseUint(rel, 10, 32)
		out.byRel[uint32(node)] += n
	}
	return out, rows.Err()
}

// print writes where the bytes went outside the held transaction, per event: by resource
// manager and record type, and by relation (0: records of the database's transactions that
// reference no block, the commits).
func (w *walInspector) print(ctx context.Context, events int64) {
	if events <= 0 {
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Printf("soak: own WAL outside the held transaction, per event (full-page images: %.0f B/event)\n", float64(w.outside.fpi)/float64(events))
	type kv struct {
		k string
		v int64
	}
	var types []kv
	for k, v := range w.outside.byType {
		types = append(types, kv{k, v})
	}
	sort.Slice(types, func(i, j int) bool { return types[i].v > types[j].v })
	for _, t := range types {
		if float64(t.v)/float64(events) < 1 {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%.0f B\t\n", t.k, float64(t.v)/float64(events))
	}
	_ = tw.Flush() // the record types above the summary line below
	var rels []kv
	for node, v := range w.outside.byRel {
		name := "(no block: commits)"
		if node != 0 {
			name = fmt.Sprintf("filenode %d", node)
			var rel *string
			if err := w.db.Owner.QueryRow(ctx, `SELECT pg_filenode_relation(0, $1::oid)::text`, node).Scan(&rel); err == nil && rel != nil {
				name = *rel
			}
		}
		rels = append(rels, kv{name, v})
	}
	sort.Slice(rels, func(i, j int) bool { return rels[i].v > rels[j].v })
	// By owner: the outbox's relations (the live table, the log's partitions and their
	// indexes), the command's own row (operations: the soak's stand-in for the command that
	// emits the event), and what both share (commits, the foreign keys' locks on workspaces,
	// multixacts, catalogs).
	var outbox, command, shared int64
	for _, r := range rels {
		switch {
		case strings.HasPrefix(r.k, "outbox_"):
			outbox += r.v
		case strings.HasPrefix(r.k, "operations"):
			command += r.v
		default:
			shared += r.v
		}
	}
	per := func(v int64) float64 { return float64(v) / float64(events) }
	fmt.Printf("soak: own WAL per event outside the held transaction: outbox relations %.0f B, shared (commits, foreign-key locks, catalogs) %.0f B, "+
		"the command's operations row %.0f B; the outbox's share (outbox + shared) %.0f B, of which full-page images (all relations) at most %.0f B\n",
		per(outbox), per(shared), per(command), per(outbox+shared), per(w.outside.fpi))
	for _, r := range rels {
		if float64(r.v)/float64(events) < 1 {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%.0f B\t\n", r.k, float64(r.v)/float64(events))
	}
	_ = tw.Flush()
}

func flushLSN(ctx context.Context, db *scratch) string {
	var s string
	_ = db.Owner.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&s)
	return s
}
