//go:build unix

package statelog

import (
	"syscall"
	"unsafe"
)

// allocRun returns an empty run of a bulk load with room for refs records
// and arenaBytes of keys and values, in one anonymous mapping outside the
// Go heap, and that mapping, which freeRun releases.
//
// The run is most of what a restore holds, for as long as it fetches. On
// the heap it would count toward the garbage collector's goal, which lets
// the heap grow to twice what is live: two restores' runs of 40 MB each
// made about 160 MB of a restore's peak RSS. Outside it, the run counts
// once, and only the pages its records reach, so the headroom reserve
// gives it costs nothing until used. The refs hold no pointers, so the
// collector need not see them. When the mapping fails the run is on the
// heap, and mem is nil.
func allocRun(refs, arenaBytes int) (r []bulkRef, arena, mem []byte) {
	refBytes := refs * bulkRefBytes // a multiple of 8, so the arena stays aligned
	if refs > 0 {
		mem, err := syscall.Mmap(-1, 0, refBytes+arenaBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err == nil {
			r = unsafe.Slice((*bulkRef)(unsafe.Pointer(unsafe.SliceData(mem))), refs)[:0]
			return r, mem[refBytes:refBytes:len(mem)], mem
		}
	}
	return make([]bulkRef, 0, refs), make([]byte, 0, arenaBytes), nil
}

// freeRun releases a mapping of allocRun; nil is a no-op. No slice into
// it may be used afterwards.
func freeRun(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
