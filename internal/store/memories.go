package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Memory vectors are 64 to MaxMemoryVectorDim dimensions wide, a power of two
// (migration 0011): dims/8 bytes in Bits, dims float16 in Embedding. A row's
// width is its blobs' length; searches compare rows of the query's width only.
const (
	MinMemoryVectorDim = 64
	MaxMemoryVectorDim = 4096
)

// Memory is one stored memory. The store never sees its text: Sealed, Terms,
// Bits and Embedding are produced (and read back) by internal/memory.
type Memory struct {
	Seq           int64 // rowid of the vector row; internal
	ID            string
	OwnerID       int64
	Kind          string
	Sealed        []byte
	TermCount     int
	SourceKind    string // chat, tool, manual, import
	SourceSession string // "" when none
	SourceSeq     *int64
	Confidence    float64
	CreatedAt     time.Time
	UpdatedAt     time.Time
	LastUsedAt    *time.Time
	UseCount      int
	ExpiresAt     *time.Time

	// VectorVersion is set by InsertMemories: the owner's MemoryVectorVersion
	// right after this memory's vectors were written, inside the transaction, so
	// the version before it was VectorVersion-1 exactly.
	VectorVersion int64
}

// MemoryTerm is one blind-index entry: an HMAC tag and its count in the memory.
type MemoryTerm struct {
	Tag []byte
	TF  int
}

// MemoryIndex is what a memory is found by: its blind terms and its
// (transformed) vector, as sign bits and as float16 (see HalfBlob).
type MemoryIndex struct {
	Terms     []MemoryTerm
	Bits      []byte // dims/8 bytes, bit i of byte i/8 set for a positive coordinate i
	Embedding []byte // dims little-endian float16, HalfBlob
}

// MemoryHit is a candidate of a search: for lexical hits Score is a BM25 score
// (higher is better), for vector hits Distance is the cosine distance.
type MemoryHit struct {
	ID       string
	Score    float64
	Distance float64
}

const memoryCols = `seq, id, owner_id, kind, sealed, term_count, source_kind, source_session, source_seq,
	confidence, created_at, updated_at, last_used_at, use_count, expires_at`

func scanMemory(row interface{ Scan(...any) error }) (Memory, error) {
	var m Memory
	var session sql.NullString
	var srcSeq, lastUsed, expires sql.NullInt64
	var created, updated int64
	err := row.Scan(&m.Seq, &m.ID, &m.OwnerID, &m.Kind, &m.Sealed, &m.TermCount, &m.SourceKind, &session, &srcSeq,
		&m.Confidence, &created, &updated, &lastUsed, &m.UseCount, &expires)
	if err != nil {
		return m, err
	}
	m.SourceSession = session.String
	if srcSeq.Valid {
		v := srcSeq.Int64
		m.SourceSeq = &v
	}
	m.CreatedAt, m.UpdatedAt = fromMS(created), fromMS(updated)
	if lastUsed.Valid {
		t := fromMS(lastUsed.Int64)
		m.LastUsedAt = &t
	}
	if expires.Valid {
		t := fromMS(expires.Int64)
		m.ExpiresAt = &t
	}
	return m, nil
}

func validMemoryIndex(ix MemoryIndex) error {
	dims := len(ix.Embedding) / 2
	if dims < MinMemoryVectorDim || dims > MaxMemoryVectorDim || dims&(dims-1) != 0 ||
		len(ix.Embedding) != 2*dims || len(ix.Bits) != dims/8 {
		return errs.E(errs.Invalid, "memory vector must be a power of two of %d to %d dimensions, with bits and float16 of one width",
			MinMemoryVectorDim, MaxMemoryVectorDim)
	}
	for _, t := range ix.Terms {
		if len(t.Tag) == 0 || t.TF <= 0 {
			return errs.E(errs.Invalid, "bad memory term")
		}
	}
	return nil
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ms(*t)
}

