package store

import (
	"context"
	"fmt"
	"time"
)

// MemoryRef names one memory and its owner.
type MemoryRef struct {
	OwnerID int64
	ID      string
}

// UnusedMemories lists the memories neither used nor updated since before (the
// instance's "forget unused memories" setting), at most limit, oldest first.
func (db *DB) UnusedMemories(ctx context.Context, before time.Time, limit int) ([]MemoryRef, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT owner_id, id FROM memories
		WHERE max(updated_at, coalesce(last_used_at, 0)) < ?
		ORDER BY max(updated_at, coalesce(last_used_at, 0)) LIMIT ?`, ms(before), limit)
	if err != nil {
		return nil, fmt.Errorf("store: unused memories: %w", err)
	}
	defer rows.Close()
	var out []MemoryRef
	for rows.Next() {
		var r MemoryRef
		if err := rows.Scan(&r.OwnerID, &r.ID); err != nil {
			return nil, fmt.Errorf("store: unused memories: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: unused memories: %w", err)
	}
	return out, nil
}
