package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// table describes how one aggregate kind maps to a table, so that one generic Repository
// serves every kind. Columns lists the columns in the order scan and values use them; the
// first is always id, and every table has workspace_id and created_at (for paging).
type table[T any] struct {
	name    string
	columns []string
	// scan returns the destinations of columns for a zero T.
	scan func(*T) []any
	// values returns the values of columns for v.
	values func(v *T) []any
	// key returns the id and creation time of v (the paging key).
	key func(v *T) (uuid.UUID, time.Time)
	// notFound is the domain error of a missing row.
	notFound *domain.Error
	// conflict is the domain error when a unique rule other than the primary key refuses an
	// insert (nil when the table has none).
	conflict *domain.Error
	// once lists the columns written once: Insert writes them, and Save fills them only while
	// they are NULL, so a value once stored never changes (e.g. a task's product snapshot).
	once []string
	// maintained lists the table's columns that the database alone writes (a trigger's mark,
	// such as the pending unpublish of a publication): the repository neither reads nor
	// writes them, and TestTaskTableColumns counts them as declared.
	maintained []string
}

// Repository implements port.Repository[T] for a table.
type Repository[T any] struct {
	t      table[T]
	insert string
	sel    string
	update string
	// updateArgs are the indexes in columns of the update's parameters, in order: the id,
	// then every column but workspace_id and created_at, which never change.
	updateArgs []int
	// updateRows is the update as a RowsWrite (UpdateAtCommit): the rows of several updates
	// in one statement.
	updateRows *RowsWrite
	// lockOperation is the locking read of row $1 and of its operation, in one statement, for
	// a task table (one with an operation_id column; port.LockingOperation): the task's columns,
	// then the operation's, the task's row locked first.
	lockOperation string
	// lockGuarded is lockOperation that also checks the declared guards of the task
	// (task_guard_refusal, sql/068) as its last column (port.CheckingGuards).
	lockGuarded string
}

var _ port.Repository[domain.Operation] = (*Repository[domain.Operation])(nil)

func newRepository[T any](t table[T]) *Repository[T] {
	cols := strings.Join(t.columns, ", ")
	ph := make([]string, len(t.columns))
	set, setRows := []string{}, []string{}
	updateArgs := []int{0} // id is $1
	updated := []string{t.columns[0]}
	for i, c := range t.columns {
		ph[i] = fmt.Sprintf("$%d", i+1)
		if i != 0 && c != "workspace_id" && c != "created_at" {
			updateArgs = append(updateArgs, i)
			updated = append(updated, c)
			if slices.Contains(t.once, c) {
				set = append(set, fmt.Sprintf("%s = COALESCE(%s, $%d)", c, c, len(updateArgs)))
				setRows = append(setRows, fmt.Sprintf("%s = COALESCE(x.%s, v.%s)", c, c, c))
			} else {
				set = append(set, fmt.Sprintf("%s = $%d", c, len(updateArgs)))
				setRows = append(setRows, fmt.Sprintf("%s = v.%s", c, c))
			}
		}
	}
	update := fmt.Sprintf("UPDATE %s SET %s WHERE id = $1", t.name, strings.Join(set, ", "))
	lockOperation, lockGuarded := "", ""
	if t.name != operationsTable && slices.Contains(t.columns, "operation_id") {
		// FOR UPDATE OF t, o locks each joined row's task, then its operation (the executor
		// locks the row marks in the order the clause names them). The guards' column is
		// computed with the row under the lock (a row updated meanwhile is locked, then
		// computed again on its latest version).
		sel := "SELECT " + qualified("t", t.columns) + ", " + qualified("o", operationColumns)
		from := " FROM " + t.name + " t JOIN " + operationsTable + " o ON o.id = t.operation_id WHERE t.id = $1 FOR UPDATE OF t, o"
		lockOperation = sel + from
		lockGuarded = sel + ", task_guard_refusal('" + t.name + "', to_jsonb(t))" + from
	}
	return &Repository[T]{
		lockOperation: lockOperation,
		lockGuarded:   lockGuarded,
		t:             t,
		insert:        fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT DO NOTHING", t.name, cols, strings.Join(ph, ", ")),
		sel:           fmt.Sprintf("SELECT %s FROM %s", cols, t.name),
		update:        update,
		updateArgs:    updateArgs,
		updateRows:    newUpdateRows(t.name, updated, update, strings.Join(setRows, ", ")),
	}
}

