"""Small helpers every stage shares: atomic file writes, progress lines, offline settings, sandbox token counting."""