// InsertMemories stores memories with their index rows and vectors in one
// transaction (all or none). m.ID, OwnerID, Kind, Sealed, SourceKind and
// Confidence must be set; CreatedAt/UpdatedAt default to now. Seq is assigned.
func (db *DB) InsertMemories(ctx context.Context, mems []*Memory, ixs []MemoryIndex) error {
	if len(mems) != len(ixs) {
		return fmt.Errorf("store: insert memories: %d memories, %d indexes", len(mems), len(ixs))
	}
	for i := range mems {
		if err := validMemoryIndex(ixs[i]); err != nil {
			return fmt.Errorf("store: insert memory: %w", err)
		}
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		ins, err := tx.PrepareContext(ctx, `INSERT INTO memories (id, owner_id, kind, sealed, term_count, source_kind,
			source_session, source_seq, confidence, created_at, updated_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`)
		if err != nil {
			return err
		}
		defer ins.Close()
		for i, m := range mems {
			now := db.now()
			if m.CreatedAt.IsZero() {
				m.CreatedAt = now
			}
			if m.UpdatedAt.IsZero() {
				m.UpdatedAt = m.CreatedAt
			}
			var srcSeq any
			if m.SourceSeq != nil {
				srcSeq = *m.SourceSeq
			}
			err := ins.QueryRowContext(ctx, m.ID, m.OwnerID, m.Kind, m.Sealed, m.TermCount, m.SourceKind,
				nullString(m.SourceSession), srcSeq, m.Confidence, ms(m.CreatedAt), ms(m.UpdatedAt),
				nullTime(m.ExpiresAt)).Scan(&m.Seq)
			if err != nil {
				return err
			}
			if err := writeMemoryIndex(ctx, tx, m, ixs[i]); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, `SELECT version FROM memory_vector_versions WHERE owner_id = ?`, m.OwnerID).Scan(&m.VectorVersion); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case isForeignKey(err):
		return fmt.Errorf("store: insert memory: %w", errs.Wrap(errs.NotFound, err, "user not found"))
	case isUnique(err):
		return fmt.Errorf("store: insert memory: %w", errs.Wrap(errs.Conflict, err, "memory already exists"))
	case isCheck(err):
		return fmt.Errorf("store: insert memory: %w", errs.Wrap(errs.Invalid, err, "invalid memory"))
	case err != nil:
		return fmt.Errorf("store: insert memory: %w", err)
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func writeMemoryIndex(ctx context.Context, tx *sql.Tx, m *Memory, ix MemoryIndex) error {
	for _, t := range ix.Terms {
		if _, err := tx.ExecContext(ctx, `INSERT INTO memory_terms (memory_seq, owner_id, term, tf) VALUES (?, ?, ?, ?)`,
			m.Seq, m.OwnerID, t.Tag, t.TF); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO memory_bits (owner_id, seq, bits) VALUES (?, ?, ?)`,
		m.OwnerID, m.Seq, ix.Bits); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO memory_embeddings (seq, embedding) VALUES (?, ?)`, m.Seq, ix.Embedding)
	return err
}

// UpdateMemory replaces the sealed text, its terms and its vector of owner's
// memory id in place, in one transaction. Another owner's id is errs.NotFound.
func (db *DB) UpdateMemory(ctx context.Context, owner int64, id string, sealed []byte, termCount int, ix MemoryIndex) (Memory, error) {
	if err := validMemoryIndex(ix); err != nil {
		return Memory{}, fmt.Errorf("store: update memory: %w", err)
	}
	m, err := db.rewriteMemory(ctx, ix, `UPDATE memories SET sealed = ?, term_count = ?, updated_at = ?
		WHERE owner_id = ? AND id = ? RETURNING `+memoryCols, sealed, termCount, ms(db.now()), owner, id)
	if err != nil {
		return Memory{}, fmt.Errorf("store: update memory: %w", err)
	}
	// The old text's pages are zeroed by secure_delete; the checkpoint removes
	// the old page images from the WAL too.
	return m, db.Checkpoint(ctx)
}

// replaceMemoryIndex drops m's terms and vectors and writes ix in their place.
func replaceMemoryIndex(ctx context.Context, tx *sql.Tx, m *Memory, ix MemoryIndex) error {
	for _, q := range []string{`DELETE FROM memory_terms WHERE memory_seq = ?2`, `DELETE FROM memory_bits WHERE owner_id = ?1 AND seq = ?2`,
		`DELETE FROM memory_embeddings WHERE seq = ?2`} {
		if _, err := tx.ExecContext(ctx, q, m.OwnerID, m.Seq); err != nil {
			return err
		}
	}
	return writeMemoryIndex(ctx, tx, m, ix)
}

// ReindexMemory replaces the index (terms and vectors) of owner's memory id and keeps
// its text and dates: for a new embedding model or a changed text normalisation.
func (db *DB) ReindexMemory(ctx context.Context, owner int64, id string, termCount int, ix MemoryIndex) error {
	if err := validMemoryIndex(ix); err != nil {
		return fmt.Errorf("store: reindex memory: %w", err)
	}
	_, err := db.rewriteMemory(ctx, ix, `UPDATE memories SET term_count = ? WHERE owner_id = ? AND id = ? RETURNING `+memoryCols,
		termCount, owner, id)
	if err != nil {
		return fmt.Errorf("store: reindex memory: %w", err)
	}
	return nil
}

// rewriteMemory runs update (an UPDATE … RETURNING memoryCols of one owner's memory)
// and puts ix in place of the memory's index, in one transaction. No row is
// errs.NotFound.
func (db *DB) rewriteMemory(ctx context.Context, ix MemoryIndex, update string, args ...any) (Memory, error) {
	var m Memory
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		m, err = scanMemory(tx.QueryRowContext(ctx, update, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "memory not found")
		}
		if err != nil {
			return err
		}
		return replaceMemoryIndex(ctx, tx, &m, ix)
	})
	return m, err
}

