package nat

// SyncResult says what one Sync did.
type SyncResult struct {
	// Full: the table was replaced as a whole (first sync, after a
	// failure, after RequestFull, when the canary was gone, when the
	// egress range changed, or when an incremental transaction failed).
	Full bool
	// CanaryMissing: the table was found gone (an outside flush) at a
	// sync after the first.
	CanaryMissing bool
	// Added and Removed count map and set elements written; for a full
	// sync Added is every element.
	Added, Removed int
	// Elements is the number of elements the table holds afterwards.
	Elements int
}
