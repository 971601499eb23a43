package storetest_test

import (
	"testing"

	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/statelog/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.RunBytes(t, func(t *testing.T) statelog.Bytes { return &statelog.Memory{} })
}
