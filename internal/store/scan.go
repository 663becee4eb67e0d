package store

import "database/sql"

// scanner is what *sql.Row and *sql.Rows have in common, so that one scan
// function serves a single-row query and a list. An alias, so that the scan
// functions' types match scanAll's parameter exactly.
type scanner = interface{ Scan(...any) error }

// scanAll scans every row with scan, closes rows and reports rows.Err: the loop
// each list query would otherwise repeat.
func scanAll[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	return appendRows[T](nil, rows, scan)
}

// appendRows is scanAll appending to dst, for hot paths that preallocate.
func appendRows[T any](dst []T, rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		dst = append(dst, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return dst, nil
}