// newUpdateRows returns the RowsWrite of the updates of table by id (columns[0]) that update
// its columns: for one row the statement update, for more an UPDATE … FROM of a VALUES list
// whose first row, NULLs of the table's column types, matches no row and types the
// parameters of the others (set assigns from v, the table being x).
func newUpdateRows(table string, columns []string, update, set string) *RowsWrite {
	typed := make([]string, len(columns))
	for i, c := range columns {
		typed[i] = "(NULL::" + table + ")." + c
	}
	head := "UPDATE " + table + " AS x SET " + set + " FROM (VALUES (" + strings.Join(typed, ", ") + ")"
	tail := ") AS v(" + strings.Join(columns, ", ") + ") WHERE x." + columns[0] + " = v." + columns[0]
	return NewRowsWrite(table, len(columns), func(rows int) string {
		if rows == 1 {
			return update
		}
		var b strings.Builder
		b.WriteString(head)
		p := 0
		for range rows {
			b.WriteString(", (")
			for i := range columns {
				if i > 0 {
					b.WriteString(", ")
				}
				p++
				b.WriteString("$")
				b.WriteString(strconv.Itoa(p))
			}
			b.WriteString(")")
		}
		b.WriteString(tail)
		return b.String()
	})
}

func (r *Repository[T]) op(name string) string { return "postgres." + r.t.name + "." + name }

// Insert implements port.Repository.
func (r *Repository[T]) Insert(ctx context.Context, v T) error {
	tx, _, err := mustTx(ctx, r.op("Insert"))
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, r.insert, r.t.values(&v)...)
	if err != nil {
		return fmt.Errorf("%s: %w", r.op("Insert"), TranslateError(err))
	}
	if tag.RowsAffected() == 0 {
		if r.t.conflict != nil {
			return r.t.conflict
		}
		return fmt.Errorf("%s: %w", r.op("Insert"), domain.ErrConflict)
	}
	return nil
}

// Get implements port.Repository.
func (r *Repository[T]) Get(ctx context.Context, id uuid.UUID) (T, error) {
	return r.get(ctx, id, "")
}

func (r *Repository[T]) get(ctx context.Context, id uuid.UUID, lock string) (T, error) {
	var v T
	tx, _, err := mustTx(ctx, r.op("Get"))
	if err != nil {
		return v, err
	}
	if lock != "" {
		if v, ok := takeLocked[T](ctx, r.t.name, id); ok {
			return v, nil
		}
		if r.lockOperation != "" && port.LocksOperation(ctx) {
			return r.getWithOperation(ctx, tx, id)
		}
	}
	err = tx.QueryRow(ctx, r.sel+" WHERE id = $1"+lock, id).Scan(r.t.scan(&v)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, r.t.notFound
	}
	if err != nil {
		return v, fmt.Errorf("%s: %w", r.op("Get"), TranslateError(err))
	}
	return v, nil
}

// getWithOperation is get under a row lock that also locks the task's operation and keeps it
// for the operations repository's next locking read (port.LockingOperation): one statement
// (a join), the task's lock first. A task whose operation is not in sight is read again
// alone, under its lock: the operations repository then reads (and reports) the operation
// itself.
func (r *Repository[T]) getWithOperation(ctx context.Context, tx pgx.Tx, id uuid.UUID) (v T, err error) {
	q, guarded := r.lockQuery(ctx)
	v, o, refusal, err := r.scanWithOperation(tx.QueryRow(ctx, q, id), guarded)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// No task, or no operation in sight: the task alone.
		err = tx.QueryRow(ctx, r.sel+" WHERE id = $1 FOR UPDATE", id).Scan(r.t.scan(&v)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return v, r.t.notFound
		}
	case err == nil:
		keepLocked(ctx, operationsTable, o.ID, o)
		if guarded {
			keepLocked(ctx, guardsOf(r.t.name), id, refusal)
		}
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", r.op("Get"), TranslateError(err))
	}
	return v, nil
}

