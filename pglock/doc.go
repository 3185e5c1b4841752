// Package pglock is a distlock.Backend over PostgreSQL session advisory
// locks, on a pgx v5 pool.
package pglock
