//go:build !unix

package main

import (
	"os"
	"time"
)

// cpuTime is not measured on this platform: CPU columns read 0.
func cpuTime() time.Duration { return 0 }

// peakRSS is not measured on this platform: the column reads 0.
func peakRSS(*os.ProcessState) int64 { return 0 }
