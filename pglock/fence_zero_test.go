package pglock_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/pglock"
)

// The zero Fence refuses a stale token with an error and counts it, as
// the zero fence.Register does.
func TestZeroFenceRefuses(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, server)
	var f pglock.Fence
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Admit(ctx, tx, "res", 0) })
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Admit(token 0) = %v, want fence.ErrStaleToken", err)
	}
}
