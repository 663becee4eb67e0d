package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// MemoryStats is what an admin sees of one user's memories without revealing
// them: counts, sizes and dates, read from the metadata columns only.
type MemoryStats struct {
	OwnerID     int64
	Count       int
	Kinds       map[string]int
	SealedBytes int64 // the ciphertexts' total size: a little more than the texts'
	Oldest      time.Time
	Newest      time.Time
	LastUsed    *time.Time // nil when none was ever used
}

// MemoryStatsByOwner returns the stats of every owner who has unexpired
// memories, keyed by owner id.
func (db *DB) MemoryStatsByOwner(ctx context.Context) (map[int64]*MemoryStats, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT owner_id, kind, COUNT(*), SUM(length(sealed)),
		MIN(created_at), MAX(created_at), MAX(last_used_at)
		FROM memories WHERE expires_at IS NULL OR expires_at > ? GROUP BY owner_id, kind`, ms(db.now()))
	if err != nil {
		return nil, fmt.Errorf("store: memory stats: %w", err)
	}
	defer rows.Close()
	out := map[int64]*MemoryStats{}
	for rows.Next() {
		var owner, size, oldest, newest int64
		var kind string
		var n int
		var used sql.NullInt64
		if err := rows.Scan(&owner, &kind, &n, &size, &oldest, &newest, &used); err != nil {
			return nil, fmt.Errorf("store: memory stats: %w", err)
		}
		s := out[owner]
		if s == nil {
			s = &MemoryStats{OwnerID: owner, Kinds: map[string]int{}, Oldest: fromMS(oldest), Newest: fromMS(newest)}
			out[owner] = s
		}
		s.Count += n
		s.Kinds[kind] += n
		s.SealedBytes += size
		if t := fromMS(oldest); t.Before(s.Oldest) {
			s.Oldest = t
		}
		if t := fromMS(newest); t.After(s.Newest) {
			s.Newest = t
		}
		if used.Valid {
			if t := fromMS(used.Int64); s.LastUsed == nil || t.After(*s.LastUsed) {
				s.LastUsed = &t
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: memory stats: %w", err)
	}
	return out, nil
}
