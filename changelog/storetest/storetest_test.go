package storetest_test

import (
	"testing"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/changelog/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.RunBytes(t, func(t *testing.T) changelog.Bytes { return &changelog.Memory{} })
}