// lockQuery is the task's locking read with its operation: lockGuarded under
// port.CheckingGuards (guarded), else lockOperation.
func (r *Repository[T]) lockQuery(ctx context.Context) (q string, guarded bool) {
	if port.ChecksGuards(ctx) {
		return r.lockGuarded, true
	}
	return r.lockOperation, false
}

// scanWithOperation scans a row of lockOperation (the task, then its operation), or of
// lockGuarded when guarded (then the guards' answer).
func (r *Repository[T]) scanWithOperation(row pgx.Row, guarded bool) (v T, o domain.Operation, g guardRefusal, err error) {
	dest := append(r.t.scan(&v), operationScan(&o)...)
	var code *string
	if guarded {
		dest = append(dest, &code)
	}
	err = row.Scan(dest...)
	if code != nil {
		g.code = *code
	}
	return v, o, g, err
}

var _ port.LockPreloader = (*Repository[domain.Publication])(nil)

// PreloadLocking implements port.LockPreloader for a task table (one with an operation_id
// column); for any other table it returns ctx as it is. Under port.CheckingGuards the read
// also checks the task's guards, for TaskGuards.Check in the step: a group's steps then see
// the guards as they held when the group began, under the aggregates' locks (the order in
// which separate transactions would have run them, the check first).
func (r *Repository[T]) PreloadLocking(ctx context.Context, id uuid.UUID) context.Context {
	if r.lockOperation == "" {
		return ctx
	}
	q, guarded := r.lockQuery(ctx)
	return context.WithValue(ctx, preloadKey{}, &preload{sql: q, args: []any{id},
		read: func(row pgx.Row) ([]preloadedRow, error) {
			v, o, g, err := r.scanWithOperation(row, guarded)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// No task, or no operation in sight: the step reads (and reports) them itself.
				return nil, nil
			case err != nil:
				return nil, fmt.Errorf("%s: %w", r.op("Get"), TranslateError(err))
			}
			rows := []preloadedRow{{table: r.t.name, id: id, v: v}, {table: operationsTable, id: o.ID, v: o}}
			if guarded {
				rows = append(rows, preloadedRow{table: guardsOf(r.t.name), id: id, v: g})
			}
			return rows, nil
		}})
}

// qualified returns columns, each prefixed with alias, comma-separated.
func qualified(alias string, columns []string) string {
	var b strings.Builder
	for i, c := range columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(alias + "." + c)
	}
	return b.String()
}