// MemoryOwners lists the users who have memories.
func (db *DB) MemoryOwners(ctx context.Context) ([]int64, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT DISTINCT owner_id FROM memories ORDER BY owner_id`)
	if err != nil {
		return nil, fmt.Errorf("store: memory owners: %w", err)
	}
	out, err := scanAll(rows, func(r scanner) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	})
	if err != nil {
		return nil, fmt.Errorf("store: memory owners: %w", err)
	}
	return out, nil
}

// MemoryByID returns owner's memory id. Another owner's memory is errs.NotFound,
// exactly like a missing one.
func (db *DB) MemoryByID(ctx context.Context, owner int64, id string) (Memory, error) {
	m, err := scanMemory(db.pool.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories WHERE owner_id = ? AND id = ?`, owner, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Memory{}, fmt.Errorf("store: memory: %w", errs.E(errs.NotFound, "memory not found"))
	}
	if err != nil {
		return Memory{}, fmt.Errorf("store: memory: %w", err)
	}
	return m, nil
}

// ListMemories returns owner's unexpired memories, newest first.
func (db *DB) ListMemories(ctx context.Context, owner int64) ([]Memory, error) {
	return db.queryMemories(ctx, `SELECT `+memoryCols+` FROM memories
		WHERE owner_id = ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, seq DESC`, owner, ms(db.now()))
}

// MemoriesByIDs returns those of ids that are owner's unexpired memories, in
// no particular order; ids of other owners are silently left out.
func (db *DB) MemoriesByIDs(ctx context.Context, owner int64, ids []string) ([]Memory, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := []any{owner, ms(db.now())}
	for _, id := range ids {
		args = append(args, id)
	}
	return db.queryMemories(ctx, `SELECT `+memoryCols+` FROM memories
		WHERE owner_id = ? AND (expires_at IS NULL OR expires_at > ?) AND id IN (`+placeholders(len(ids))+`)`, args...)
}

