//go:build !unix

package statelog

// allocRun returns an empty run of a bulk load with room for refs records
// and arenaBytes of keys and values. Without mmap the run is on the heap,
// and mem is nil (see the unix version).
func allocRun(refs, arenaBytes int) (r []bulkRef, arena, mem []byte) {
	return make([]bulkRef, 0, refs), make([]byte, 0, arenaBytes), nil
}

// freeRun is a no-op: the heap frees the run.
func freeRun(mem []byte) {}
