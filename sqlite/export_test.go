package sqlite

import "fmt"

// LimitPages caps the database at its size now and extra pages more, as a
// full disk would: a write that needs more pages fails with SQLite's own
// "database or disk is full" (SQLITE_FULL), and a write that fits still
// succeeds. It returns the cap.
func (s *Store) LimitPages(extra int) (int, error) {
	var n int
	if err := s.write.QueryRow(`PRAGMA page_count`).Scan(&n); err != nil {
		return 0, err
	}
	if err := s.write.QueryRow(fmt.Sprintf(`PRAGMA max_page_count = %d`, n+extra)).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}
