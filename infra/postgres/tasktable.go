package postgres

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// A column maps one column of a table to one field of a row's Go value, declared once: the
// column's name, the field (a pointer to it: the scan's destination and the value written)
// and whether the field's zero value is the column's NULL.
type column struct {
	name string
	ptr  any
	null bool
}

// col maps column name to the field ptr, read and written as it is.
func col(name string, ptr any) column { return column{name: name, ptr: ptr} }

// nullCol maps column name to the field ptr, whose zero value (the zero time, "",
// uuid.Nil, an empty document) is written as NULL and read from NULL.
func nullCol(name string, ptr any) column { return column{name: name, ptr: ptr, null: true} }

// dest is the column's scan destination.
func (c column) dest() any {
	if c.null {
		switch p := c.ptr.(type) {
		case *time.Time:
			return (*nullTime)(p)
		case *string:
			return (*nullText)(p)
		}
	}
	return c.ptr
}

// value is the column's value to write.
func (c column) value() any {
	switch p := c.ptr.(type) {
	case *uuid.UUID:
		if c.null {
			return nullIfNil(*p)
		}
		return *p
	case *time.Time:
		if c.null {
			return nullTimeValue(*p)
		}
		return *p
	case *string:
		if c.null {
			return nullTextValue(*p)
		}
		return *p
	case *[]byte:
		if c.null {
			return nullIfEmpty(*p)
		}
		return *p
	case *json.RawMessage:
		if c.null && len(*p) == 0 {
			return nil
		}
		return *p
	case *int:
		return *p
	case *int64:
		return *p
	case *bool:
		return *p
	case **bool:
		return *p
	case **time.Time:
		return *p
	case *domain.TaskStatus:
		return *p
	}
	if c.null {
		panic(fmt.Sprintf("postgres: column %s: no NULL for a field of type %T", c.name, c.ptr))
	}
	return reflect.ValueOf(c.ptr).Elem().Interface()
}

// taskColumns appends to cs the lifecycle columns, which every task table has (sql/026's
// prepare_task_table and the columns its task_tables triggers add), mapped to t's fields.
// A task table's Go and SQL columns are compared by TestTaskTableColumns.
func taskColumns(cs []column, t *domain.Task) []column {
	return append(cs, col("id", &t.ID), col("workspace_id", &t.WorkspaceID), col("operation_id", &t.OperationID),
		col("status", &t.Status), col("attempts", &t.Attempts), col("reconciliations", &t.Reconciliations),
		col("error_code", &t.ErrorCode), col("error_message", &t.ErrorMessage), col("version", &t.Version),
		col("created_at", &t.CreatedAt), col("updated_at", &t.UpdatedAt), col("redeliveries", &t.Redeliveries),
		col("reconciled_attempts", &t.ReconciledAttempts), nullCol("first_dispatched_at", &t.FirstDispatchedAt),
		nullCol("held_result", &t.HeldResult), nullCol("look_code", &t.Look.Code),
		nullCol("look_message", &t.Look.Message), nullCol("looked_at", &t.Look.LookedAt),
		nullCol("look_found", &t.Look.Found), nullCol("call_deadline", &t.CallDeadline))
}

// taskTable returns the table of task type T, named name: the lifecycle columns of the
// domain.Task that task gives (taskColumns), then the flow's own columns, which own declares
// once each beside the field it maps. The caller adds notFound, and conflict and once if any.
func taskTable[T any](name string, task func(*T) *domain.Task, own func(*T) []column) table[T] {
	var zero T
	n := len(taskColumns(nil, task(&zero))) + len(own(&zero))
	all := func(v *T) []column { return append(taskColumns(make([]column, 0, n), task(v)), own(v)...) }
	names := make([]string, 0, n)
	for _, c := range all(&zero) {
		names = append(names, c.name)
	}
	return table[T]{
		name:    name,
		columns: names,
		scan: func(v *T) []any {
			cs := all(v)
			out := make([]any, len(cs))
			for i, c := range cs {
				out[i] = c.dest()
			}
			return out
		},
		values: func(v *T) []any {
			cs := all(v)
			out := make([]any, len(cs))
			for i, c := range cs {
				out[i] = c.value()
			}
			return out
		},
		key: func(v *T) (uuid.UUID, time.Time) { t := task(v); return t.ID, t.CreatedAt },
	}
}