// Update implements port.Repository.
func (r *Repository[T]) Update(ctx context.Context, id uuid.UUID, fn func(*T) error) (T, error) {
	v, err := r.get(ctx, id, " FOR UPDATE")
	if err != nil {
		return v, err
	}
	if err := fn(&v); err != nil {
		var zero T
		return zero, err
	}
	if err := r.Save(ctx, v); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// UpdateAtCommit implements port.UpdaterAtCommit: Update with the write sent with the COMMIT
// (BeforeCommit).
func (r *Repository[T]) UpdateAtCommit(ctx context.Context, id uuid.UUID, fn func(*T) error) (T, error) {
	v, err := r.get(ctx, id, " FOR UPDATE")
	if err != nil {
		return v, err
	}
	if err := fn(&v); err != nil {
		var zero T
		return zero, err
	}
	dropLocked(ctx, r.t.name, id)
	op := r.op("Save")
	if err := BeforeCommitRows(ctx, r.updateRows, func(err error) error { return fmt.Errorf("%s: %w", op, err) }, r.updateArgsOf(&v)...); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// updateArgsOf returns the parameters of the update of v.
func (r *Repository[T]) updateArgsOf(v *T) []any {
	all := r.t.values(v)
	args := make([]any, len(r.updateArgs))
	for i, idx := range r.updateArgs {
		args[i] = all[idx]
	}
	return args
}

// Save writes every column of v but the write-once ones already set (callers hold the row
// lock, see Update).
func (r *Repository[T]) Save(ctx context.Context, v T) error {
	tx, _, err := mustTx(ctx, r.op("Save"))
	if err != nil {
		return err
	}
	id, _ := r.t.key(&v)
	dropLocked(ctx, r.t.name, id)
	if _, err := tx.Exec(ctx, r.update, r.updateArgsOf(&v)...); err != nil {
		return fmt.Errorf("%s: %w", r.op("Save"), TranslateError(err))
	}
	return nil
}

// List implements port.Repository: newest first, keyset-paginated on (created_at, id).
func (r *Repository[T]) List(ctx context.Context, page port.Page) ([]T, string, error) {
	return r.ListWhere(ctx, page, "", nil)
}

// ListWhere lists rows matching an extra condition (with its own parameters numbered from
// $4), newest first.
func (r *Repository[T]) ListWhere(ctx context.Context, page port.Page, cond string, args []any) ([]T, string, error) {
	tx, _, err := mustTx(ctx, r.op("List"))
	if err != nil {
		return nil, "", err
	}
	limit := ClampLimit(page.Limit)
	after, afterID, err := DecodeCursor(page.Cursor)
	if err != nil {
		return nil, "", err
	}
	q := r.sel + " WHERE ($1::timestamptz IS NULL OR (created_at, id) < ($1, $2))"
	if cond != "" {
		q += " AND (" + cond + ")"
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT $3"
	rows, err := tx.Query(ctx, q, append([]any{after, afterID, limit + 1}, args...)...)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", r.op("List"), TranslateError(err))
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) {
		var v T
		return v, row.Scan(r.t.scan(&v)...)
	})
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", r.op("List"), TranslateError(err))
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		id, created := r.t.key(&items[len(items)-1])
		next = EncodeCursor(created, id)
	}
	return items, next, nil
}

var _ port.TaskReader = (*Repository[domain.ListingUpdate])(nil)

// GetUnder implements port.TaskReader.
func (r *Repository[T]) GetUnder(ctx context.Context, id uuid.UUID, parentColumn string, parentID uuid.UUID) (any, error) {
	tx, _, err := mustTx(ctx, r.op("GetUnder"))
	if err != nil {
		return nil, err
	}
	var v T
	err = tx.QueryRow(ctx, r.sel+" WHERE id = $1 AND "+pgx.Identifier{parentColumn}.Sanitize()+" = $2", id, parentID).Scan(r.t.scan(&v)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, r.t.notFound
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op("GetUnder"), TranslateError(err))
	}
	return v, nil
}

// ListUnder implements port.TaskReader.
func (r *Repository[T]) ListUnder(ctx context.Context, parentTable, parentColumn string, parentID uuid.UUID, page port.Page) ([]any, string, error) {
	tx, _, err := mustTx(ctx, r.op("ListUnder"))
	if err != nil {
		return nil, "", err
	}
	var found bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{parentTable}.Sanitize()+" WHERE id = $1)", parentID).Scan(&found); err != nil {
		return nil, "", fmt.Errorf("%s: %w", r.op("ListUnder"), TranslateError(err))
	}
	if !found {
		return nil, "", domain.ErrNotFound
	}
	items, next, err := r.ListWhere(ctx, page, pgx.Identifier{parentColumn}.Sanitize()+" = $4", []any{parentID})
	out := make([]any, len(items))
	for i, v := range items {
		out[i] = v
	}
	return out, next, err
}
