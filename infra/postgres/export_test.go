package postgres

// MaxLeaders is maxLeaders, for the tests of package postgres_test that hold every group
// transaction open.
const MaxLeaders = maxLeaders
