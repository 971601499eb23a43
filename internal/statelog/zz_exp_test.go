package statelog

import (
	"fmt"
	"os"
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
	all := make([][]Entry, parts)
	for p := 0; p < parts; p++ {
		per := n / parts
		for j := 0; j < per; j++ {
			k := fmt.Appendf(nil, "r%d", uint64(j+p*per)*0x9E3779B97F4A7C15%uint64(n))
			all[p] = append(all[p], Entry{Key: k, Value: []byte("12345678")})
		}
	}
	var ru0 syscall.Rusage
	syscall.Getrusage(0, &ru0)
	start := time.Now()
	for p := 0; p < parts; p++ {
		s := db.Space("counts", int32(p))
		b, err := db.NewBulk(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		per := n / parts
		for i := 0; i < per; i += batch {
			if err := b.Add(all[p][i:min(i+batch, per)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Finish(int64(per), time.Now(), ""); err != nil {
			t.Fatal(err)
		}
		if b.Fallback {
			t.Fatal("fallback")
		}
	}
	el := time.Since(start)
	var ru syscall.Rusage
	syscall.Getrusage(0, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	fmt.Printf("bulk n=%d parts=%d elapsed=%v rate=%.0f/s cpu=%v ", n, parts, el, float64(n)/el.Seconds(), cpu)
	hwm()
	fmt.Println()
}
