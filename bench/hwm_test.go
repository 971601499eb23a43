package main

import (
	"os"
	"runtime"
	"testing"
)

// TestHWMWatchReadsTheProcessesPeak: on Linux the watcher reads a running
// process's VmHWM (here the test's own), a figure at least as large as
// the memory it just touched; elsewhere it reads 0.
func TestHWMWatchReadsTheProcessesPeak(t *testing.T) {
	if runtime.GOOS != "linux" {
		if got := hwmWatch(os.Getpid())(); got != 0 {
			t.Fatalf("hwmWatch = %d off Linux, want 0", got)
		}
		return
	}
	stop := hwmWatch(os.Getpid())
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	got := stop()
	runtime.KeepAlive(buf)
	if got < 64<<20 {
		t.Fatalf("hwmWatch = %d bytes after touching 64 MiB", got)
	}
	if got := readHWM("/proc/0/none"); got != 0 {
		t.Fatalf("readHWM of a missing file = %d, want 0", got)
	}
}
