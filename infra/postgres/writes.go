package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// BeforeCommitWrite is BeforeCommit for a statement that writes rows of table and reads no
// rows that another statement queued in the transaction writes: a single INSERT, UPDATE or
// DELETE of its own (no WITH clause, no semicolon, no dollar-quoted text) whose outcome does
// not depend on the statements queued before it (an UPDATE of one row by its key, an
// INSERT). Consecutive such statements of distinct tables, queued under the same RLS scope,
// are sent to the server as one statement (data-modifying WITH queries: each runs once and
// to completion, all on the same snapshot), which saves the server a statement each. Its
// error, when the server refuses it, is still passed through onErr: the one of the
// statement whose table the server's error names (see mergeWrites).
func BeforeCommitWrite(ctx context.Context, table string, onErr func(error) error, sql string, args ...any) error {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return ErrNoTx
	}
	if table == "" || !mergeable(sql) {
		table = ""
	}
	st.beforeCommit = append(st.beforeCommit, queued{sql: sql, args: args, onErr: onErr, table: table})
	return nil
}

// mergeable reports whether sql can be a member of a merged write: its parameters can be
// renumbered without parsing it (no dollar quotes, no statement separator).
func mergeable(sql string) bool {
	_, ok := renumbered(sql, 0)
	return ok
}

// RowsWrite is a statement that writes rows of one table, the same number of parameters a
// row: its text for n rows (SQL) numbers the parameters of each row after those of the row
// before, and a row's first parameter is its key (a comparable value, the row's id). Writes of one
// RowsWrite queued with BeforeCommitRows under one RLS scope, with nothing but other
// BeforeCommitWrite statements between them, are sent as one statement of all their rows
// (never one key twice in a statement: a row updated twice by one statement is updated
// once), itself merged with the writes of other tables (mergeWrites): the writes of a group
// transaction's steps of one workspace (their tasks, operations and outbox rows) cost the
// server one statement, not one per step.
type RowsWrite struct {
	table  string
	perRow int
	build  func(rows int) string
	// sqls caches the statement by its row count (up to maxCachedRows rows).
	sqls [maxCachedRows + 1]atomic.Pointer[string]
}

// maxCachedRows is the largest row count whose statement a RowsWrite keeps (a group holds
// at most maxGroup steps; a step's write rarely has more than a few rows).
const maxCachedRows = 4 * maxGroup

// NewRowsWrite returns the RowsWrite of table whose text for n rows build returns (the same
// text for the same n; no dollar quote, semicolon or comment, see BeforeCommitWrite).
func NewRowsWrite(table string, perRow int, build func(rows int) string) *RowsWrite {
	return &RowsWrite{table: table, perRow: perRow, build: build}
}

// SQL returns the statement writing rows rows.
func (w *RowsWrite) SQL(rows int) string {
	cached := rows <= maxCachedRows
	if cached {
		if sql := w.sqls[rows].Load(); sql != nil {
			return *sql
		}
	}
	sql := w.build(rows)
	if !mergeable(sql) {
		panic(fmt.Sprintf("postgres.RowsWrite: the statement of %s cannot be merged: %s", w.table, sql))
	}
	if cached {
		w.sqls[rows].Store(&sql)
	}
	return sql
}

// BeforeCommitRows is BeforeCommitWrite for rows of w, args holding the parameters of one
// row or more, row after row.
func BeforeCommitRows(ctx context.Context, w *RowsWrite, onErr func(error) error, args ...any) error {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return ErrNoTx
	}
	if len(args) == 0 || len(args)%w.perRow != 0 {
		return fmt.Errorf("postgres.BeforeCommitRows: %d parameters for rows of %d", len(args), w.perRow)
	}
	q := queued{sql: w.SQL(len(args) / w.perRow), args: args, onErr: onErr, table: w.table, rows: w}
	if k := reflect.TypeOf(args[0]); k == nil || !k.Comparable() {
		q.rows = nil // keys that cannot be told apart: the write keeps a statement of its own
	}
	st.beforeCommit = append(st.beforeCommit, q)
	return nil
}

// mergeWrites returns qs with each run of consecutive BeforeCommitWrite statements sent as
// few statements as it can: the writes of one RowsWrite as one statement of their rows, and
// those of distinct tables as one statement, WITH w1 AS (first), w2 AS (second) … last, its
// parameters renumbered. A run never spans another statement (a scope change among them);
// two writes of one table share a statement only as rows of one RowsWrite with distinct
// keys, else the second starts the next statement. A statement of rows goes through its
// first write's onErr; a merged statement's error through the onErr of the member whose
// table the server's error names (its table field, or the quoted name in its message), and
// an error naming none of them is named after all of them.
func mergeWrites(qs []queued) []queued {
	merges := false
	for i := 1; i < len(qs); i++ {
		if qs[i].table != "" && qs[i-1].table != "" {
			merges = true
			break
		}
	}
	if !merges {
		return qs
	}
	out := make([]queued, 0, len(qs))
	for i := 0; i < len(qs); {
		j := i + 1
		if qs[i].table != "" {
			for j < len(qs) && qs[j].table != "" {
				j++
			}
		}
		if j-i == 1 {
			out = append(out, qs[i])
		} else {
			out = appendRun(out, qs[i:j])
		}
		i = j
	}
	return out
}

