// Package sql holds the database migrations, embedded into the binary and applied in order by
// `app migrate` (see infra/postgres.Migrate). Files are goose migrations named NNN_name.sql;
// a file, once landed, is never edited: a change is a new file.
package sql

import "embed"

// Migrations is the set of migration files, at the root of the FS.
//
//go:embed *.sql
var Migrations embed.FS
