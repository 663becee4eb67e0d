package store

import (
	"context"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// BackdateMemory sets owner's memory id's created and updated time to at, for
// an import that keeps the dates of the export; ranking's recency then treats
// the memory as the age it is. Another owner's id is errs.NotFound.
func (db *DB) BackdateMemory(ctx context.Context, owner int64, id string, at time.Time) error {
	res, err := db.exec(ctx, `UPDATE memories SET created_at = ?, updated_at = ? WHERE owner_id = ? AND id = ?`,
		ms(at), ms(at), owner, id)
	if err != nil {
		return fmt.Errorf("store: backdate memory: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: backdate memory: %w", errs.E(errs.NotFound, "memory not found"))
	}
	return nil
}
