package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// hwmWatch follows the peak resident memory of the running process pid
// (VmHWM in /proc/<pid>/status, which a new program starts afresh at
// exec) every 50 ms until stop, which returns the largest value read, in
// bytes; 0 where /proc cannot tell. The child's ru_maxrss cannot serve:
// on Linux it starts from the memory of the process that forked it, so a
// bench of a few GB reports its own size for any smaller child.
func hwmWatch(pid int) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	finished := make(chan struct{})
	path := fmt.Sprintf("/proc/%d/status", pid)
	go func() {
		defer close(finished)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		read := func() {
			if v := readHWM(path); v > peak.Load() {
				peak.Store(v)
			}
		}
		for {
			read()
			select {
			case <-done:
				read() // a process still running has grown since
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

// readHWM returns the VmHWM line of a /proc status file in bytes, or 0.
func readHWM(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
