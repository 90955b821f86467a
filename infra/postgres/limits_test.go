package postgres_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/clientkey"
	"github.com/listingkit/listing/infra/console"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestDomainLimitsMatchDatabase reads every CHECK that bounds a text column's length from
// the catalog of the migrated database and compares its upper bound with the Go constant
// that validation uses. A new length CHECK fails this test until it is given its constant
// here, so the limit is stated once and the code refuses a value before the database does.
func TestDomainLimitsMatchDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	limits := map[string]int{
		"workspaces.name":                     domain.MaxWorkspaceNameLength,
		"integrations.name":                   domain.MaxIntegrationNameLength,
		"material_transfers.source_url":       domain.MaxSourceURLLength,
		"operations.error_message":            domain.MaxOperationErrorLength,
		"store_verifications.error_message":   domain.MaxTaskErrorLength,
		"media_processings.error_message":     domain.MaxTaskErrorLength,
		"material_transfers.error_message":    domain.MaxTaskErrorLength,
		"publications.error_message":          domain.MaxTaskErrorLength,
		"product_syncs.error_message":         domain.MaxTaskErrorLength,
		"ai_tasks.error_message":              domain.MaxTaskErrorLength,
		"listing_updates.error_message":       domain.MaxTaskErrorLength,
		"outbox_events.last_error":            outbox.MaxLastErrorLength,
		"outbox_redrives.previous_last_error": outbox.MaxLastErrorLength,
		"outbox_redrives.redriven_by":         outbox.MaxOperatorLength,
		"outbox_redrives.reason":              outbox.MaxReasonLength,
		"outbox_purges.last_error":            outbox.MaxLastErrorLength,
		"outbox_purges.purged_by":             outbox.MaxOperatorLength,
		"outbox_purges.reason":                outbox.MaxReasonLength,
		"operator_actions.operator":           outbox.MaxOperatorLength,
		"operator_actions.action":             console.MaxActionLength,
		"operator_actions.target":             console.MaxActionTargetLength,
		"operator_actions.reason":             outbox.MaxReasonLength,
		"console_sessions.operator":           outbox.MaxOperatorLength,
		"console_signin_failures.client":      console.MaxClientKeyLength,
		"login_failures.client":               clientkey.MaxLength,
		"login_known_clients.client":          clientkey.MaxLength,
	}
	for _, f := range flows.All() { // the lifecycle's error_message (prepare_task_table)
		limits[f.Table+".error_message"] = domain.MaxTaskErrorLength
	}
	rows, err := db.Owner.Query(context.Background(), `
		SELECT c.conrelid::regclass::text, pg_get_constraintdef(c.oid)
		FROM pg_constraint c
		WHERE c.contype = 'c' AND c.connamespace = 'public'::regnamespace
		  AND pg_get_constraintdef(c.oid) LIKE '%length(%'
		ORDER BY 1, 2`)
	require.NoError(t, err)
	defer rows.Close()
	// pg_get_constraintdef writes "length(col) <= n" (BETWEEN becomes ">= 1 AND <= n").
	upper := regexp.MustCompile(`length\((\w+)\) <= (\d+)`)
	fixedSize := regexp.MustCompile(`^CHECK \(\(octet_length\(\w+\) = \d+\)\)$`)
	seen := map[string]bool{}
	for rows.Next() {
		var table, def string
		require.NoError(t, rows.Scan(&table, &def))
		if fixedSize.MatchString(def) { // a hash's size, not a text's limit
			continue
		}
		bounds := upper.FindAllStringSubmatch(def, -1)
		require.NotEmpty(t, bounds, "%s: a length CHECK without an upper bound this test understands: %s", table, def)
		for _, b := range bounds {
			col := table + "." + b[1]
			n, _ := strconv.Atoi(b[2])
			want, ok := limits[col]
			require.True(t, ok, "%s has a length CHECK (%s) but no Go limit: add it to domain/limits.go and here", col, def)
			require.Equal(t, want, n, "%s: the database allows %d characters, the Go limit says %d", col, n, want)
			seen[col] = true
		}
	}
	require.NoError(t, rows.Err())
	for col := range limits {
		require.True(t, seen[col], "%s: no length CHECK in the database any more; drop it here", col)
	}
}
