package domain

// Limits of the text the service stores, in characters (Unicode code points, as PostgreSQL's
// length() counts them). This is the one place that states them: validation uses these
// constants, and where a column has a CHECK of its own, infra/postgres's
// TestDomainLimitsMatchDatabase reads the CHECK from the catalog and requires the same value.
const (
	MaxEmailLength         = 254
	MinPasswordLength      = 10
	MaxPasswordLength      = 256
	MaxWorkspaceNameLength = 200 // CHECK workspaces.name

	MaxIntegrationNameLength = 100 // CHECK integrations.name

	MaxShopIDLength    = 200
	MaxStoreNameLength = 200

	MaxTitleLength       = 500
	MaxDescriptionLength = 20000
	MaxProductImages     = 20
	MaxImageURLLength    = 2048

	MaxPromptLength = 4000

	MaxFilenameLength  = 255
	MaxSourceURLLength = 2048 // CHECK material_transfers.source_url

	MaxOperationErrorLength = 1000 // CHECK operations.error_message
	MaxTaskErrorLength      = 500  // CHECK <task table>.error_message
)