func (db *DB) queryMemories(ctx context.Context, q string, args ...any) ([]Memory, error) {
	rows, err := db.pool.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: memories: %w", err)
	}
	defer rows.Close()
	var out []Memory
	for rows.Next() {
		m, err := scanMemory(rows)
		if err != nil {
			return nil, fmt.Errorf("store: memories: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: memories: %w", err)
	}
	return out, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// MarkMemoriesUsed records one use of each of owner's memories ids at now.
func (db *DB) MarkMemoriesUsed(ctx context.Context, owner int64, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	args := []any{ms(db.now()), owner}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := db.exec(ctx, `UPDATE memories SET last_used_at = ?, use_count = use_count + 1
		WHERE owner_id = ? AND id IN (`+placeholders(len(ids))+`)`, args...)
	if err != nil {
		return fmt.Errorf("store: mark memories used: %w", err)
	}
	return nil
}

// DeleteMemory physically removes owner's memory id with its terms and float
// vector (cascade) and its bits (trigger), then checkpoints the WAL so the deleted bytes are
// in neither file. Another owner's id is errs.NotFound.
func (db *DB) DeleteMemory(ctx context.Context, owner int64, id string) error {
	res, err := db.exec(ctx, `DELETE FROM memories WHERE owner_id = ? AND id = ?`, owner, id)
	if err != nil {
		return fmt.Errorf("store: delete memory: %w", err)
	}
	if err := mustAffect(res, "memory not found"); err != nil {
		return fmt.Errorf("store: delete memory: %w", err)
	}
	return db.Checkpoint(ctx)
}

// DeleteOwnerMemories removes all of owner's memories (as DeleteMemory) and
// returns how many there were.
func (db *DB) DeleteOwnerMemories(ctx context.Context, owner int64) (int, error) {
	res, err := db.exec(ctx, `DELETE FROM memories WHERE owner_id = ?`, owner)
	if err != nil {
		return 0, fmt.Errorf("store: delete memories: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), db.Checkpoint(ctx)
}

// SetMemoryExpiry sets (or with nil clears) when owner's memory id expires.
// Another owner's id is errs.NotFound.
func (db *DB) SetMemoryExpiry(ctx context.Context, owner int64, id string, at *time.Time) error {
	res, err := db.exec(ctx, `UPDATE memories SET expires_at = ? WHERE owner_id = ? AND id = ?`, nullTime(at), owner, id)
	if err != nil {
		return fmt.Errorf("store: set memory expiry: %w", err)
	}
	if err := mustAffect(res, "memory not found"); err != nil {
		return fmt.Errorf("store: set memory expiry: %w", err)
	}
	return nil
}

// PurgeExpiredMemories removes every memory whose expiry has passed.
func (db *DB) PurgeExpiredMemories(ctx context.Context) (int, error) {
	res, err := db.exec(ctx, `DELETE FROM memories WHERE expires_at IS NOT NULL AND expires_at <= ?`, ms(db.now()))
	if err != nil {
		return 0, fmt.Errorf("store: purge memories: %w", err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return 0, nil
	}
	return int(n), db.Checkpoint(ctx)
}

// BM25 parameters (the usual defaults).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// lexicalMaxDF is the document frequency above which (and above a tenth of the
// owner's memories) a query term is too common to look up.
const lexicalMaxDF = 200

// LexicalMemoryCandidates scores owner's unexpired memories that share a tag
// with the query tags by BM25 (term frequencies from the index, document
// frequencies and lengths within owner's memories) and returns the best limit,
// best first. Terms too common to be worth a lookup are skipped (lexicalMaxDF).
func (db *DB) LexicalMemoryCandidates(ctx context.Context, owner int64, tags [][]byte, limit int) ([]MemoryHit, error) {
	if len(tags) == 0 || limit <= 0 {
		return nil, nil
	}
	now := ms(db.now())
	var n int
	var avgLen sql.NullFloat64
	if err := db.pool.QueryRowContext(ctx, `SELECT COUNT(*), AVG(term_count) FROM memories WHERE owner_id = ?`, owner).Scan(&n, &avgLen); err != nil {
		return nil, fmt.Errorf("store: lexical memories: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	avg := math.Max(avgLen.Float64, 1)
	args := []any{owner}
	for _, t := range tags {
		args = append(args, t)
	}
	in := placeholders(len(tags))
	df := map[string]int{}
	rows, err := db.pool.QueryContext(ctx, `SELECT term, COUNT(*) FROM memory_terms WHERE owner_id = ? AND term IN (`+in+`) GROUP BY term`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: lexical memories: %w", err)
	}
	for rows.Next() {
		var tag []byte
		var c int
		if err := rows.Scan(&tag, &c); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: lexical memories: %w", err)
		}
		df[string(tag)] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: lexical memories: %w", err)
	}
	if len(df) == 0 {
		return nil, nil
	}
	// Terms in a large share of the owner's memories say little (their BM25 weight is
	// small) and cost a long posting list each: leave them out, keeping the rarest
	// term when all are common.
	maxDF := max(lexicalMaxDF, n/10)
	rarest, rarestDF := "", 0
	var kept []any
	for tag, d := range df {
		if rarest == "" || d < rarestDF {
			rarest, rarestDF = tag, d
		}
		if d <= maxDF {
			kept = append(kept, []byte(tag))
		}
	}
	if len(kept) == 0 {
		kept = []any{[]byte(rarest)}
	}
	in = placeholders(len(kept))
	args = append(append([]any{owner}, kept...), now)
	rows, err = db.pool.QueryContext(ctx, `SELECT m.id, t.term, t.tf, m.term_count
		FROM memory_terms t JOIN memories m ON m.seq = t.memory_seq
		WHERE t.owner_id = ? AND t.term IN (`+in+`) AND (m.expires_at IS NULL OR m.expires_at > ?)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: lexical memories: %w", err)
	}
	defer rows.Close()
	scores := map[string]float64{}
	for rows.Next() {
		var id string
		var tag []byte
		var tf, dl int
		if err := rows.Scan(&id, &tag, &tf, &dl); err != nil {
			return nil, fmt.Errorf("store: lexical memories: %w", err)
		}
		d := float64(df[string(tag)])
		idf := math.Log(1 + (float64(n)-d+0.5)/(d+0.5))
		f := float64(tf)
		scores[id] += idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(dl)/avg))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: lexical memories: %w", err)
	}
	hits := make([]MemoryHit, 0, len(scores))
	for id, s := range scores {
		hits = append(hits, MemoryHit{ID: id, Score: s})
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].ID < hits[j].ID
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits, nil
}

// HasMoreMemories reports whether owner has more than n memories, at a cost
// bounded by n (it stops counting at n+1).
func (db *DB) HasMoreMemories(ctx context.Context, owner int64, n int) (bool, error) {
	var c int
	err := db.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM memories WHERE owner_id = ? LIMIT ?)`, owner, n+1).Scan(&c)
	if err != nil {
		return false, fmt.Errorf("store: count memories: %w", err)
	}
	return c > n, nil
}

// MemoryVectorVersion counts the changes to owner's stored vectors (every
// insert and delete of a row of memory_bits, by any path): a copy of the bits
// read at one version is current while the version is unchanged.
func (db *DB) MemoryVectorVersion(ctx context.Context, owner int64) (int64, error) {
	var v int64
	err := db.pool.QueryRowContext(ctx, `SELECT version FROM memory_vector_versions WHERE owner_id = ?`, owner).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: memory vector version: %w", err)
	}
	return v, nil
}

// MemoryBits returns the version (MemoryVectorVersion) and the sign bits of
// owner's stored vectors of dims dimensions, concatenated in seqs' order (dims/8
// bytes each). The version is read first: a write landing between the two reads
// leaves newer bits under an older version, which the next comparison with
// MemoryVectorVersion finds stale (never the other way round), and neither read
// holds the write lock.
func (db *DB) MemoryBits(ctx context.Context, owner int64, dims int) (version int64, seqs []int64, bits []byte, err error) {
	if version, err = db.MemoryVectorVersion(ctx, owner); err != nil {
		return 0, nil, nil, err
	}
	rows, err := db.pool.QueryContext(ctx, `SELECT seq, bits FROM memory_bits WHERE owner_id = ? AND length(bits) = ?`, owner, dims/8)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("store: memory bits: %w", err)
	}
	defer rows.Close()
	var seq int64
	var b sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&seq, &b); err != nil {
			return 0, nil, nil, fmt.Errorf("store: memory bits: %w", err)
		}
		seqs, bits = append(seqs, seq), append(bits, b...)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, nil, fmt.Errorf("store: memory bits: %w", err)
	}
	return version, seqs, bits, nil
}

// RescoreMemories ranks those of seqs that are owner's unexpired memories with a
// stored vector of query's width by cosine distance to query and returns the k
// nearest, nearest first.
//
// The vectors are read and ranked first, and only then are the nearest looked
// up in memories (for their id, owner and expiry), a few more than k at a time
// until k are found: a lookup there costs as much as a vector's, and most
// candidates are not kept.
func (db *DB) RescoreMemories(ctx context.Context, owner int64, seqs []int64, query []float32, k int) ([]MemoryHit, error) {
	if k <= 0 || len(seqs) == 0 {
		return nil, nil
	}
	args := []any{2 * len(query)}
	for _, s := range seqs {
		args = append(args, s)
	}
	rows, err := db.pool.QueryContext(ctx, rescoreVectorsQuery(len(seqs)), args...)
	if err != nil {
		return nil, fmt.Errorf("store: rescore memories: %w", err)
	}
	type cand struct {
		seq int64
		d   float64
	}
	var cands []cand
	qn := norm(query)
	var blob sql.RawBytes
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.seq, &blob); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: rescore memories: %w", err)
		}
		c.d = halfCosineDistance(query, qn, blob)
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: rescore memories: %w", err)
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].d != cands[j].d {
			return cands[i].d < cands[j].d
		}
		return cands[i].seq < cands[j].seq
	})
	var hits []MemoryHit
	now := ms(db.now())
	for start := 0; start < len(cands) && len(hits) < k; start += 2 * k {
		batch := cands[start:min(start+2*k, len(cands))]
		args := []any{owner, now}
		for _, c := range batch {
			args = append(args, c.seq)
		}
		ids := map[int64]string{}
		rows, err := db.pool.QueryContext(ctx, rescoreOwnerQuery(len(batch)), args...)
		if err != nil {
			return nil, fmt.Errorf("store: rescore memories: %w", err)
		}
		for rows.Next() {
			var seq int64
			var id string
			if err := rows.Scan(&seq, &id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("store: rescore memories: %w", err)
			}
			ids[seq] = id
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("store: rescore memories: %w", err)
		}
		for _, c := range batch {
			if id, ok := ids[c.seq]; ok && len(hits) < k {
				hits = append(hits, MemoryHit{ID: id, Distance: c.d})
			}
		}
	}
	return hits, nil
}

