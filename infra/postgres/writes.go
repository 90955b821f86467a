package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

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

// mergeWrites returns qs with each run of consecutive BeforeCommitWrite statements of
// distinct tables sent as one statement: WITH w1 AS (first), w2 AS (second) … last, its
// parameters renumbered. A run never spans another statement (a scope change among them),
// and two writes of one table never share one (a row written twice in a statement is
// undefined). The merged statement's error goes through the onErr of the member whose table
// the server's error names (its table field, or the quoted name in its message); an error
// naming none of them is named after all of them.
func mergeWrites(qs []queued) []queued {
	merges := false
	for i := 1; i < len(qs); i++ {
		if qs[i].table != "" && qs[i-1].table != "" && qs[i].table != qs[i-1].table {
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
		run:
			for ; j < len(qs) && qs[j].table != ""; j++ {
				for _, m := range qs[i:j] {
					if m.table == qs[j].table {
						break run
					}
				}
			}
		}
		if j-i == 1 {
			out = append(out, qs[i])
		} else {
			out = append(out, merge(qs[i:j]))
		}
		i = j
	}
	return out
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
