package statelog

import (
	"runtime/pprof"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
)

func hwm() {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			fmt.Print(l, "  ")
		}
	}
}

func TestZZBulkExp(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EXP_N"))
	if n == 0 {
		t.Skip()
	}
	parts, _ := strconv.Atoi(os.Getenv("EXP_P"))
	parts = max(parts, 1)
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fmt.Print("idle: ")
	hwm()
	fmt.Println()
	const batch = 30000
	var ru0 syscall.Rusage
	syscall.Getrusage(0, &ru0)
	start := time.Now()
	keys := make([]byte, batch*8)
	val := []byte("12345678")
	entries := make([]Entry, batch)
	for p := 0; p < parts; p++ {
		s := db.Space("counts", int32(p))
		b, err := db.NewBulk(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		per := n / parts
		for i := 0; i < per; i += batch {
			m := min(batch, per-i)
			for j := 0; j < m; j++ {
				k := keys[j*8 : j*8+8]
				binary.BigEndian.PutUint64(k, uint64(i+j+p*per)*0x9E3779B97F4A7C15)
				entries[j] = Entry{Key: k, Value: val}
			}
			if err := b.Add(entries[:m]); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Finish(int64(per), time.Now(), ""); err != nil {
			t.Fatal(err)
		}
		if b.Fallback {
			t.Fatal("fallback")
		}
		if p == parts-1 {
			runtime.GC()
			f, _ := os.Create("/tmp/heap5.prof")
			pprof.WriteHeapProfile(f)
			f.Close()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("part %d: heapInuse=%dM heapSys=%dM sys=%dM ", p, ms.HeapInuse>>20, ms.HeapSys>>20, ms.Sys>>20)
		hwm()
		fmt.Println()
	}
	el := time.Since(start)
	var ru syscall.Rusage
	syscall.Getrusage(0, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	fmt.Printf("bulk n=%d parts=%d elapsed=%v rate=%.0f/s cpu=%v ", n, parts, el, float64(n)/el.Seconds(), cpu)
	hwm()
	fmt.Println()
}
