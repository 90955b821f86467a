package postgres

import (
	"context"
	dbsql "database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/listingkit/listing/sql"
)

// MigrationResult names one migration that Migrate applied.
type MigrationResult struct {
	Version int64
	Source  string
}

// Migrate applies the embedded migrations (package sql) that are not yet applied, in order,
// each in its own transaction, holding a PostgreSQL session lock so that concurrent runs
// serialize. ownerURL must name a role allowed to create the roles and objects of
// 001_foundation.sql (in development, a superuser; in production, the owner role with
// CREATEROLE or roles created beforehand). When the database does not exist and
// createDatabase is true, Migrate creates it first. A second run applies nothing.
func Migrate(ctx context.Context, ownerURL string, createDatabase bool) ([]MigrationResult, error) {
	applied, _, err := MigrateReporting(ctx, ownerURL, createDatabase)
	return applied, err
}

// MigrateReporting is Migrate, and says how many dispatched outbox events it moved through
// the staging table around migration 018 (outbox_history.go); zero when the database was
// past 018 or new.
func MigrateReporting(ctx context.Context, ownerURL string, createDatabase bool) ([]MigrationResult, HistoryMove, error) {
	cfg, err := pgx.ParseConfig(ownerURL)
	if err != nil {
		return nil, HistoryMove{}, fmt.Errorf("postgres.Migrate: %w", redactURLError(err))
	}
	if createDatabase {
		if err := ensureDatabase(ctx, cfg); err != nil {
			return nil, HistoryMove{}, fmt.Errorf("postgres.Migrate: %w", err)
		}
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrateDB(ctx, db, sql.Migrations)
}

func migrateDB(ctx context.Context, db *dbsql.DB, fsys fs.FS) ([]MigrationResult, HistoryMove, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, HistoryMove{}, fmt.Errorf("postgres.Migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, HistoryMove{}, fmt.Errorf("postgres.Migrate: %w", err)
	}
	results, mv, err := upWithStagedHistory(ctx, db, p)
	out := make([]MigrationResult, 0, len(results))
	for _, r := range results {
		out = append(out, MigrationResult{Version: r.Source.Version, Source: r.Source.Path})
	}
	if err != nil {
		return out, *mv, fmt.Errorf("postgres.Migrate: %w", err)
	}
	return out, *mv, nil
}

// ensureDatabase creates the database named by cfg when it does not exist, connecting to the
// maintenance database "postgres" with the same credentials.
func ensureDatabase(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect: %w", err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	if err != nil && !IsDuplicateDatabase(err) {
		return fmt.Errorf("create database: %w", err)
	}
	return nil
}

// IsDuplicateDatabase reports whether err says the database exists already.
func IsDuplicateDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P04"
}
