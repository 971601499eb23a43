package graph

// LegalName reports whether s is a legal name for a topic, an application
// id, a node or a store: not empty, not "." or "..", and only letters,
// digits, '.', '_' and '-' (what Kafka allows in a topic name, which
// weir derives from the others).
func LegalName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