// rescoreVectorsQuery reads n seqs' vectors of one width, by seq.
func rescoreVectorsQuery(n int) string {
	return `SELECT seq, embedding FROM memory_embeddings WHERE length(embedding) = ? AND seq IN (` + placeholders(n) + `)`
}

// rescoreOwnerQuery keeps those of n seqs that are one owner's unexpired
// memories. The unary + keeps the planner off memories_owner: from about 50 seqs
// on it preferred scanning all of the owner's rows (100k in
// BenchmarkMemoryRecall) to looking the seqs up.
func rescoreOwnerQuery(n int) string {
	return `SELECT seq, id FROM memories WHERE +owner_id = ? AND (expires_at IS NULL OR expires_at > ?)
		AND seq IN (` + placeholders(n) + `)`
}

// ExactKNNMemoryCandidates is the exact KNN over all of owner's stored vectors of
// query's width (a scan of owner's rows by index): the reference the prefilter is
// measured against, and the search of owners with few memories.
func (db *DB) ExactKNNMemoryCandidates(ctx context.Context, owner int64, query []float32, k int) ([]MemoryHit, error) {
	if k <= 0 {
		return nil, nil
	}
	return db.rescore(ctx, query, k, `SELECT m.id, e.embedding
		FROM memories m JOIN memory_embeddings e ON e.seq = m.seq
		WHERE m.owner_id = ? AND (m.expires_at IS NULL OR m.expires_at > ?) AND length(e.embedding) = ?`,
		owner, ms(db.now()), 2*len(query))
}