// appendRun appends to out the statements of run, consecutive BeforeCommitWrite statements
// (see mergeWrites).
func appendRun(out []queued, run []queued) []queued {
	var tables []*tableWrites // of the statement being built, in the order of their first write
	flush := func() {
		switch len(tables) {
		case 0:
		case 1:
			out = append(out, tables[0].statement())
		default:
			members := make([]queued, len(tables))
			for k, t := range tables {
				members[k] = t.statement()
			}
			out = append(out, merge(members))
		}
		tables = tables[:0]
	}
	for _, q := range run {
		k := slices.IndexFunc(tables, func(t *tableWrites) bool { return t.writes[0].table == q.table })
		if k >= 0 && !tables[k].add(q) {
			flush()
			k = -1
		}
		if k < 0 {
			tables = append(tables, newTableWrites(q))
		}
	}
	flush()
	return out
}

// tableWrites are the writes of one table in a statement being built: one write, or the
// writes of one RowsWrite with distinct keys.
type tableWrites struct {
	writes []queued
	keys   []any // of the rows of writes, for a RowsWrite
}

func newTableWrites(q queued) *tableWrites {
	t := &tableWrites{writes: []queued{q}}
	if q.rows != nil {
		t.keys = q.rows.keysOf(q.args, nil)
	}
	return t
}

// add adds q when it can share the statement: rows of the same RowsWrite, none of whose keys
// is there already.
func (t *tableWrites) add(q queued) bool {
	w := t.writes[0].rows
	if w == nil || q.rows != w {
		return false
	}
	keys := w.keysOf(q.args, t.keys)
	for _, k := range keys[len(t.keys):] {
		if slices.Contains(t.keys, k) {
			return false
		}
	}
	t.keys = keys
	t.writes = append(t.writes, q)
	return true
}

// keysOf appends the keys of the rows of args (each row's first parameter) to keys.
func (w *RowsWrite) keysOf(args []any, keys []any) []any {
	for i := 0; i < len(args); i += w.perRow {
		keys = append(keys, args[i])
	}
	return keys
}

// statement returns the one statement of t's writes.
func (t *tableWrites) statement() queued {
	if len(t.writes) == 1 {
		return t.writes[0]
	}
	first := t.writes[0]
	n := 0
	for _, q := range t.writes {
		n += len(q.args)
	}
	args := make([]any, 0, n)
	for _, q := range t.writes {
		args = append(args, q.args...)
	}
	return queued{sql: first.rows.SQL(n / first.rows.perRow), args: args, onErr: first.onErr, table: first.table, rows: first.rows}
}

// merge is the one statement of members (at least two).
func merge(members []queued) queued {
	n := 0
	for _, m := range members {
		n += len(m.args)
	}
	args := make([]any, 0, n)
	var b strings.Builder
	b.WriteString("WITH ")
	for i, m := range members {
		sql, _ := renumberedCached(m.sql, len(args))
		switch {
		case i == len(members)-1:
			b.WriteString(") ")
		case i > 0:
			b.WriteString("), ")
		}
		if i < len(members)-1 {
			b.WriteString("w")
			b.WriteString(strconv.Itoa(i + 1))
			b.WriteString(" AS (")
		}
		b.WriteString(sql)
		args = append(args, m.args...)
	}
	members = append([]queued(nil), members...)
	return queued{sql: b.String(), args: args, onErr: func(err error) error { return mergedError(members, err) }}
}

// mergedError names err, the error of a merged statement, after the member it belongs to.
func mergedError(members []queued, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		for _, m := range members {
			if (pe.TableName != "" && pe.TableName == m.table) || strings.Contains(pe.Message, `"`+m.table+`"`) {
				if m.onErr != nil {
					return m.onErr(err)
				}
				return err
			}
		}
	}
	tables := make([]string, len(members))
	for i, m := range members {
		tables[i] = m.table
	}
	return fmt.Errorf("postgres: one of the writes of %s with the COMMIT: %w", strings.Join(tables, ", "), err)
}

// renumberings caches renumbered by statement and offset (the statements are the
// repositories' and the outbox's: a few per table).
var renumberings sync.Map // renumbering → string

type renumbering struct {
	sql    string
	offset int
}

const maxRenumberings = 4096

var renumberingsLen struct {
	sync.Mutex
	n int
}

func renumberedCached(sql string, offset int) (string, bool) {
	k := renumbering{sql, offset}
	if v, ok := renumberings.Load(k); ok {
		return v.(string), true
	}
	out, ok := renumbered(sql, offset)
	if !ok {
		return sql, false
	}
	renumberingsLen.Lock()
	if renumberingsLen.n >= maxRenumberings {
		renumberings.Clear()
		renumberingsLen.n = 0
	}
	renumberingsLen.n++
	renumberingsLen.Unlock()
	renumberings.Store(k, out)
	return out, true
}

// renumbered returns sql with each parameter $n written $(n+offset), and false when sql
// cannot be renumbered that way: a dollar-quoted string, a semicolon, or an unterminated
// quote, a comment. Quoted strings and identifiers are copied as they are (a string with
// backslash escapes, E'…', is not supported).
func renumbered(sql string, offset int) (string, bool) {
	var b strings.Builder
	b.Grow(len(sql) + 16)
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch c {
		case '\'', '"':
			end := strings.IndexByte(sql[i+1:], c)
			if end < 0 {
				return "", false
			}
			b.WriteString(sql[i : i+end+2])
			i += end + 1
		case ';':
			return "", false
		case '-', '/':
			if strings.HasPrefix(sql[i:], "--") || strings.HasPrefix(sql[i:], "/*") {
				return "", false // a comment
			}
			b.WriteByte(c)
		case '$':
			if i > 0 && identChar(sql[i-1]) {
				b.WriteByte(c) // part of an identifier
				continue
			}
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			if j == i+1 {
				return "", false // a dollar quote
			}
			n, err := strconv.Atoi(sql[i+1 : j])
			if err != nil {
				return "", false
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n + offset))
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func identChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