// rescore ranks the (id, float16 vector) rows of q by cosine distance to query
// and keeps the k nearest.
func (db *DB) rescore(ctx context.Context, query []float32, k int, q string, args ...any) ([]MemoryHit, error) {
	rows, err := db.pool.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: knn memories: %w", err)
	}
	defer rows.Close()
	qn := norm(query)
	var hits []MemoryHit
	var blob []byte
	for rows.Next() {
		var h MemoryHit
		if err := rows.Scan(&h.ID, &blob); err != nil {
			return nil, fmt.Errorf("store: knn memories: %w", err)
		}
		h.Distance = halfCosineDistance(query, qn, blob)
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: knn memories: %w", err)
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Distance != hits[j].Distance {
			return hits[i].Distance < hits[j].Distance
		}
		return hits[i].ID < hits[j].ID
	})
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}

// ScrubMemoryTexts replaces each of texts, where owner's recorded spans or tool
// results hold it (as is or JSON-escaped), with "[forgotten memory]": a forgotten
// memory must not live on in the trace of a run that used it or in a memory_search
// result. Chat messages the user or the assistant wrote are left alone: forgetting a
// memory does not rewrite the chat. It returns how many rows changed.
func (db *DB) ScrubMemoryTexts(ctx context.Context, owner int64, texts []string) (int64, error) {
	const mark = "[forgotten memory]"
	var forms []string
	seen := map[string]bool{}
	for _, t := range texts {
		for _, f := range jsonForms(t) {
			if f != "" && !seen[f] {
				seen[f] = true
				forms = append(forms, f)
			}
		}
	}
	var n int64
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for _, f := range forms {
			for _, q := range []string{
				`UPDATE spans SET data = replace(data, ?1, ?2) WHERE instr(data, ?1) > 0
					AND run_id IN (SELECT id FROM runs WHERE owner_id = ?3)`,
				`UPDATE messages SET content = replace(content, ?1, ?2) WHERE role = 'tool' AND instr(content, ?1) > 0
					AND session_id IN (SELECT id FROM sessions WHERE owner_id = ?3)`,
			} {
				res, err := tx.ExecContext(ctx, q, f, mark, owner)
				if err != nil {
					return err
				}
				k, _ := res.RowsAffected()
				n += k
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: scrub memory texts: %w", err)
	}
	return n, nil
}

// jsonForms is text as it may appear in stored JSON: as is, and escaped with and
// without HTML escaping (quotes stripped).
func jsonForms(text string) []string {
	out := []string{text}
	if b, err := json.Marshal(text); err == nil {
		out = append(out, string(b[1:len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(text) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		out = append(out, string(b[1:len(b)-1]))
	}
	return out
}
